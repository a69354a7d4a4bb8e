"""The ``e2b`` driver: each box is one E2B sandbox (a Firecracker microVM), driven through the official SDK.

A run is: create the sandbox with its egress policy, upload the work files in
one multipart request, start the command (a Connect server stream), read the
out folder back as one tar archive the command made when the code ended, kill
the sandbox: 4 requests, 5 with files in, whatever the number of out files.

The deadline is kept here, on the client side: the SDK's own ``timeout`` is
not always enforced (E2B issue 500). envd signals a single pid and never kills
a process whose request was cancelled (e2b-dev/infra
``packages/envd/internal/services/process/signal.go``, ``start.go``), so the
code runs in a session of its own and the driver kills that whole session (see
``shell_line`` and ``killer_line``).

The hooks are here; what they use is in modules of its own: ``provider`` (the one boundary any SDK failure
goes through), ``lifetime`` (the plan's cap, keep-alives that never shorten), ``transfer`` (deadlines that grow
with the bytes), ``installs`` (packages and the cell kernel's set), ``egress`` (the policy and the rules),
``shell`` (the command's script, the killer), ``archive`` (the out folder in one request).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

import attrs
from e2b import AsyncSandbox
from e2b.exceptions import AuthenticationException, FileNotFoundException, NotFoundException, SandboxException
from e2b.sandbox.commands.command_handle import CommandExitException
from e2b.sandbox.sandbox_api import SandboxQuery
from mainsdk.config import AppConfig
from mainsdk.driver import (
    INVALID_OPTION,
    KERNEL_PACKAGES,
    LANGUAGES,
    NO_SESSION,
    BoxSpec,
    Capabilities,
    Collected,
    Command,
    ExecOutcome,
    Folder,
    OutputSink,
    SandboxError,
    SecretResolver,
    before_command,
    environment_secrets,
)
from mainsdk.hookspecs import hookimpl
from mainsdk_driverkit.wheelhouse import Wheelhouse

from mainsdk_e2b.archive import ARCHIVE, ARCHIVE_SLACK, extract_out_archive
from mainsdk_e2b.box import E2BBox, in_turn
from mainsdk_e2b.checkpoints import Checkpoints
from mainsdk_e2b.config import PLAN_HOURS, E2BConfig
from mainsdk_e2b.egress import (
    E2B_NETWORK_REACH,
    MAX_HEADER_VALUE_BYTES,
    check_egress,
    e2b_network_policy,
    e2b_network_rules,
    refusal_remedy,
)
from mainsdk_e2b.installs import Installs
from mainsdk_e2b.layout import E2B_CA_BUNDLE, OUT, TRUST_VARIABLES, WORK
from mainsdk_e2b.lifetime import SANDBOX_MARGIN, Lifetimes
from mainsdk_e2b.live_input import LiveInput
from mainsdk_e2b.packages import KERNEL
from mainsdk_e2b.provider import OUTAGE_REMEDY, ProviderErrors, cut_at_word
from mainsdk_e2b.shell import BACKSTOP_GRACE, killer_line, shell_line, signal_of
from mainsdk_e2b.transfer import REQUEST_TIMEOUT, Transfers

if TYPE_CHECKING:
    from e2b.sandbox.sandbox_api import SandboxNetworkOpts

# Names tests and tools import from here, as before the modules were split.
__all__ = [
    "BACKSTOP_GRACE",
    "E2B_CA_BUNDLE",
    "E2B_NETWORK_REACH",
    "MAX_HEADER_VALUE_BYTES",
    "OUTAGE_REMEDY",
    "REQUEST_TIMEOUT",
    "TRUST_VARIABLES",
    "E2BBox",
    "E2BDriver",
    "cut_at_word",
    "driver_from_config",
    "e2b_network_policy",
    "e2b_network_rules",
    "e2b_sandbox_driver",
    "estimate_price",
    "extract_out_archive",
    "idempotency_key",
    "killer_line",
    "resolve_key",
    "shell_line",
    "signal_of",
]

DRIVER_ID = "e2b"
log = logging.getLogger("mainsdk.e2b")

FOLDERS = {Folder.WORK: WORK, Folder.OUT: OUT}
# E2B's published prices (FAQ): per vCPU-second and per GiB-second of allocated memory.
PRICE_PER_VCPU_SECOND = Decimal("0.000014")
PRICE_PER_GIB_SECOND = Decimal("0.0000045")
DEFAULT_VCPUS = 2
DEFAULT_MEMORY_MIB = 512

# How long the driver waits for a killed command's stream to end; in a run the command archives out/ first.
KILL_WAIT = 2.0
ARCHIVE_WAIT = 10.0
# The programs a box with packages runs from its packages' environment (core's python runs and cells say python3).
PYTHON_PROGRAMS = frozenset({"python3", "python"})
# Metadata keys on every sandbox the driver creates: the run's or session's id and its tenant.
META_BOX = "mainsdk_box"
META_TENANT = "mainsdk_tenant"
# On a sandbox created with egress headers: a worker that reconnects to the session points its commands at
# E2B_CA_BUNDLE too (the rules themselves are not listed back).
META_EGRESS = "mainsdk_egress"
_SECRET_REF = re.compile(r"secret:([A-Za-z_][A-Za-z0-9_]*)")  # matched whole: ``$`` lets a final newline by


def estimate_price(vcpus: int = DEFAULT_VCPUS, memory_mib: int = DEFAULT_MEMORY_MIB) -> Decimal:
    """Dollars per second of a sandbox of that size, from E2B's published per-vCPU and per-GiB prices."""
    return (PRICE_PER_VCPU_SECOND * vcpus + PRICE_PER_GIB_SECOND * Decimal(memory_mib) / 1024).normalize()


class E2BDriver:
    """The ``e2b`` driver plugin. Build it with ``e2b_sandbox_driver`` or from ``main.yaml``.

    The API key is held privately and never logged, repeated in an error or
    put in anything the driver returns.
    """

    def __init__(
        self,
        *,
        api_key: str | None,
        api_url: str | None = None,
        sandbox_url: str | None = None,
        template: str | None = None,
        price: Decimal | None = None,
        vcpus: int = DEFAULT_VCPUS,
        memory_mib: int = DEFAULT_MEMORY_MIB,
        missing_key: str = "no E2B API key was given",
        request_timeout: float = REQUEST_TIMEOUT,
        wheelhouse: Wheelhouse | None = None,
        max_length: int = 3600 * PLAN_HOURS["base"],
        plan: str = "sandbox.e2b.plan: base",
    ) -> None:
        self._api_key = api_key or None
        self._missing_key = missing_key
        self._api_url = api_url
        self._sandbox_url = sandbox_url
        self._template = template
        self._price = price if price is not None else estimate_price(vcpus, memory_mib)
        # The request timeout of every call but a transfer, whose deadline grows with its bytes (transfer.py).
        self._request_timeout = request_timeout
        # The longest E2B lets a sandbox run from its start (the team's plan), and the setting that said so.
        self._lifetimes = Lifetimes(max_length, plan)
        self._provider = ProviderErrors(lambda: (self._api_key,), self._lifetimes.at_cap)
        self._transfers = Transfers(request_timeout, self._lifetimes, self._provider)
        self._installs = Installs(template, wheelhouse or Wheelhouse(), self._transfers)
        self._checkpoints = Checkpoints(self._provider, self._lifetimes)

    def __repr__(self) -> str:
        return f"E2BDriver(template={self._template!r}, api_url={self._api_url!r})"

    # --- the hooks ---------------------------------------------------------------------------------------------------

    @hookimpl
    def mainsdk_driver_capabilities(self) -> Capabilities:
        """A microVM per box; hosts and wildcards through E2B's egress policy; sessions; no per-run memory cap."""
        return Capabilities(
            isolation="microvm",
            languages=frozenset(LANGUAGES),
            network=True,
            wildcard_hosts=True,
            memory_limit=False,  # memory is the template's size, not a per-run limit
            # Each box is a VM of its own: its /tmp and HOME (/home/user, the template's user, set by shell_line)
            # are its disk's and go with it. That disk is the template's size, not permissions.disk.temp.max.
            private_tmp=True,
            disk_limit=False,
            sessions=True,
            production=True,
            price_per_second=self._price,
            outage_remedy=OUTAGE_REMEDY,
            network_reach=E2B_NETWORK_REACH,
            reports_signals=True,  # the script ends by the program's signal; envd's end event names it
            # Cells: core's kernel is one long command (exec) fed on its live stdin (Command.input: envd's
            # SendInput, ``_feed``); background processes are concurrent commands, each in a session of its own
            # that the killer ends (see ``killer_line``). A cell's KeyboardInterrupt is the kernel's own SIGINT,
            # never envd's SendSignal: that
            # signals the one pid envd started (handler.go ``cmd.Process.Signal``), which is this driver's
            # script, not the kernel. A stuck kernel is killed like any command: its whole session.
            cells=True,
            # The kernel's Python, node and bash executors. E2B's default template ("base", github e2b-dev/E2B
            # templates/base/e2b.Dockerfile: FROM python:3.11.6, Debian bookworm) installs node 20.9.0 into
            # /usr/local and has /bin/bash (envd runs every command as /bin/bash -l -c). Node 20 strips no
            # TypeScript types, and the box has no typescript set: no "typescript" cells here.
            cells_languages=frozenset({"python", "javascript", "bash"}),
            background=True,
            # Wheels fetched on the app side, uploaded with the work files, installed offline: see packages.py.
            packages=True,
            # The create's network.rules: E2B's egress proxy, outside the VM, sets the headers on the box's
            # requests to each named domain (e2b_network_rules); the values never enter the sandbox.
            egress_headers=True,
            # Snapshots, forks from them, pause and resume on E2B's own calls (checkpoints.py); no memory kind.
            checkpoint_kinds=frozenset({"filesystem"}),
            pause=True,
        )

    @hookimpl
    def mainsdk_network_policy(self, hosts: Sequence[str]) -> dict[str, list[str]]:
        """E2B's egress policy for ``hosts`` (see ``e2b_network_policy``)."""
        return e2b_network_policy(hosts)

    @hookimpl
    async def mainsdk_driver_start(self, spec: BoxSpec) -> E2BBox:
        """Create the sandbox with the egress policy and upload the work files (and wheels) in one request.

        With packages, the wheels for the template's python are fetched on the app side first (an
        unresolvable set then creates nothing, once the template's python is known), uploaded with the work
        files, and installed offline into an environment the box's python commands then run from.
        """
        packages = tuple(spec.packages)
        box_python = self._installs.known_python() if packages else None
        wheels = await self._installs.wheels(box_python, packages) if box_python is not None else []
        if spec.limits.timeout > self._lifetimes.max_length:
            raise SandboxError(
                INVALID_OPTION,
                f"limits.timeout {spec.limits.timeout:g}s is longer than E2B lets a sandbox run "
                f"({self._lifetimes.cap_text()}): lower it, or set the plan your team has",
                ran=False,
            )
        # E2B refuses a create's timeout past the team's maximum with a 400: a long idle time is asked for up to
        # the cap, and kept alive from there.
        lifetime = self._lifetimes.lifetime(spec)
        # Exactly the policy core handed over (and audited); none at all: nothing out.
        policy = spec.network_policy if spec.network_policy is not None else e2b_network_policy(())
        if spec.egress:
            check_egress(spec.egress)
            # The headers' values join the policy here only, never the audited one core holds.
            policy = {**policy, "rules": e2b_network_rules(spec.egress)}
        # The box's id (core's run or session id) and its tenant: how a failed create's orphans and a session
        # another worker opened are found again (GET /v2/sandboxes?metadata=, spec/openapi.yml).
        metadata = {META_BOX: spec.id, META_TENANT: spec.tenant, **({META_EGRESS: "headers"} if spec.egress else {})}
        # A box from a snapshot starts from E2B's template of it (checkpoints.py); 0008 if this driver has none.
        template = self._checkpoints.template(spec.snapshot) if spec.snapshot else self._template
        opts = self._opts()
        asked = time.monotonic()  # E2B's start time comes after this: the cap measured from here is never late
        # A create that succeeded but answered 502/504 (or timed out), on any of the SDK's tries, leaves a billed
        # sandbox: found by the box's id in its metadata and killed. A 401 or a 400 made nothing.
        made_nothing = False
        try:
            with self._provider("create a sandbox", egress=spec.egress):
                try:
                    sandbox = await AsyncSandbox.create(
                        template=template,
                        timeout=lifetime,
                        network=cast("SandboxNetworkOpts", policy),
                        metadata=metadata,
                        # The SDK resends a create on 429/502/503/504 with the same key (e2b retry.py); the key only
                        # helps where the API honours it, so a failed create also looks for what it left (below).
                        idempotency_key=idempotency_key(spec.id),
                        **opts,
                    )
                except AuthenticationException:
                    made_nothing = True
                    raise
                except SandboxException as exc:
                    refused = create_refusal(exc, spec, lifetime, self._provider, self._lifetimes)
                    if refused is None:
                        raise
                    made_nothing = True  # the API checks the body before it makes anything
                    raise refused from None
        except SandboxError:
            if not made_nothing:
                await self._kill_orphans(spec.id)
            raise
        box = E2BBox(
            spec.id,
            sandbox,
            sandbox.sandbox_id,
            asked + lifetime,
            lifetime,
            cap_at=asked + self._lifetimes.max_length,
            egress=bool(spec.egress),
            files_limit=spec.limits.files,
        )
        if spec.idle is None:
            box.archive_limit = spec.limits.files
        try:
            if packages and box_python is None:
                wheels = await self._installs.wheels(await self._installs.probe(box), packages)
            files: list[dict[str, Any]] = [
                {"path": f"{WORK}/{name}", "data": bytes(data)} for name, data in sorted(spec.files.items())
            ]
            await self._installs.upload_and_install(box, packages, wheels, files)
        except BaseException:
            await self._kill(box)
            raise
        return box

    @hookimpl
    async def mainsdk_driver_exec(self, box: E2BBox, command: Command, output: OutputSink) -> ExecOutcome:
        """Run ``command`` under its deadline, streaming its output; kill its whole tree at the deadline or cancel."""
        sandbox = box.sandbox
        turn = await in_turn(box)
        try:
            self._lifetimes.check_cap(box)
            await self._lifetimes.keep_alive(box, command.timeout, self._provider)
            stdin_path = None
            # A live stdin (Command.input) gets the given bytes first over the same channel, not as a file.
            live = command.input is not None
            if command.stdin is not None and not live:
                box.stdin_files += 1
                stdin_path = f"/tmp/mainsdk-stdin-{box.stdin_files}"  # a counter, not random: same bytes each run
                entries = [{"path": stdin_path, "data": command.stdin}]
                await self._transfers.upload(box, entries, "upload the command's input")
        except BaseException:
            turn.release()
            raise
        if box.python is not None and command.program in PYTHON_PROGRAMS:
            command = attrs.evolve(command, program=box.python)  # the box's packages are in that environment
        line = shell_line(command, stdin_path, archive_limit=box.archive_limit, live=live, trust=box.egress)
        box.archive_pid = None
        started = time.monotonic()
        handle: Any = None
        waiter: asyncio.Future[Any] | None = None
        exit_code: int | None = None
        signal: int | None = None
        # E2B ends the sandbox at the plan's cap, whatever it is told: a command still running then (a notebook's
        # kernel) is cut there by the driver, with the cap's answer rather than a broken stream's 0006.
        capped = box.cap_at - started < command.timeout
        with self._provider("run the command", box):
            try:
                async with asyncio.timeout(min(command.timeout, max(box.cap_at - started, 0.0))) as deadline:
                    with turn:  # the next request of this box may go once envd said the command started
                        handle = await sandbox.commands.run(
                            line,
                            background=True,
                            envs=dict(command.env),
                            on_stdout=lambda text: output.stdout(text.encode()),
                            on_stderr=lambda text: output.stderr(text.encode()),
                            # envd kills (the one pid of) the command at this bound; the in-VM backstop and this
                            # deadline come first.
                            timeout=command.timeout + SANDBOX_MARGIN,
                            request_timeout=self._request_timeout,
                            # envd's StartRequest.stdin: a pipe the driver writes with SendInput, else /dev/null.
                            stdin=live,
                        )
                    box.archive_pid = handle.pid
                    # Shielded: a cancel must reach this task, not the SDK's stream reader, which the kill ends.
                    waiter = asyncio.ensure_future(handle.wait())
                    if live:
                        await LiveInput(self._lifetimes, self._provider, self._request_timeout).feed(
                            box, handle.pid, command, waiter
                        )
                    try:
                        exit_code = (await asyncio.shield(waiter)).exit_code
                    except CommandExitException as exited:
                        exit_code = exited.exit_code
                        signal = signal_of(exited.error)
            except TimeoutError:
                if not deadline.expired():
                    raise TimeoutError("the request timed out") from None  # the boundary's 0006
                if capped:
                    if waiter is not None:
                        waiter.cancel()
                    raise self._lifetimes.cap_reached(box) from None
                await self._kill_command(box, handle, waiter)
                return ExecOutcome(exit_code=None, stop="timeout", duration=time.monotonic() - started)
            except asyncio.CancelledError:
                # Core cancels at the output limit and at its own deadline: the command must not outlive that.
                await self._kill_command(box, handle, waiter)
                raise
        if signal is not None:
            # The program died of it (the script ended by the same signal): core reports 128 + N and its name.
            return ExecOutcome(exit_code=None, duration=time.monotonic() - started, signal=signal)
        return ExecOutcome(exit_code=exit_code, duration=time.monotonic() - started)

    @hookimpl
    async def mainsdk_driver_kernel_site(self, box: E2BBox, language: str) -> str | None:
        """The folder of the cell kernel's packages in ``box`` (``KERNEL``), installed at the first call.

        The wheels of ``KERNEL_PACKAGES[language]`` are made from the app's own installed distributions (the
        driver depends on them; ``mainsdk_driverkit.installed``), picked for the template's python by the app's
        pip with ``--no-index`` into the wheelhouse (once, then reused by every box), go up in one request and are
        installed offline, as root, into ``KERNEL``: one upload and one command per box, none at a later call (a
        restart). The network of the box is never widened for them. None for a language with no set.
        """
        pins = KERNEL_PACKAGES.get(language)
        if not pins:
            return None
        if box.kernel_site is None:
            # Before the kernel's exec: whatever fails here ran no code (0001 for the box's python, 0006 else).
            await before_command(self._install_kernel(box, pins))
            box.kernel_site = KERNEL
        return box.kernel_site

    @hookimpl
    async def mainsdk_driver_write_file(self, box: E2BBox, folder: Folder, path: str, data: bytes) -> None:
        """Write one file into a folder of the box (sessions); a write, like a cell's input, keeps the sandbox alive."""
        # Core's cell kernel is one command that outlives any deadline; each cell is a write. A write may start up
        # to a command's timeout of work, then the session's idle time: the sandbox must last that long.
        with await in_turn(box):
            self._lifetimes.check_cap(box)
            await self._lifetimes.keep_alive(box, box.lifetime - SANDBOX_MARGIN, self._provider)
            entries = [{"path": f"{FOLDERS[folder]}/{path}", "data": data}]
            await self._transfers.upload(box, entries, "write a file")

    @hookimpl
    async def mainsdk_driver_read_file(self, box: E2BBox, folder: Folder, path: str) -> bytes:
        """Read a file of the work or the out folder (sessions), in the time the most it may hold takes."""
        full = f"{FOLDERS[folder]}/{path}"  # checked by core: relative, no '.' or '..' segment
        self._lifetimes.check_cap(box)
        with self._provider("read a file", box):
            try:
                deadline = self._transfers.deadline(box, box.files_limit)
                return bytes(await box.sandbox.files.read(full, format="bytes", request_timeout=deadline))
            except FileNotFoundException:
                raise SandboxError(
                    NO_SESSION, f"no file {path!r} in the session's box", status=404, retryable=False
                ) from None

    @hookimpl
    async def mainsdk_driver_collect(self, box: E2BBox, max_bytes: int) -> Collected:
        """Read the archive the command made of the out folder (one request) and take its files, never its links."""
        if box.archive_pid is None:
            return Collected()  # the command never started: there is no out folder to read
        path = ARCHIVE.format(pid=box.archive_pid)
        cap = max_bytes + (box.archive_limit or max_bytes) + ARCHIVE_SLACK
        data = bytearray()
        with self._provider("read the out folder"):
            try:
                # The whole transfer's deadline: the time the most it may read takes (transfer.py).
                deadline = self._transfers.deadline(box, cap)
                reader = await box.sandbox.files.read(path, format="stream", request_timeout=deadline)
                async with contextlib.aclosing(reader):
                    async for chunk in reader:
                        data += chunk
                        if len(data) > cap:
                            break  # more than the limit can hold: what came is enough, the rest is cut
            except FileNotFoundException:
                # The command was killed before it could archive out/ (the kill fell back to envd's one-pid SIGKILL).
                log.warning("e2b: the out folder of sandbox %s was not archived; its files are lost", box.sandbox_id)
                return Collected(truncated=True, skipped=(("", "the out folder was not archived"),))
        return extract_out_archive(bytes(data[:cap]), max_bytes, cut=len(data) > cap)

    @hookimpl
    async def mainsdk_driver_reconnect(self, spec: BoxSpec) -> E2BBox | None:
        """Take up session ``spec.id`` another worker opened: found by its id and tenant in the metadata, connected.

        Another tenant's session, a killed one and an unknown id are all None
        (core answers MAIN-SANDBOX-0008). Two requests: a list, a connect. The session's end is the one E2B
        lists (the opener may have pushed it far): this worker's keep-alives only ever push it later.
        """
        wanted = {META_BOX: spec.id, META_TENANT: spec.tenant}
        opts = self._opts()
        with self._provider("look for the session"):
            found = await AsyncSandbox.list(query=SandboxQuery(metadata=wanted), **opts).next_items()
        # The filter is E2B's (exact per key); the tenant is checked here again, whatever the filter did.
        mine = [info for info in found if (info.metadata or {}).get(META_TENANT) == spec.tenant]
        if not mine:
            return None
        with self._provider("reconnect to the session"):
            try:
                sandbox = await AsyncSandbox.connect(mine[0].sandbox_id, **opts)
            except NotFoundException:
                return None  # killed between the list and the connect
        # E2B measures the cap and the end on its clock: both from the listing, as seconds from now on this one.
        now, wall = time.monotonic(), time.time()
        cap_at = now + mine[0].started_at.timestamp() + self._lifetimes.max_length - wall
        expires = min(now + mine[0].end_at.timestamp() - wall, cap_at)
        egress = (mine[0].metadata or {}).get(META_EGRESS) == "headers"
        lifetime = self._lifetimes.lifetime(spec)
        return E2BBox(
            spec.id, sandbox, mine[0].sandbox_id, expires, lifetime, cap_at=cap_at, egress=egress,
            files_limit=spec.limits.files,
        )  # fmt: skip

    @hookimpl
    async def mainsdk_driver_snapshot(self, box: E2BBox, snapshot_id: str, kind: str) -> float | None:
        """Keep the box's files as ``snapshot_id`` (E2B's ``create_snapshot``); E2B keeps it until deleted."""
        await self._checkpoints.snapshot(box, snapshot_id)
        return None

    @hookimpl
    async def mainsdk_driver_delete_snapshot(self, snapshot_id: str) -> None:
        """Delete E2B's template of ``snapshot_id``; boxes started from it keep their files."""
        await self._checkpoints.delete(snapshot_id, self._opts())

    @hookimpl
    async def mainsdk_driver_pause(self, box: E2BBox) -> None:
        """Pause the sandbox (E2B's ``pause``): it runs nothing and keeps its files."""
        await self._checkpoints.pause(box)

    @hookimpl
    async def mainsdk_driver_resume(self, box: E2BBox) -> None:
        """Resume the paused sandbox (E2B's ``connect``); a box that runs is only kept alive."""
        await self._checkpoints.resume(box, self._opts())

    @hookimpl
    async def mainsdk_driver_stop(self, box: E2BBox) -> None:
        """Kill the sandbox: everything it held goes with it. Twice is harmless."""
        await self._kill(box)

    @hookimpl
    def mainsdk_driver_shutdown(self) -> None:
        """Nothing is held for the process: each box is killed when it stops."""

    # --- helpers -----------------------------------------------------------------------------------------------------

    def _key(self) -> str:
        if not self._api_key:
            # A missing key is the app's config to fix, not an outage to retry: the same code as the Vercel driver.
            raise SandboxError(INVALID_OPTION, self._missing_key)
        return self._api_key

    def _opts(self) -> dict[str, Any]:
        """The SDK's connection options: key, endpoints, request timeout."""
        opts: dict[str, Any] = {"request_timeout": self._request_timeout, "api_key": self._key()}
        if self._api_url:
            opts["api_url"] = self._api_url
        if self._sandbox_url:
            opts["sandbox_url"] = self._sandbox_url
        return opts

    def _unavailable(self, what: str, exc: BaseException, box: E2BBox | None = None) -> SandboxError:
        """The boundary's 0006 for ``exc`` (see ``provider.ProviderErrors``)."""
        return self._provider.unavailable(what, exc, box)

    async def _kill_orphans(self, box_id: str) -> None:
        """Kill every sandbox tagged with ``box_id``: what a create that failed may have started. Never raises."""
        found: list[Any] = []
        with self._provider.best_effort("look for sandboxes a failed create left"):
            # No retries of its own: the create's already took their time; one look, then E2B's timeout.
            query = SandboxQuery(metadata={META_BOX: box_id})
            paginator = AsyncSandbox.list(query=query, **{**self._opts(), "retries": 0})
            while paginator.has_next and len(found) < 100:  # a handful at most: one per create the SDK sent
                found += await paginator.next_items()
        for orphan in found:
            log.warning("e2b: killing sandbox %s, left by a create that failed", orphan.sandbox_id)
            # One failure must not spare the others; E2B's timeout remains.
            with self._provider.best_effort(f"kill sandbox {orphan.sandbox_id}"):
                await AsyncSandbox.kill(orphan.sandbox_id, **self._opts())

    async def _install_kernel(self, box: E2BBox, pins: Sequence[str]) -> None:
        """Probe (once per template), fetch, upload and install the kernel's set, in the box's turn."""
        with await in_turn(box):
            self._lifetimes.check_cap(box)
            await self._installs.install_kernel(box, pins)

    async def _kill_command(self, box: E2BBox, handle: Any, waiter: asyncio.Future[Any] | None) -> None:
        """Kill the command's whole session (one more command, as root), then let its stream end. Never raises.

        envd's SendSignal reaches one pid, so the code's children would live on;
        the killer stops and kills every process of the code's session. The
        command itself then archives out/ (a run) and ends.
        """
        if handle is None:
            return  # not started yet: nothing to signal; the sandbox's kill ends it
        killed = False
        # On failure, fall back to envd's one-pid SIGKILL; the sandbox kill follows a run.
        with self._provider.best_effort("kill a command's processes", box):
            await asyncio.wait_for(
                box.sandbox.commands.run(
                    killer_line(handle.pid), user="root", timeout=KILL_WAIT * 5, request_timeout=self._request_timeout
                ),
                KILL_WAIT * 5,
            )
            killed = True
        if not killed:
            with self._provider.best_effort("kill the command's own pid", box):
                await asyncio.wait_for(handle.kill(), KILL_WAIT)
        if waiter is not None:
            await asyncio.wait({waiter}, timeout=ARCHIVE_WAIT if box.archive_limit is not None else KILL_WAIT)
            if waiter.done() and not waiter.cancelled():
                waiter.exception()  # retrieved: its end no longer matters
            else:
                waiter.cancel()
        with self._provider.best_effort("let go of the command's stream", box):
            await handle.disconnect()

    async def _kill(self, box: E2BBox) -> None:
        if box.stopped:
            return
        box.stopped = True
        # E2B ends it at its timeout anyway: said without the details.
        with self._provider.best_effort("kill the sandbox (E2B ends it at its timeout)", box):
            await box.sandbox.kill(request_timeout=self._request_timeout)


def create_refusal(
    exc: SandboxException, spec: BoxSpec, lifetime: int, provider: ProviderErrors, lifetimes: Lifetimes
) -> SandboxError | None:
    """The 0001 for E2B's 400 to a create the user must change (not retry), or None for any other failure.

    Each remedy is one that works when followed (tests/test_lifetime.py, tests/test_egress.py follow them).
    """
    if getattr(exc, "status_code", None) != 400:
        return None
    reason = provider.reason(exc, spec.egress)
    if "Timeout cannot be greater than" in reason:
        # handlers/timeout_helper.go validateAndParseTimeout: the team's MaxLengthHours is less than the plan
        # the driver was told (sandbox.e2b.plan or max_hours), so it asked for more than E2B allows.
        return SandboxError(
            INVALID_OPTION,
            f"E2B refused a sandbox of {lifetime} s: {reason}; the driver was told your team's sandboxes run "
            f"{lifetimes.cap_text()}: set sandbox.e2b.plan (or sandbox.e2b.max_hours) to your team's "
            "plan, or ask for less (limits.timeout, the session's idle time)",
            ran=False,
        )
    if spec.egress:
        # The API checks network.rules before it makes anything (sandbox_create.go validateNetworkConfig):
        # what it refused, and which server release takes it, is said here.
        return SandboxError(
            INVALID_OPTION,
            f"E2B refused the create with egress headers (network.rules): {reason}; {refusal_remedy(reason)}",
            ran=False,
        )
    return None


def idempotency_key(box_id: str) -> str:
    """The ``Idempotency-Key`` of a box's create: its id in the server's alphabet, 1 to 255 of ``a-z0-9``.

    E2B's API refuses any other key with a 400 on ``POST /v2/sandboxes`` (e2b-dev/runtime, the Go module
    ``github.com/e2b-dev/infra``: ``packages/api/internal/middleware/idempotency/middleware.go``, "Idempotency-Key
    must contain one value of 1 to 255 lowercase ASCII letters or digits"; ``middleware_test.go``
    ``TestBypassAndKeyValidation`` refuses ``abc-123``). The SDK's own check (``e2b/retry.py``) lets hyphens
    through: it is not the rule. Core's ids are ``run_<hex>`` / ``ses_<hex>``: dropping the ``_`` keeps
    them apart (``runab12...``).
    """
    return re.sub(r"[^a-z0-9]", "", box_id.lower())[:255] or "mainsdk"


def e2b_sandbox_driver(
    *,
    api_key: str | None,
    api_url: str | None = None,
    sandbox_url: str | None = None,
    template: str | None = None,
    price: Decimal | None = None,
    vcpus: int = DEFAULT_VCPUS,
    memory_mib: int = DEFAULT_MEMORY_MIB,
    wheelhouse: Wheelhouse | None = None,
    plan: str = "base",
    max_hours: int | None = None,
) -> E2BDriver:
    """An ``e2b`` driver with an explicit key and endpoints (tests, or an app that resolves the key itself).

    ``api_url`` / ``sandbox_url`` point the SDK elsewhere (a replay server on
    loopback); ``price`` overrides the estimate from ``vcpus`` and ``memory_mib``;
    ``wheelhouse`` keeps the packages' wheels elsewhere than ``$XDG_CACHE_HOME/mainsdk/wheels``;
    ``plan`` / ``max_hours``: how long E2B lets a sandbox run on your team, as in ``sandbox.e2b``.
    """
    limit = E2BConfig(plan=plan, max_hours=max_hours)
    return E2BDriver(
        api_key=api_key,
        api_url=api_url,
        sandbox_url=sandbox_url,
        template=template,
        price=price,
        vcpus=vcpus,
        memory_mib=memory_mib,
        wheelhouse=wheelhouse,
        max_length=limit.max_length,
        plan=_plan_text(limit),
    )


def _plan_text(section: E2BConfig) -> str:
    """The setting the cap comes from, as the user would write it."""
    if section.max_hours is not None:
        return f"sandbox.e2b.max_hours: {section.max_hours}"
    return f"sandbox.e2b.plan: {section.plan}"


def resolve_key(
    reference: str, environ: Mapping[str, str] | None = None, *, secret: SecretResolver | None = None
) -> tuple[str | None, str]:
    """The key ``sandbox.e2b.key`` names, and what to say when it has none.

    ``secret:NAME`` goes through the app's secret resolver (``SandboxDeps.secret``)
    when core passes one, else the environment; anything else is the key itself.
    """
    match = _SECRET_REF.fullmatch(reference)
    if match is None:
        return reference, "sandbox.e2b.key is empty"
    name = match.group(1)
    lookup = secret if secret is not None else (os.environ if environ is None else environ).get
    value = lookup(name)
    return value or None, f"sandbox.e2b.key names the secret {name}, which has no value; set {name}"


def driver_from_config(config: AppConfig, *, secret: SecretResolver | None = None) -> E2BDriver:
    """The driver ``sandbox.driver: e2b`` loads: key, template and price from ``sandbox.e2b`` and ``sandbox.price``.

    The key is a ``Credential`` core resolved through the app's ``SandboxDeps.secret``.
    The SDK's own ``E2B_API_URL`` / ``E2B_SANDBOX_URL`` still apply, for
    pointing it at a recorder or a replay server.
    """
    section = config.sandbox.section("e2b", E2BConfig)
    key = section.key
    if not key.resolved:  # core resolves it when it loads the driver; this is a factory called by hand
        key = key.resolve(secret or environment_secrets, "sandbox.e2b.key")
    return E2BDriver(
        api_key=key.value,
        template=section.template,
        price=config.sandbox.price,
        missing_key=key.missing(),
        max_length=section.max_length,
        plan=_plan_text(section),
    )
