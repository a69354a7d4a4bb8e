"""The ``local`` driver: each box is a tmpfs in a privileged helper's mount namespace, each command a fresh
process tree in new user, pid, net, mount, ipc and uts namespaces (see ``launcher/server.py``). A box with hosts
gets an egress proxy per command, reached from inside the command's network namespace (see ``egress_proxy.py``).

Development only: ``MAINSDK_ENV=production`` refuses it (MAIN-SANDBOX-0011).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import inspect
import json
import os
import secrets
import shutil
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import attrs
from mainsdk import arguments
from mainsdk.config import AppConfig, Permissions, parse_app_config
from mainsdk.driver import (
    DRIVER_UNAVAILABLE,
    INVALID_OPTION,
    KERNEL_PACKAGES,
    LANGUAGE_PROGRAMS,
    LANGUAGES,
    NO_SESSION,
    WORK_DIR,
    BoxGone,
    BoxSpec,
    Capabilities,
    Collected,
    Command,
    ExecOutcome,
    Folder,
    NetworkPolicy,
    NetworkReach,
    OutFile,
    OutputSink,
    SandboxError,
    start_line_of,
)
from mainsdk.hookspecs import hookimpl
from mainsdk.plugins import DriverHookError
from mainsdk_driverkit.host_tools import absolute_path
from mainsdk_driverkit.node_sets import NODE_KERNEL_SETS, ensure_node_set

from mainsdk_local.checkpoints import CheckpointHooks, snapshot_gone
from mainsdk_local.config import DEFAULT_POOL, LAUNCHERS, MAX_POOL, LocalPrograms
from mainsdk_local.criu import memory_why
from mainsdk_local.egress_proxy import PROXY_USER, EgressPolicy, EgressProxy, check_resolve_mapping, proxy_environment
from mainsdk_local.egress_tls import (
    TRUST_BUNDLE,
    TRUST_FOLDER,
    BoxAuthority,
    system_trust,
    trust_environment,
    upstream_context,
)
from mainsdk_local.launcher.common import KERNEL_SITE, NODE_KERNEL_SITE
from mainsdk_local.launcher.protocol import MAX_HEADER, PROXY_PORT
from mainsdk_local.launcher_client import ExecSpec, Launcher, LauncherBox, LauncherError, OpenFailed
from mainsdk_local.packages import EnvBuilder
from mainsdk_local.programs import Program, ProgramCache

DRIVER_ID = "local"
DEFAULT_MAX_PROCESSES = 256
# What MAIN-SANDBOX-0006 tells the user to check for this driver: there is no provider and no token here.
LOCAL_REMEDY = (
    "check the local launcher: its messages on this process's stderr (mainsdk-local launcher: ...), that the "
    "python3 running the app can start it, that user namespaces are enabled (sysctl user.max_user_namespaces > 0), "
    "and that /tmp has free space"
)
# Which language a program name serves, to read sandbox.local.
_PROGRAM_LANGUAGE = {program: language for language, program in LANGUAGE_PROGRAMS.items()}
# The languages the launcher's warm pool has an interpreter kind for (launcher/pool.py, launcher/node_pool.py); any
# other command may take a pre-exec box (launcher/pool_exec.py).
_WARM_LANGUAGES: dict[str, Literal["python", "node", "exec"]] = {"python": "python", "node": "node"}
# The program a cell kernel's executor runs, by cell language: cells obey permissions.processes and sandbox.local
# for it as runs do (the kernel itself is sandbox.local.python).
_EXECUTOR_LANGUAGE = {"javascript": "node", "typescript": "node", "bash": "bash"}
# Without a writable cgroup, memory is RLIMIT_AS, per process. V8 reserves about 750 MiB of address space at start
# (its code range, its heap's cage, thread stacks: measured with node 20, `ulimit -v` until `node -e 1` starts),
# none of it resident, so node dies at the 512MB default (SIGTRAP, "Failed to reserve virtual memory for
# CodeRange"). A node process gets the limit plus this reserve as its address space, and its heap is held to the
# limit itself with --max-old-space-size: memory stays bounded, node starts (mainsdk_local/README.md, "Limits").
NODE_ADDRESS_RESERVE = 1 << 30
KEEP_IDLE = 300.0  # a shared launcher's kept session whose opener named no idle time (core always names one)


@attrs.frozen
class LocalBox:
    """A started box: the launcher's box, the memory limit its commands get, and the hosts they may reach."""

    id: str
    box: LauncherBox
    memory: int
    egress: EgressPolicy | None = None  # None: no hosts, no proxy, nothing out
    packages: str | None = None  # the built env's site-packages, bound over the python's own; None: no packages
    # A one-shot run's box: the bytes of /out its exec asks for (core's limits.files, what it collects), so the
    # server collects and closes right after the run, with no request between. None: a session's box.
    one_shot_collect: int | None = None
    # The cell kernel's packages (IPython) on the host, once a cell asked for them: bound read-only at KERNEL_SITE
    # in the box's python execs from then on. A holder, set once per box by mainsdk_driver_kernel_site.
    kernel: list[str] = attrs.field(factory=list, eq=False)
    # The kernel's node packages (typescript) on the host, the same way, at NODE_KERNEL_SITE.
    node_kernel: list[str] = attrs.field(factory=list, eq=False)
    tenant: str = ""  # whose session it is: a shared launcher records it with the box and its snapshots


@functools.cache
def _node_strips_types() -> bool | None:
    """Whether this machine's node strips TypeScript types itself (node >= 22.13); None: there is no node."""
    node = shutil.which("node")
    if node is None:
        return None
    try:
        version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=10, check=True).stdout
        major, minor = (int(part) for part in version.strip().lstrip("v").split(".")[:2])
    except (OSError, subprocess.SubprocessError, ValueError):
        return False
    return (major, minor) >= (22, 13)


@functools.cache
def _cell_languages(isolation: str) -> frozenset[str]:
    """The cell languages of a local box, whose programs are this machine's: the kernel's Python and bash
    executors, JavaScript where node is on the PATH, TypeScript where that node strips types itself or, in a
    namespace box, through the kernel's typescript set (built with npm, bound read-only). Looked up once per
    process, as ``_node_strips_types`` is: every cell asks for the capabilities (four PATH searches a cell,
    about a third of a warm cell's time in the app)."""
    languages = {"python", "bash"} if shutil.which("bash") else {"python"}
    strips = _node_strips_types()
    if strips is not None:
        languages.add("javascript")
        if strips or (isolation == "namespace" and shutil.which("npm", path=absolute_path()) is not None):
            languages.add("typescript")
    return frozenset(languages)


class LocalDriver(CheckpointHooks):
    """The ``local`` driver plugin. Build it with ``local_sandbox_driver`` or from ``main.yaml``."""

    def __init__(
        self,
        *,
        permissions: Permissions | None = None,
        programs: Mapping[str, str] | None = None,
        restrict_processes: bool = True,
        max_processes: int = DEFAULT_MAX_PROCESSES,
        force_weak: bool = False,
        resolve: Mapping[str, str] | None = None,
        pool: int = DEFAULT_POOL,
        upstream_ca: str | None = None,
        criu: str = "criu",
        launcher: str = "private",
        shared_folder: str | None = None,
    ) -> None:
        self._criu = criu  # looked for by the capabilities, which say why memory snapshots are not kept
        self._permissions = permissions or Permissions()
        self._resolve = check_resolve_mapping(resolve)
        self._upstream_ca = upstream_ca
        self._upstream_tls: Any = None  # made on the first box with egress headers (ssl.SSLContext)
        self._programs = {"python": "python3", "node": "node", "bash": "bash", **(programs or {})}
        self._restrict = restrict_processes
        self._max_processes = max_processes
        self._launcher = Launcher(
            force_weak=force_weak, pool=pool, shared=launcher == "shared", shared_folder=shared_folder
        )
        self._snapshot_tenants: dict[str, str] = {}  # a shared launcher's snapshots this process made or found
        self._cache = ProgramCache()
        self.envs = EnvBuilder()
        self._ready: dict[tuple[str, ...], str] = {}  # pins -> their site-packages, once built or found
        self._capabilities: tuple[Mapping[str, Any], Capabilities] | None = None  # by the hello they came from

    @hookimpl
    def mainsdk_driver_capabilities(self) -> Capabilities:
        # Core asks on every cell and command (twice for a cell): they are made once per launcher server, whose
        # hello they come from (a new server, after one died, is asked again).
        try:
            hello = self._launcher.hello
        except LauncherError as exc:
            raise SandboxError(
                DRIVER_UNAVAILABLE, f"the local driver's launcher did not start: {exc}; {LOCAL_REMEDY}"
            ) from exc
        if self._capabilities is not None and self._capabilities[0] is hello:
            return self._capabilities[1]
        capabilities = self._capabilities_now()
        self._capabilities = (hello, capabilities)
        return capabilities

    def _capabilities_now(self) -> Capabilities:
        try:
            isolation = self._launcher.isolation
            enforcement = self._launcher.memory_enforcement
        except LauncherError as exc:
            raise SandboxError(
                DRIVER_UNAVAILABLE, f"the local driver's launcher did not start: {exc}; {LOCAL_REMEDY}"
            ) from exc
        return Capabilities(
            isolation=isolation,
            languages=frozenset(LANGUAGES),  # each through sandbox.local's program for it
            network=True,
            wildcard_hosts=True,
            memory_limit=True,
            # A cgroup per command holds the whole tree; without a writable one, RLIMIT_AS holds per process.
            memory_limit_scope="process" if enforcement == "rlimit" else "tree",
            # /work, /out and /tmp (HOME in it) on the box's own tmpfs of permissions.disk.temp.max; weak mode has
            # no /tmp of its own (TMPDIR and HOME are folders of the box's private directory) and only RLIMIT_FSIZE.
            private_tmp=isolation == "namespace",
            disk_limit=isolation == "namespace",
            sessions=True,
            production=False,
            # The box's only way out is its proxy, which checks every request's or CONNECT's host, on any port.
            network_reach=NetworkReach(filtered=(("http", None), ("https", None))),
            reports_signals=True,
            outage_remedy=LOCAL_REMEDY,
            cells=True,
            cells_languages=_cell_languages(isolation),
            background=True,
            # Package envs reach the box bound over the interpreter's site-packages, in the run's mount namespace;
            # weak mode has none, and would have to loosen -E or -s to add a path: it declares no packages.
            packages=isolation == "namespace",
            # The proxy sets egress headers over TLS it terminates with a CA made per box, trusted through a bundle
            # in the box's /work; weak mode has no fixed /work path to name it by, and declares none.
            egress_headers=isolation == "namespace",
            # Overlayfs layers (constant time whatever the files) where the launcher runs as root in namespaces;
            # the cgroup freezer pauses a box keeping its memory, while the launcher lives.
            checkpoint_kinds=self._launcher.checkpoint_kinds,
            checkpoint_why=self._checkpoint_why(isolation),
            pause=self._launcher.can_pause,
            pause_keeps_memory=self._launcher.can_pause,
        )

    def _checkpoint_why(self, isolation: str) -> str:
        # Why each kind is missing: filesystem as the launcher found it, memory after looking for a working CRIU.
        hello = self._launcher.hello
        why = [] if "filesystem" in self._launcher.checkpoint_kinds else [str(hello.get("checkpoints_why"))]
        return "; ".join([*why, memory_why(self._criu, isolation, int(hello.get("landlock") or 0))])

    @hookimpl
    def mainsdk_network_policy(self, hosts: Sequence[str]) -> NetworkPolicy:
        # What the box's proxy lets through; the hosts arrive checked by core. The start hook gets it back.
        return {"hosts": list(hosts)}

    @hookimpl
    async def mainsdk_driver_start(self, spec: BoxSpec) -> LocalBox:
        # Built (or found in the cache) before the box opens: a set that cannot be built runs nothing.
        packages = await self._packages(spec.packages) if spec.packages else None
        max_files = box_file_count(spec.limits.memory)
        max_sockets = box_socket_count(spec.limits.memory)
        # The proxy lets through exactly the policy core handed over (and audited); none: nothing out.
        hosts = tuple((spec.network_policy or {}).get("hosts", ()))
        egress = EgressPolicy(hosts, self._resolve) if hosts else None
        files = spec.files
        if spec.egress and egress is not None:
            egress, trust = self._egress_headers(spec, egress)
            files = {**spec.files, TRUST_BUNDLE: trust}
        if not spec.session:
            # A one-shot run: the open and the files go out now unanswered, the exec follows them and asks
            # for /out and the close too, so the whole run is one exchange with the launcher (README, "The
            # cold path"). A failed open or file is raised by the exec, as this hook would have (_open_failed).
            box = await self._launcher.open_box(
                disk_bytes=spec.limits.disk,
                max_files=max_files,
                memory_bytes=spec.limits.memory,
                max_sockets=max_sockets,
                one_shot=True,
                files=files,
            )
            return LocalBox(spec.id, box, spec.limits.memory, egress, packages, one_shot_collect=spec.limits.files)
        try:
            box = await self._launcher.open_box(
                disk_bytes=spec.limits.disk,
                session=True,
                max_files=max_files,
                memory_bytes=spec.limits.memory,  # a session's box: one cgroup its commands and background share
                max_sockets=max_sockets,
                snapshot=spec.snapshot,
                # A shared launcher keeps it for the user's other processes, by its id and tenant.
                keep=(spec.id, spec.tenant, spec.idle or KEEP_IDLE) if self._launcher.shared else None,
            )
        except ValueError:
            if spec.snapshot is None:
                raise
            raise snapshot_gone(spec.snapshot) from None
        try:
            for path, data in files.items():
                await box.write_file(path, data)
        except BaseException:
            await box.close()
            raise
        return LocalBox(spec.id, box, spec.limits.memory, egress, packages, tenant=spec.tenant)

    @hookimpl
    async def mainsdk_driver_reconnect(self, spec: BoxSpec) -> LocalBox | None:
        """Session ``spec.id``'s box, kept by a shared launcher for ``spec.tenant``; None with a private one.

        The box runs commands with ``spec``'s limits (the config's defaults), no hosts and no packages: what
        its opener passed stays with the opener. What that process ran in it (interpreters, background
        processes) died with its channel, or lives on in it while it does; cells here start their own.
        """
        try:
            box = await self._launcher.attach_box(spec.id, spec.tenant)
        except LauncherError as exc:
            raise SandboxError(
                DRIVER_UNAVAILABLE, f"the local driver's shared launcher did not answer: {exc}; {LOCAL_REMEDY}"
            ) from exc
        return None if box is None else LocalBox(spec.id, box, spec.limits.memory, tenant=spec.tenant)

    @hookimpl
    async def mainsdk_driver_paused(self, box: LocalBox) -> bool:
        return box.box.paused

    def _egress_headers(self, spec: BoxSpec, egress: EgressPolicy) -> tuple[EgressPolicy, bytes]:
        """The box's policy with its egress headers and a CA made for it, and the trust bundle the box gets."""
        if self._launcher.isolation != "namespace":
            raise SandboxError(INVALID_OPTION, "egress: the local driver in weak mode cannot add headers at the egress")
        if self._upstream_tls is None:
            self._upstream_tls = upstream_context(self._upstream_ca)
        _check_egress_box(spec)
        authority = BoxAuthority(rule.host for rule in spec.egress)
        bundle = authority.bundle()
        headers = {rule.host: tuple((h.name, h.value) for h in rule.headers) for rule in spec.egress}
        policy = attrs.evolve(egress, headers=headers, authority=authority, upstream_tls=self._upstream_tls)
        return policy, bundle

    async def _packages(self, pins: Sequence[str]) -> str:
        """The site-packages folder of ``pins`` for this driver's python, built on the host the first time."""
        if self._launcher.isolation != "namespace":
            raise SandboxError(INVALID_OPTION, "packages: the local driver in weak mode cannot put packages in a box")
        _, name = self._permitted_name(LANGUAGE_PROGRAMS["python"])
        ready = self._ready.get(tuple(pins))
        if ready is not None and os.path.isdir(ready):
            return ready  # no thread hop on the path every later run takes (benchmarks/packages.py)
        program = await asyncio.to_thread(self._cache.get, "python", name)
        if not program.hidden_paths:
            raise SandboxError(
                INVALID_OPTION,
                f"packages: sandbox.local.python {name!r} has no site-packages folder to put packages in; "
                "use an interpreter that has one (python3 -c 'import site; print(site.getsitepackages())')",
            )
        site = await asyncio.to_thread(self.envs.ensure, program, pins)
        self._ready[tuple(pins)] = site
        return site

    async def _node_kernel_site(self, box: LocalBox) -> str | None:
        # TypeScript: node's own type stripping where it has it (no set); otherwise typescript from the kernel's
        # node set, built once on the host with npm (mainsdk_driverkit.node_sets) and bound read-only.
        if _node_strips_types() or self._launcher.isolation != "namespace":
            return None
        if not box.node_kernel:
            box.node_kernel.append(await asyncio.to_thread(ensure_node_set, NODE_KERNEL_SETS["typescript"]))
        return NODE_KERNEL_SITE

    @hookimpl
    async def mainsdk_driver_kernel_site(self, box: LocalBox, language: str) -> str | None:
        # A cell's executor is a program the box starts like any other: the same permissions.processes and
        # sandbox.local program as a run of that language, checked before the interpreter starts.
        executor = _EXECUTOR_LANGUAGE.get(language)
        if executor is not None:
            await self._program(LANGUAGE_PROGRAMS[executor])
        # Built once on the host with the same builder as sandbox.packages (its cache, wheels only, host tools
        # isolated), then bound read-only at a path of its own: never over the user's site-packages.
        if language == "typescript":
            return await self._node_kernel_site(box)
        pins = KERNEL_PACKAGES.get(language)
        if not pins or self._launcher.isolation != "namespace":
            return None  # weak mode binds nothing: its cells run plain Python
        if not box.kernel:
            _, name = self._permitted_name(LANGUAGE_PROGRAMS["python"])
            program = await self._program(LANGUAGE_PROGRAMS["python"])
            version = tuple(int(part) for part in program.version.split(" ", 1)[0].split(".")[:2] if part.isdigit())
            if version < (3, 11):
                raise SandboxError(
                    INVALID_OPTION,
                    f"cells: sandbox.local.python {name!r} ({program.executable}, python "
                    f"{program.version.split(' ', 1)[0]}) cannot run the cells' IPython, which needs Python 3.11 "
                    "or newer; point sandbox.local.python at a newer interpreter in main.yaml",
                    ran=False,
                )
            purpose = "the cells' IPython kernel (its first Python cell)"
            box.kernel.append(await asyncio.to_thread(self.envs.ensure, program, pins, purpose))
        return KERNEL_SITE

    @hookimpl
    def mainsdk_driver_check(self, command: Command, spec: BoxSpec) -> None:
        # A program the config does not permit is refused before any box starts.
        self._permitted_name(command.program)
        if spec.egress:
            _check_egress_box(spec)

    @hookimpl
    async def mainsdk_driver_exec(self, box: LocalBox, command: Command, output: OutputSink) -> ExecOutcome:
        _alive(box)
        program = await self._program(command.program)
        env = dict(command.env)
        args = command.args
        memory = box.memory
        readonly = program.readonly_paths
        node = _PROGRAM_LANGUAGE.get(command.program) == "node"
        executor = _EXECUTOR_LANGUAGE.get(_kernel_language(command) or "")
        if executor is not None:
            # A cell kernel: its executor is found on the box's PATH; put sandbox.local's program for it first.
            found = await self._program(LANGUAGE_PROGRAMS[executor])
            readonly = tuple(dict.fromkeys((*readonly, *found.readonly_paths)))
            env["PATH"] = _path_with(found.executable, executor, env.get("PATH"))
            node = executor == "node"
        if node and self._launcher.memory_enforcement == "rlimit":
            memory += NODE_ADDRESS_RESERVE
            heap = f"--max-old-space-size={max(box.memory >> 20, 16)}"
            if executor is None:
                args = (heap, *args)
            else:  # the kernel's node executor inherits it (and the reserve) from the kernel
                env["NODE_OPTIONS"] = f"{env['NODE_OPTIONS']} {heap}" if env.get("NODE_OPTIONS") else heap
        if box.egress is not None and box.egress.headers:
            env.update(trust_environment(WORK_DIR))  # the box's bundle: the system's CAs and its own
        _check_encoded_size(command.args, env)
        proxy, weak_port = self._start_proxy(box, output, env) if box.egress is not None else (None, None)
        try:
            exec_spec = ExecSpec(
                argv=(program.executable, *args),
                env=env,
                timeout=command.timeout,
                memory_bytes=memory,
                max_processes=self._max_processes,
                stdin=command.stdin,
                readonly_paths=readonly,
                hidden_paths=program.hidden_paths,
                overlays=_package_overlay(box, command.program, program),
                proxy=proxy is not None and box.box.namespaces,
                proxy_port=weak_port,
                # Any command may run on a warm pool entry: a python or node command on a warm interpreter when its
                # shape allows, any on a box entered ahead that execs it; the launcher decides which, or cold.
                warm=_WARM_LANGUAGES.get(_PROGRAM_LANGUAGE.get(command.program, ""), "exec"),
            )
            try:
                result = await box.box.exec(
                    exec_spec,
                    on_stdout=output.stdout,
                    on_stderr=output.stderr,
                    on_listener=proxy.serve if exec_spec.proxy and proxy is not None else None,
                    then_collect=box.one_shot_collect,
                    stdin_stream=command.input,
                )
            except OpenFailed as exc:
                raise _open_failed(exc.cause) from exc.cause
            except ValueError as exc:
                # The launcher checks a request before it runs anything; core checked the call's part already, so
                # what it refuses is the interpreter's place (under /tmp, which the box's own /tmp hides): a
                # mistake no retry fixes, not an outage of unknown effect.
                language = _PROGRAM_LANGUAGE.get(command.program, command.program)
                raise SandboxError(
                    INVALID_OPTION,
                    f"sandbox.local.{language}: the local launcher refused to run {program.executable}, so nothing "
                    f"ran: {exc}",
                    ran=False,
                ) from exc
            except LauncherError as exc:
                if exc.ran is not False:
                    raise  # core judges it: the command may have run
                if exc.stage == "execve" and exc.errno in (errno.EACCES, errno.EPERM):
                    raise _not_executable(box, command.program, program.executable) from exc
                # The launcher could not start it (a cgroup it could not make, a worker that died first):
                # nothing ran, so it is safe to retry; never run with a weaker limit instead.
                raise SandboxError(
                    DRIVER_UNAVAILABLE,
                    f"the local launcher could not start the command, which did not run: {exc}; {LOCAL_REMEDY}",
                    ran=False,
                ) from exc
        finally:
            if proxy is not None:
                proxy.close()  # the command's tree is dead: its proxy and connections go with it
        refused = tuple(proxy.refused) if proxy is not None else ()
        return ExecOutcome(
            exit_code=result.exit_code,
            stop=result.stop,
            duration=result.duration,
            hosts_refused=refused,
            signal=result.signal,  # the launcher's waitpid status, in the box's (Linux) numbering
        )

    def _start_proxy(self, box: LocalBox, output: OutputSink, env: dict[str, str]) -> tuple[EgressProxy, int | None]:
        """The command's proxy, and the variables that point the code at it (added to ``env``).

        Namespace mode: the listener is 127.0.0.1:PROXY_PORT inside the command's own
        network namespace, handed over once it exists. Weak mode: a listener on the
        host's loopback, usable only with this command's password; its port is
        returned, the only one Landlock then lets the code connect to.
        """
        assert box.egress is not None
        sink: Callable[..., None] = getattr(output, "host_refused", lambda host: None)
        takes_why = "why" in inspect.signature(sink).parameters  # core's sinks; OutputSink's protocol has host only

        def note(host: str, why: str) -> None:
            # A host that was given but refused anyway says why, where the sink takes it.
            if why and takes_why:
                sink(host, why=why)
            else:
                sink(host)

        if box.box.namespaces:
            proxy = EgressProxy(box.egress, on_refused=note, label=box.id)
            url = f"http://127.0.0.1:{PROXY_PORT}"
            port = None
        else:
            password = secrets.token_urlsafe(18)
            proxy = EgressProxy(box.egress, on_refused=note, label=box.id, password=password)
            listener = socket.create_server(("127.0.0.1", 0))
            port = listener.getsockname()[1]
            url = f"http://{PROXY_USER}:{password}@127.0.0.1:{port}"
            proxy.serve(listener)
        env.update(proxy_environment(url, box.box.node_preload, env))
        return proxy, port

    @hookimpl
    async def mainsdk_driver_write_file(self, box: LocalBox, folder: Folder, path: str, data: bytes) -> None:
        _alive(box)
        await box.box.write_file(_launcher_path(folder, path), data)

    @hookimpl
    async def mainsdk_driver_read_file(self, box: LocalBox, folder: Folder, path: str) -> bytes:
        _alive(box)
        try:
            return await box.box.read_file(_launcher_path(folder, path))
        except OSError as exc:
            # Missing, a folder, a link or a FIFO: the file is not there to read. Not an outage to retry.
            raise SandboxError(NO_SESSION, f"no regular file {path!r} in the session ({exc.strerror})") from None

    @hookimpl
    async def mainsdk_driver_collect(self, box: LocalBox, max_bytes: int) -> Collected:
        try:
            found = await box.box.collect_out(max_bytes=max_bytes)
        except LauncherError:
            if not box.box.stalled:
                raise
            # The launcher stalled and was killed (the backstop), taking the box's files with it. The run's
            # output and exit stand; /out is reported as cut (stop "output" unless a limit stopped it first).
            return Collected(files=(), truncated=True, skipped=(("", "lost: the launcher stalled and was replaced"),))
        return Collected(
            files=tuple(OutFile(f.name, f.data) for f in found.files), truncated=found.truncated, skipped=found.skipped
        )

    @hookimpl
    async def mainsdk_driver_stop(self, box: LocalBox) -> None:
        await box.box.close()

    @hookimpl
    def mainsdk_driver_shutdown(self) -> None:
        self._launcher.close()

    def _permitted_name(self, program: str) -> tuple[str, str]:
        """The language and program name ``program`` maps to, if the config permits it."""
        language = _PROGRAM_LANGUAGE.get(program, program)
        name = self._programs.get(language, program)
        allowed = self._permissions.processes
        if self._restrict and (allowed is None or not _permitted(name, allowed)):
            # sandbox.local names the interpreters only: another program is named as the call gave it.
            what = f"sandbox.local.{language} {name!r}" if language in self._programs else f"program {name!r}"
            raise SandboxError(
                INVALID_OPTION,
                f"{what} is not under permissions.processes in main.yaml; "
                f"add it: permissions: {{ processes: [{name}] }}",
            )
        return language, name

    async def _program(self, program: str) -> Program:
        """The real interpreter for ``program``, if the config permits it."""
        language, name = self._permitted_name(program)
        # Resolved once (it runs the interpreter); every later exec takes it here, without a thread hop.
        cached = self._cache.cached(language, name)
        return cached if cached is not None else await asyncio.to_thread(self._cache.get, language, name)


def _not_executable(box: LocalBox, program_name: str, executable: str) -> SandboxError:
    """The box's user may not execute the interpreter: a mistake of the config, which no retry fixes (0001).

    Weak mode runs the code as the box's own host uid, so an interpreter under a folder only its owner may
    enter (a pyenv or venv under /root) cannot be executed there, though the app's user runs it.
    """
    language = _PROGRAM_LANGUAGE.get(program_name, program_name)
    who = f"the box's user (uid {box.box.host_uid})" if box.box.host_uid >= 0 else "the box's user"
    mode = "" if box.box.namespaces else " in weak mode (no namespaces: the code runs as that host uid)"
    example = "/usr/bin/python3" if language == "python" else f"/usr/bin/{language}"
    return SandboxError(
        INVALID_OPTION,
        f"sandbox.local.{language}: {who} may not execute the interpreter {executable}{mode}; make it and every "
        f"folder above it executable by others (chmod o+x), or set sandbox.local.{language} in main.yaml to an "
        f"interpreter it can run, like {example}",
        ran=False,
    )


def _kernel_language(command: Command) -> str | None:
    """The cell language of a cell kernel's command (``mainsdk.kernel_start``: the python kernel whose stdin
    carries its token, its package and a start line naming the language), or None for any other command."""
    if command.input is None or not command.stdin or _PROGRAM_LANGUAGE.get(command.program) != "python":
        return None
    start = start_line_of(command.stdin)
    language = start.get("language") if start is not None else None
    return language if isinstance(language, str) else None


def _path_with(executable: str, name: str, path: str | None) -> str:
    """The box's PATH with ``executable``'s folder first, where the kernel looks ``name`` up (the box has no PATH of
    its own: the default search path then follows)."""
    rest = path if path else os.defpath.lstrip(":")
    folder = os.path.dirname(executable)
    if os.path.basename(executable) != name:
        raise SandboxError(
            INVALID_OPTION,
            f"cells: sandbox.local.{_PROGRAM_LANGUAGE.get(name, name)} resolves to {executable}, which the cell "
            f"kernel cannot start as {name!r}; point it at a {name} binary named {name}, or run that code with "
            "session.run(...)",
            ran=False,
        )
    return rest if folder in rest.split(os.pathsep) else f"{folder}{os.pathsep}{rest}"


def _package_overlay(box: LocalBox, program_name: str, program: Program) -> tuple[tuple[str, str], ...]:
    """For python in a box with packages: its env over the first site-packages ``site`` reads (hidden otherwise);
    and the cell kernel's packages at KERNEL_SITE (node's at NODE_KERNEL_SITE) once a cell asked for them."""
    if _PROGRAM_LANGUAGE.get(program_name) != "python":
        return ()
    kernel: tuple[tuple[str, str], ...] = ((box.kernel[0], KERNEL_SITE),) if box.kernel else ()
    kernel += ((box.node_kernel[0], NODE_KERNEL_SITE),) if box.node_kernel else ()
    if box.packages is None or not program.hidden_paths:
        return kernel
    return ((box.packages, program.hidden_paths[0]), *kernel)


def _check_egress_box(spec: BoxSpec) -> None:
    """Refuse, before anything starts, a box with egress whose files take the trust bundle's place or room."""
    if any(path == TRUST_FOLDER or path.startswith(f"{TRUST_FOLDER}/") for path in spec.files):
        raise SandboxError(
            INVALID_OPTION,
            f"files: {TRUST_FOLDER}/ in the work folder holds the box's trust bundle when a run has egress; "
            "name your file otherwise",
        )
    needed = len(system_trust()) + 8192  # the system's CAs, and the box's own CA (and their pages)
    if sum(len(data) for data in spec.files.values()) + needed > spec.limits.disk:
        raise SandboxError(
            INVALID_OPTION,
            f"egress: the box's trust bundle ({needed // 1024} KB: the system's CAs and the box's own) does not "
            "fit permissions.disk.temp.max with the files; raise it in main.yaml",
        )


def _open_failed(cause: Exception) -> SandboxError:
    """A one-shot box's open or file failed, found by its exec: the error the start hook would have raised.

    Core turns a start hook's exception into this outage (``DriverHookError``); the code did not run, so it
    says so (``ran=False``) and a retry is as safe as it was.
    """
    return DriverHookError(DRIVER_ID, "mainsdk_driver_start", cause, LOCAL_REMEDY).nothing_ran()


def _launcher_path(folder: Folder, path: str) -> str:
    """How the launcher's wire names a file: relative to /work, or ``../out/x`` for /out (see launcher/boxes.py)."""
    return path if folder is Folder.WORK else f"../out/{path}"


def _alive(box: LocalBox) -> None:
    """Refuse a call on a box the launcher no longer has (it was killed or crashed): the box is gone for good."""
    if box.box.gone:
        raise BoxGone(
            "its box is gone with the local launcher, which stopped (killed or crashed); new runs start a new one"
        )


# An inode and its dentry on a tmpfs cost the kernel about 0.9 KiB (measured here) and no block, and in a session
# they outlive the command whose cgroup was charged for them: so a box holds at most as many files and folders
# as half its memory limit pays for at 1 KiB each (32,768 under 64 MiB, 262,144 under the default 512 MB).
_INODE_COST = 1 << 10


# A box holds at most this many inet sockets, where the launcher can bound them (root, cgroup2, BPF): one per
# 32 KiB of its memory limit, between 64 and 4096. A socket's own memory is charged to the box, but a connection
# not yet accept()ed is charged to nobody (about 7 KiB here, see _stages): with the count bound, what such
# connections can hold past the memory limit is at most about a quarter of it.
_SOCKET_COST = 32 << 10


def box_socket_count(memory_bytes: int) -> int:
    """The most inet sockets a box may hold at once, from its memory limit."""
    return min(4096, max(64, memory_bytes // _SOCKET_COST))


def box_file_count(memory_bytes: int) -> int:
    """The most files and folders a box's tmpfs may hold, from the memory limit that must also pay for them."""
    return max(1024, memory_bytes // (2 * _INODE_COST))


# The launcher's request header holds the arguments and environment JSON-escaped; a control character
# takes six bytes there. Core bounds what execve takes; this bounds what the encoding makes of it.
_ENCODED_BUDGET = MAX_HEADER - (64 << 10)


def _check_encoded_size(args: Sequence[str], env: Mapping[str, str]) -> None:
    """Refuse arguments and environment too large for the launcher once encoded: the caller's input, not an outage."""
    size = len(json.dumps([list(args), env], ensure_ascii=False).encode())
    if size > _ENCODED_BUDGET:
        raise SandboxError(
            INVALID_OPTION,
            f"args: the arguments and environment take {size:,} bytes once encoded for the local launcher "
            f"(control characters take six bytes each), past its {_ENCODED_BUDGET:,}; pass large or binary "
            "data as a file instead",
            ran=False,
        )


def _permitted(name: str, allowed: Sequence[str]) -> bool:
    base = name.rsplit("/", 1)[-1]
    return name in allowed or base in allowed


def local_sandbox_driver(
    *,
    permissions: Permissions | Mapping[str, Any] | None = None,
    programs: Mapping[str, str] | None = None,
    max_processes: int = DEFAULT_MAX_PROCESSES,
    force_weak: bool = False,
    resolve: Mapping[str, str] | None = None,
    pool: int = DEFAULT_POOL,
    upstream_ca: str | None = None,
    criu: str = "criu",
    launcher: str = "private",
) -> LocalDriver:
    """The ``local`` driver: a limited subprocess for development and tests.

    ``permissions`` is ``permissions`` of ``main.yaml`` (``config.permissions``, or
    the mapping itself, like ``{"processes": ["python3"]}``; the programs must be
    under ``processes`` when it is given); ``programs`` sets the ``python``,
    ``node`` and ``bash`` programs. ``max_processes`` caps the processes one
    command may have at once. ``force_weak`` runs without namespaces even where
    they exist (the result then says ``weak``); for testing that mode only.
    ``resolve`` maps host names to IP addresses for the proxy alone, bypassing
    DNS and the refusal of private addresses: ``{"api.example.test": "127.0.0.1"}``
    lets a test allow a server it started on loopback by name. A host must still
    be given to a run to be reached. ``pool`` is how many warm Python interpreters
    may wait idle for runs (``sandbox.local.pool``; 0: none, every run starts cold).
    ``upstream_ca`` (tests): the PEM of the only CA the proxy trusts for a real server's certificate when it
    sets egress headers, in place of the system's trust, like ``resolve`` for a server a test started.
    ``criu`` (``sandbox.local.criu``): the CRIU program looked for; the capabilities' ``checkpoint_why`` says what
    was found and why memory snapshots are not kept even so (``mainsdk_local.criu``).
    ``launcher``: ``private`` or ``shared`` (``sandbox.local.launcher``; mainsdk_local/README.md).
    """
    if launcher not in LAUNCHERS:
        raise arguments.invalid("launcher", f"must be one of {', '.join(LAUNCHERS)}, not {launcher!r:.40}")
    permissions = _permissions_argument(permissions)
    return LocalDriver(
        permissions=permissions,
        programs=_string_mapping(programs, "programs", "{'python': 'python3.12'}") or None,
        max_processes=arguments.count(max_processes, "max_processes", minimum=1, maximum=1 << 20),
        force_weak=arguments.boolean(force_weak, "force_weak"),
        resolve=_resolve_argument(resolve),
        pool=arguments.count(pool, "pool", minimum=0, maximum=MAX_POOL),
        restrict_processes=permissions is not None and permissions.processes is not None,
        upstream_ca=None if upstream_ca is None else arguments.text(upstream_ca, "upstream_ca"),
        criu=arguments.text(criu, "criu"),
        launcher=launcher,
    )


def _string_mapping(value: object, argument: str, example: str) -> dict[str, str]:
    """A mapping of non-empty strings to non-empty strings (``programs``, ``resolve``), checked as core checks one."""
    checked: dict[str, str] = {}
    for key, item in arguments.mapping(value, argument, example).items():
        checked[arguments.text(key, f"{argument} key")] = arguments.text(item, f"{argument}[{key!r}]")
    return checked


def _resolve_argument(resolve: object) -> dict[str, str] | None:
    """``resolve``: host name to IP address, each checked (a wildcard, an IP as a name, a non-IP are refused)."""
    mapping = _string_mapping(resolve, "resolve", "{'api.example.test': '127.0.0.1'}")
    try:
        return check_resolve_mapping(mapping) or None
    except ValueError as exc:
        raise arguments.invalid("resolve", str(exc).removeprefix("resolve: ")) from None


def _permissions_argument(permissions: object) -> Permissions | None:
    """``permissions``: a ``Permissions``, or the ``permissions:`` mapping of main.yaml, checked as the loader does."""
    if permissions is None or isinstance(permissions, Permissions):
        return permissions
    if isinstance(permissions, Mapping):
        unknown = [key for key in permissions if key not in ("processes", "disk")]
        if unknown:
            raise arguments.invalid(
                f"permissions.{unknown[0]}", "is not a key the local driver reads; use processes and disk"
            )
        return parse_app_config({"permissions": dict(permissions)}).permissions
    raise arguments.invalid(
        "permissions",
        f"must be config.permissions or a mapping like {{'processes': ['python3']}}, "
        f"not {arguments.type_name(permissions)}",
    )


def driver_from_config(config: AppConfig) -> LocalDriver:
    """The entry point: the driver ``main.yaml`` describes. With no main.yaml, any program may be used.

    A main.yaml that does not set ``permissions.processes`` (an empty file, or one line listing a secret)
    allows the driver's own interpreters, those of ``sandbox.local``, and nothing else; a
    ``permissions.processes`` that is set is honoured exactly.
    """
    local = config.sandbox.section("local", LocalPrograms)
    programs = {"python": local.python, "node": local.node, "bash": local.bash}
    permissions = config.permissions
    if permissions.processes is None:
        permissions = attrs.evolve(permissions, processes=tuple(dict.fromkeys(programs.values())))
    return LocalDriver(
        permissions=permissions,
        programs=programs,
        restrict_processes=config.source is not None,
        pool=local.pool,
        criu=local.criu,
        launcher=local.launcher,
    )
