"""The ``vercel-sandbox`` driver: each box is a Vercel Sandbox microVM, driven through Vercel's REST API with httpx.

The API generation is the one Vercel's current official clients speak: a
sandbox is created with ``POST /v3/sandboxes`` and everything after it goes
to its session, ``/v2/sandboxes/sessions/{sessionId}/...`` (PyPI
``vercel-sandbox`` 0.10.0, ``vercel/sandbox/_internal/api_client.py``; github
vercel/sandbox, ``packages/vercel-sandbox/src/api-client/api-client.ts``,
commit 087d659 "Use the V2 endpoints instead of V1"). See README.md for how a
run maps to requests.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import io
import json
import logging
import os
import posixpath
import tarfile
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import attrs
import httpx
from mainsdk.config import AppConfig
from mainsdk.driver import (
    DRIVER_UNAVAILABLE,
    INVALID_OPTION,
    KERNEL_PACKAGES,
    LANGUAGES,
    NO_SESSION,
    BoxGone,
    BoxSpec,
    Capabilities,
    Collected,
    Command,
    EgressRule,
    ExecOutcome,
    Folder,
    InputStream,
    NetworkReach,
    OutFile,
    OutputSink,
    SandboxError,
    before_command,
    environment_secrets,
)
from mainsdk.hookspecs import hookimpl
from mainsdk_driverkit.installed import kernel_find_links
from mainsdk_driverkit.wheelhouse import Wheelhouse, failure_message, kernel_failure

from mainsdk_vercel._api import DEFAULT_BASE_URL, NotFound, VercelApi, VercelError, session_ended
from mainsdk_vercel.config import PLAN_MAX_DURATION, VercelConfig
from mainsdk_vercel.packages import (
    INSTALL,
    INSTALL_WHEELS,
    INSTALLER_ZIP,
    KERNEL,
    KERNEL_INSTALL,
    KERNEL_WHEELS,
    PROBE,
    BoxPython,
    installer_zip,
    kernel_python_problem,
)

log = logging.getLogger("mainsdk.vercel")
DRIVER_ID = "vercel-sandbox"
ROOT = "/vercel/sandbox"  # the image's home and default cwd, writable by the sandbox's user
WORK = f"{ROOT}/work"
OUT = f"{ROOT}/out"
PRIVATE = f"{ROOT}/.mainsdk"  # the driver's own files (stdin of long code, out archives), outside work and out
SESSIONS = "/v2/sandboxes/sessions"
VCPUS = 2  # Vercel's default size; memory is 2 GB per vCPU
# Vercel's published prices (providers.md): active CPU $0.128 per vCPU-hour, memory $0.0212 per GB-hour.
CPU_PER_HOUR = Decimal("0.128")
MEMORY_GB_PER_HOUR = Decimal("0.0212")
# Room past a command's own limit before Vercel's own timeout stops the VM: files in, collect, stop.
MARGIN = 60.0
LOG_RECONNECTS = 3
PROGRAMS = {"python": "python3", "python3": "python3", "node": "node", "bash": "bash"}
SIGTERM = 15
TAG_SESSION = "mainsdk-session"  # the tags a session's sandbox carries (see mainsdk_driver_reconnect)
TAG_TENANT = "mainsdk-tenant"
# What we read of an out archive at most, past the files limit: tar headers and gzip's worst case.
ARCHIVE_SLACK = 8 * 1024 * 1024
# Entries of an out archive looked at, at most (each costs a tar header to read; the rest is truncated).
MAX_OUT_ENTRIES = 10_000
INSTALL_TIMEOUT = 300.0  # seconds for installer to install a set offline in the box (pandas + matplotlib: well under)
CAPTURE_LIMIT = 64 * 1024  # bytes kept of each stream of the driver's own commands (probe, install)
# A new session is polled until ``running``, as the official Python client does (vercel-sandbox 0.10.0,
# ``_internal/service.py``, ``_wait_for_ready_sandbox``: every 0.5 s; running is ready, stopped, failed and
# aborted are terminal, pending, stopping and snapshotting are polled again).
READY_POLL = 0.5
READY = "running"
TERMINAL = frozenset({"stopped", "failed", "aborted"})
TRANSITIONAL = frozenset({"pending", "stopping", "snapshotting"})
# Bytes per stdin write: vercel-sandbox 0.10.0 sends 512 KiB, "keeping the base64 JSON body under the API's 1 MB
# limit" (_internal/process_stdin.py, STDIN_CHUNK_SIZE). The code the API answers a stdin it cannot take with.
STDIN_CHUNK = 512 * 1024
STDIN_GONE = "command_stdin_unavailable"
# Seconds before a session's cap at which an ended stream or a killed command is taken for Vercel's stop at the
# cap (its clock and ours differ by the create's round trip, and a stop is not instant).
CAP_SLACK = 5.0

# Every command runs under this fixed script (no caller text is ever spliced into it; everything comes as
# arguments): the code in its own session and process group (``setsid``), so that its whole tree can be
# killed by group. Vercel's kill reaches one process (the command's, ``cmd/{id}/kill``); the driver sends
# it SIGTERM, which the script traps to SIGKILL the code's group. When the code exits, whatever it left in
# its group is killed too, and in a one-shot run the out folder is archived (``tar`` stores links as links,
# never following them) so one read brings every out file back. Its exit status is the code's (128 + N for
# signal N, the shell's convention).
# Bash itself adds PWD, OLDPWD, SHLVL and _ to what its children get; ``env -u`` takes back those the caller did
# not give, so the code's environment holds only what was given (plus the image's own: with header transforms,
# the variables Vercel sets so every client trusts its firewall's CA, SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
# NODE_EXTRA_CA_CERTS and the like, which the code needs and this script keeps). The script's own tools
# are found with ``command -p`` (the system's default PATH), so a PATH given to the code cannot replace them.
# A stdin file (a cell interpreter's token, long code) is opened, then removed before the code starts: the code
# reads it on its stdin, and nothing in the box can read it from the disk afterwards. A stdin of "-" is the
# command's own live stdin (``attachStdin``), which only the app writes (``cmd/{id}/stdin``).
#   $0 root, $1 stdin file or "-", $2 archive path or "", $3 the names to take back, then the program and its arguments
WRAPPER = (
    'root=$0 stdin=$1 archive=$2 drop=; for n in $3; do drop="$drop -u $n"; done; shift 3\n'
    "trap 'kill -KILL -- -$! 2>/dev/null || kill -KILL $! 2>/dev/null; exit 143' TERM\n"
    'command -p mkdir -p "$root/work" "$root/out" "$root/.mainsdk" 2>/dev/null\n'
    'cd "$root/work" || exit 125\n'
    'case $stdin in -) exec 3<&0;; *) exec 3<"$stdin" || exit 125;; esac\n'
    'case $stdin in "$root"/.mainsdk/stdin-*) command -p rm -f -- "$stdin";; esac\n'
    'command -p setsid "$(command -pv env)" $drop "$@" <&3 3<&- &\n'
    "exec 3<&-\n"
    "wait $!; rc=$?\n"
    "kill -KILL -- -$! 2>/dev/null\n"
    'if [ -n "$archive" ]; then command -p tar -czf "$archive" -C "$root/out" . 2>/dev/null; fi\n'
    "exit $rc\n"
)
# The out folder archived on its own, when the command did not get to it (a timeout, a cancel, the output limit).
ARCHIVE_ONLY = 'command -p tar -czf "$1" -C "$0/out" . 2>/dev/null; exit 0'


def session_name(session_id: str) -> str:
    """The Vercel sandbox name of a mainsdk session: lowercase letters, digits and dashes."""
    return "mainsdk-" + session_id.lower().replace("_", "-")


def vercel_network_policy(hosts: Sequence[str]) -> dict[str, Any]:
    """The ``networkPolicy`` for hosts: ``deny-all`` with none, else exactly those domains allowed.

    The form is the v2 one the official clients send (vercel-sandbox 0.10.0,
    ``models._serialize_network_policy``: ``{"allow": {domain: [rules]}}``;
    the TypeScript SDK's ``toAPINetworkPolicy`` passes ``{"allow": [...]}``
    through): anything not allowed is denied. ``*.example.com`` wildcards pass as they are.
    """
    if not hosts:
        return {"mode": "deny-all"}
    return {"allow": {host: [] for host in hosts}}


def vercel_injection_policy(policy: Mapping[str, Any], rules: Sequence[EgressRule]) -> dict[str, Any]:
    """``policy`` (``vercel_network_policy``'s) with the egress headers: per host, one rule that sets them.

    The form is vercel-sandbox 0.10.0's (``models._serialize_network_policy``, a ``NetworkPolicyRule`` of one
    ``NetworkPolicyTransform``): ``{"allow": {host: [{"transform": [{"headers": {name: value}}]}]}}``; Vercel's
    firewall, outside the VM, adds or replaces those headers on the box's HTTPS requests to the host
    (changelog "Safely inject credentials in HTTP headers"), and reads back only their names
    (``injectionRules[].headerNames``, github vercel/sandbox ``utils/network-policy.ts``: "secret values are
    stripped"). Every other host keeps its plain entry.
    """
    allowed = policy.get("allow")
    allow: dict[str, Any] = (
        {host: list(entry) for host, entry in allowed.items()}
        if isinstance(allowed, Mapping)
        else {host: [] for host in allowed or ()}
    )
    for rule in rules:
        allow[rule.host] = [{"transform": [{"headers": {h.name: h.value for h in rule.headers}}]}]
    return {**policy, "allow": allow}


def default_price(vcpus: int = VCPUS) -> Decimal:
    """Dollars per second of a box of ``vcpus`` with every CPU busy: the worst case, for max-cost checks."""
    per_hour = vcpus * CPU_PER_HOUR + 2 * vcpus * MEMORY_GB_PER_HOUR
    return (per_hour / 3600).quantize(Decimal("1e-10"))


@attrs.define(eq=False)
class VercelBox:
    """A box: its spec, and the sandbox behind it once created (``session_id``, ``name``)."""

    id: str
    spec: BoxSpec
    session: bool
    session_id: str | None = None
    name: str | None = None
    expires: float = 0.0  # monotonic time Vercel's own timeout stops the sandbox
    started: float = 0.0  # monotonic time of its create: the plan's maximum duration counts from here
    gone: bool = False  # known stopped (by us, or Vercel said so): nothing more to ask of it
    commands: int = 0  # commands sent so far: names per command, unique in the VM and the same on every run
    archive: str | None = None  # the out archive the last command finished writing (one-shot runs)
    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    # Requests to the sandbox are sent in the order the hooks were called: a command holds it until Vercel
    # says it started (its first NDJSON line), a file write or read until it is done. A session's cell
    # interpreter and its first cell file, or two background processes, then reach Vercel (and a replayed
    # cassette) in one order. Kills and the stop never wait for it.
    sending: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    kernel_site: str | None = None  # the folder of the cell kernel's packages, once installed (``KERNEL``)


class _Capture:
    """A command's output, kept (up to ``CAPTURE_LIMIT`` bytes a stream) for the driver's own commands."""

    def __init__(self) -> None:
        self._kept = {"stdout": bytearray(), "stderr": bytearray()}

    def _take(self, stream: str, data: bytes) -> None:
        kept = self._kept[stream]
        kept += data[: max(CAPTURE_LIMIT - len(kept), 0)]

    def stdout(self, data: bytes) -> None:
        """Take stdout."""
        self._take("stdout", data)

    def stderr(self, data: bytes) -> None:
        """Take stderr."""
        self._take("stderr", data)

    def host_refused(self, host: str) -> None:
        """Not reported for the driver's own commands."""

    def text(self, stream: str) -> str:
        """What ``stream`` said, as text."""
        return bytes(self._kept[stream]).decode("utf-8", "replace")


@attrs.define
class _Run:
    """What a command's stream told so far: its id, and its exit code once it ended."""

    cmd_id: str | None = None
    exit_code: int | None = None
    started: Callable[[], None] | None = None  # called once Vercel named the command (it runs)


class VercelDriver:
    """The ``vercel-sandbox`` driver plugin. Build it with ``vercel_sandbox_driver`` or from ``main.yaml``."""

    def __init__(
        self,
        *,
        token: str,
        project: str | None,
        team: str | None = None,
        runtime: str | None = None,
        price: Decimal | None = None,
        base_url: str = DEFAULT_BASE_URL,
        client: httpx.AsyncClient | None = None,
        vcpus: int = VCPUS,
        wheelhouse: Wheelhouse | None = None,
        plan: str = "hobby",
        max_duration: float | None = None,
    ) -> None:
        self._api = VercelApi(token=token, team=team, base_url=base_url, client=client)
        # The longest a sandbox may live from its start (Vercel stops it there; extend-timeout cannot pass it).
        self._cap = max_duration if max_duration is not None else PLAN_MAX_DURATION[plan]
        self._cap_setting = (
            f"sandbox.vercel.max_duration: {_human(self._cap)}"
            if max_duration is not None
            else f"sandbox.vercel.plan: {plan}"
        )
        self._project = project
        self._image = runtime  # sandbox.vercel.runtime names an image (v3 has no runtimes); None: Vercel's default
        self._vcpus = vcpus
        self._price = price if price is not None else default_price(vcpus)
        self._wheelhouse = wheelhouse or Wheelhouse()
        self._python: BoxPython | None = None  # the image's python3, probed by the first box that needs packages

    def __repr__(self) -> str:
        return f"VercelDriver(project={self._project!r})"  # never the token

    # --- hooks ------------------------------------------------------------------------------------------------------

    @hookimpl
    def mainsdk_driver_capabilities(self) -> Capabilities:
        return Capabilities(
            isolation="microvm",
            languages=frozenset(LANGUAGES),
            network=True,
            wildcard_hosts=True,
            memory_limit=False,  # a command gets the whole VM: no per-command memory cap to enforce
            # Each box is a VM of its own: its /tmp and the image's HOME (the default image's /vercel, its user's
            # home; the legacy runtimes' /home/vercel-sandbox: github vercel/sandbox images/ubuntu/Dockerfile,
            # runtime-base/Dockerfile) are its disk's and go with it. That disk is Vercel's size, not
            # permissions.disk.temp.max.
            private_tmp=True,
            disk_limit=False,
            sessions=True,
            # Cells and background processes are commands left running in a session's sandbox: Vercel runs any
            # number of commands at once in one session, each streaming its own logs (``cmd?wait=true&logs=true``
            # stays open until the command exits; vercel-sandbox 0.10.0 ``run_process``, @vercel/sandbox
            # ``api-client.ts`` ``runCommand``), and other requests (the cell files' ``fs/write``) go alongside.
            cells=True,
            # The kernel's Python, node and bash executors. The default image, vercel/sandbox/universal (github
            # vercel/sandbox images/universal/Dockerfile and images/README.md: Ubuntu, Node.js 24 from nodejs.org
            # into /usr/local, Python 3.14, bash). Node 24 strips TypeScript types, but the replays are authored
            # through a stand-in whose node (20 on the authoring host) does not: no "typescript" cells declared.
            cells_languages=frozenset({"python", "javascript", "bash"}),
            background=True,
            # Wheels downloaded on the app's side and installed offline in the box (packages.py): the run's
            # network is never widened for them.
            packages=True,
            production=True,
            price_per_second=self._price,
            # Vercel's egress firewall matches a domain by the TLS SNI; other traffic falls back to IP rules
            # (providers.md, "Checked against the providers' own sources"). Only HTTPS on 443 is declared:
            # whether SNI is matched on other ports, and plain HTTP by Host, is unverified (README).
            network_reach=NetworkReach(filtered=(("https", 443),)),
            # The create's networkPolicy carries the headers per host (vercel_injection_policy): Vercel's firewall
            # sets them on the box's HTTPS requests to that host, outside the VM.
            egress_headers=True,
            outage_remedy="check Vercel's status and the token (sandbox.vercel.token, default secret:VERCEL_TOKEN)",
        )

    @hookimpl
    def mainsdk_network_policy(self, hosts: Sequence[str]) -> Any:
        return vercel_network_policy(hosts)

    @hookimpl
    async def mainsdk_driver_start(self, spec: BoxSpec) -> VercelBox:
        if not self._project:
            raise SandboxError(
                INVALID_OPTION, "sandbox.vercel.project is not set; set it to the Vercel project id (prj_...)"
            )
        if spec.limits.timeout >= self._cap:
            raise SandboxError(
                INVALID_OPTION,
                f"limits.timeout {spec.limits.timeout:g}s does not fit in a Vercel sandbox, which lives at most "
                f"{_human(self._cap)} from its start on this plan ({self._cap_setting}); lower the timeout, or set "
                "sandbox.vercel.plan (or max_duration) to your plan's",
                ran=False,
            )
        box = VercelBox(spec.id, spec, session=spec.idle is not None)
        await self._create(box)
        return box

    @hookimpl
    async def mainsdk_driver_reconnect(self, spec: BoxSpec) -> VercelBox | None:
        """The running sandbox of session ``spec.id`` another process created, if ``spec.tenant``'s; else None.

        Sessions are created named after their id, with the session and the
        tenant in their tags; ``GET /v2/sandboxes/{name}`` (as vercel-sandbox's
        ``get_sandbox``, never resuming) finds it, and the tags must match.
        """
        if not self._project or not spec.tenant:
            return None
        try:
            answer = await self._api.json(
                "GET",
                f"/v2/sandboxes/{session_name(spec.id)}",
                "get",
                query={"projectId": self._project, "resume": "false"},
                idempotent=True,
            )
        except NotFound:
            return None
        sandbox = answer.get("sandbox") if isinstance(answer, dict) else None
        session = answer.get("session") if isinstance(answer, dict) else None
        if not isinstance(sandbox, dict) or not isinstance(session, dict):
            return None
        tags = sandbox.get("tags")
        if not isinstance(tags, dict) or tags.get(TAG_SESSION) != spec.id or tags.get(TAG_TENANT) != spec.tenant:
            return None  # another tenant's (or not ours): the same 0008 as an unknown id
        if session.get("status") != "running" or not session.get("id"):
            return None
        # expires now: the first use extends the lease, as no clock here knows how much of it is left. The plan's
        # cap counts from the session's start, which Vercel says (ms since the epoch).
        now = time.monotonic()
        started_at = session.get("startedAt")
        age = time.time() - started_at / 1000 if isinstance(started_at, (int, float)) else 0.0
        return VercelBox(
            spec.id,
            spec,
            session=True,
            session_id=str(session["id"]),
            name=str(sandbox.get("name")),
            expires=now,
            started=now - max(age, 0.0),
        )

    @hookimpl
    async def mainsdk_driver_exec(self, box: VercelBox, command: Command, output: OutputSink) -> ExecOutcome:
        await box.sending.acquire()
        held = [True]

        def sent() -> None:
            if held[0]:
                held[0] = False
                box.sending.release()

        try:
            return await self._exec(box, command, output, sent)
        finally:
            sent()

    async def _exec(
        self, box: VercelBox, command: Command, output: OutputSink, sent: Callable[[], None]
    ) -> ExecOutcome:
        await before_command(self._ensure(box))  # a failure here sent nothing: retryable
        program = PROGRAMS.get(command.program, command.program)
        box.commands += 1
        box.archive = None
        stdin = "/dev/null"
        if command.input is not None:
            stdin = "-"  # the live stdin: Command.stdin, if any, goes first through it (_feed)
        elif command.stdin is not None:
            # The bytes go in a file the wrapper feeds to the code (a command with attached stdin costs a
            # request per chunk).
            stdin = f"{PRIVATE}/stdin-{box.commands}"
            await before_command(self._write(box, {stdin.removeprefix(ROOT + "/"): command.stdin}))
        archive = "" if box.session else f"{PRIVATE}/out-{box.commands}.tgz"
        args = ["-c", WRAPPER, ROOT, stdin, archive, _bash_added(command.env), program, *command.args]
        loop = asyncio.get_running_loop()
        started = loop.time()
        feeding: list[asyncio.Task[None]] = []
        running = asyncio.current_task()

        def ending() -> bool:
            # The app ends the input and cancels the command in one step (a kernel's kill): no close is sent then,
            # so what reaches Vercel (and a cassette) does not depend on which of the two goes first.
            return box.gone or running is None or running.done() or running.cancelling() > 0

        def began() -> None:
            sent()
            if command.input is not None and run.cmd_id is not None:
                feed = self._feed(box, run.cmd_id, command.stdin, command.input, ending)
                feeding.append(asyncio.create_task(feed))

        run = _Run(started=began)
        try:
            async with asyncio.timeout(command.timeout):
                await self._run(box, "bash", args, dict(command.env), run, output, stdin=command.input is not None)
        except TimeoutError:
            await self._kill(box, run.cmd_id)
            return ExecOutcome(exit_code=None, stop="timeout", duration=loop.time() - started)
        except asyncio.CancelledError:
            await asyncio.shield(self._kill(box, run.cmd_id))
            raise
        except VercelError as exc:
            if self._at_cap(box) and (session_ended(exc) or exc.vercel_status is None):
                raise self._capped(box) from None  # Vercel stopped the sandbox at the plan's cap, mid-command
            if session_ended(exc):
                box.gone = True  # Vercel said the session stopped (or is stopping): nothing runs there any more
            else:
                await self._kill(box, run.cmd_id)
            raise
        finally:
            for task in feeding:
                task.cancel()  # the command ended: what it did not take is dropped
            await asyncio.gather(*feeding, return_exceptions=True)
        assert run.exit_code is not None
        if run.exit_code >= 128 and self._at_cap(box):
            raise self._capped(box)  # killed as Vercel stopped the VM at the cap: not the code's own end
        box.archive = archive or None
        return ExecOutcome(exit_code=run.exit_code, duration=loop.time() - started)

    @hookimpl
    async def mainsdk_driver_kernel_site(self, box: VercelBox, language: str) -> str | None:
        """The folder of the cell kernel's packages in ``box`` (``KERNEL``), installed at the first call.

        The wheels of ``KERNEL_PACKAGES[language]`` are made from the app's own installed distributions (the
        driver depends on them; ``mainsdk_driverkit.installed``), picked for the image's python by the app's pip
        with ``--no-index`` into the wheelhouse (once, then reused by every box), go up in one ``fs/write`` with the
        installer and are installed offline into ``KERNEL``: one upload and one command per box, none at a later call (a
        restart). The sandbox's network is never widened for them. None for a language with no set.
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
    async def mainsdk_driver_write_file(self, box: VercelBox, folder: Folder, path: str, data: bytes) -> None:
        async with box.sending:
            await self._ensure(box)
            await self._write(box, {f"{folder.value}/{path}": data})  # the folders are ROOT/work and ROOT/out

    @hookimpl
    async def mainsdk_driver_read_file(self, box: VercelBox, folder: Folder, path: str) -> bytes:
        async with box.sending:
            await self._ensure(box)
            # ``path`` is checked by core (relative, no '.' or '..' segment).
            return await self._read(box, f"{WORK if folder is Folder.WORK else OUT}/{path}", path)

    @hookimpl
    async def mainsdk_driver_collect(self, box: VercelBox, max_bytes: int) -> Collected:
        if box.session_id is None or box.gone:
            return Collected()  # never created, or stopped to kill a command it could not address
        archive = box.archive
        if archive is None:
            # The command did not get to archive out/ (stopped at a limit, or cancelled): one command does it.
            box.commands += 1
            archive = f"{PRIVATE}/out-{box.commands}.tgz"
            await self._run(box, "bash", ["-c", ARCHIVE_ONLY, ROOT, archive], {}, _Run(), None)
        try:
            data = await self._read_capped(box, archive, max_bytes + ARCHIVE_SLACK)
        except NotFound:
            # The wrapper always leaves an archive (empty when out/ is): none means out/ could not be read,
            # and the run's files would be silently lost.
            raise self._api.error("collect", None, cause="the out folder could not be archived") from None
        return _unpack_out(data, max_bytes)

    @hookimpl
    async def mainsdk_driver_stop(self, box: VercelBox) -> None:
        if box.session_id is None or box.gone:
            return
        box.gone = True
        try:
            await self._api.request("POST", f"{SESSIONS}/{box.session_id}/stop", "stop", json_body={}, idempotent=True)
        except VercelError as exc:
            # Already stopped (410), stopping (422), or no longer there (404): each is as good as stopped.
            if not (session_ended(exc) or exc.vercel_status == 404):
                raise

    @hookimpl
    def mainsdk_driver_shutdown(self) -> None:
        # Clients are per event loop and closed with it; nothing process-wide is held.
        return None

    # --- the box's sandbox ------------------------------------------------------------------------------------------

    def _lifetime(self, box: VercelBox, command_timeout: float) -> float:
        """Seconds the sandbox must live from now: this command, the session's idle time, and room to collect."""
        return command_timeout + (box.spec.idle or 0.0) + MARGIN

    async def _create(self, box: VercelBox) -> None:
        """Create the box's sandbox (not persistent: its stop leaves no snapshot behind), write its files and
        wheels (one request), and install its packages.

        A set of packages is downloaded before the sandbox is created when the image's Python is known; the
        first box that needs packages asks the image (one command) after its create.
        """
        pins = tuple(box.spec.packages)
        wheels = None
        if pins and self._python is not None:
            wheels = await asyncio.to_thread(self._wheelhouse.ensure, self._python, pins)
        needed = self._lifetime(box, box.spec.limits.timeout) + (INSTALL_TIMEOUT if pins else 0.0)
        lease = min(needed * (2 if box.session else 1), self._cap)  # Vercel refuses a timeout past the plan's cap
        policy = box.spec.network_policy if box.spec.network_policy is not None else vercel_network_policy(())
        if box.spec.egress:
            # The headers' values join the policy here only, never the audited one core holds.
            policy = vercel_injection_policy(policy, box.spec.egress)
        body: dict[str, Any] = {
            "projectId": self._project,
            "timeout": int(lease * 1000),
            "resources": {"vcpus": self._vcpus},
            "persistent": False,
            # Exactly the policy core handed over (and audited), with the egress headers; none at all: nothing out.
            "networkPolicy": policy,
        }
        if self._image:
            body["image"] = self._image
        if box.session:
            # Named and tagged so another process (a web app's other worker) finds it by the session id, and only
            # for the same tenant (mainsdk_driver_reconnect).
            body["name"] = session_name(box.id)
            body["tags"] = {TAG_SESSION: box.id, TAG_TENANT: box.spec.tenant}
        try:
            answer = await self._api.json("POST", "/v3/sandboxes", "create", json_body=body, idempotent=False)
        except VercelError as exc:
            if not box.spec.egress:
                raise
            raise _without_values(exc, box.spec.egress) from None
        try:
            box.session_id = str(answer["session"]["id"])
            box.name = str(answer["sandbox"]["name"])
        except (KeyError, TypeError):
            raise self._api.error("create", None, cause="the answer names no session id") from None
        box.started = time.monotonic()
        box.expires = box.started + lease
        try:
            await self._until_running(box, answer["session"].get("status"))
            if pins and wheels is None:
                self._python = await self._probe(box)
                wheels = await asyncio.to_thread(self._wheelhouse.ensure, self._python, pins)
            upload = {f"work/{name}": data for name, data in box.spec.files.items()}
            folder = f".mainsdk/wheels-{wheels.key[:16]}" if wheels is not None else ""
            if wheels is not None:
                wheel_bytes = await asyncio.to_thread(wheels.read)
                upload.update({f"{folder}/{name}": data for name, data in wheel_bytes.items()})
                upload[f"{folder}/{INSTALLER_ZIP}"] = await asyncio.to_thread(installer_zip)  # installs them in the box
            if upload:
                # Wheels are zip files already: gzip's fastest level costs little and saves nothing less.
                await self._write(box, upload, level=1 if wheels is not None else 9)
            if wheels is not None:
                await self._install(box, f"{ROOT}/{folder}", wheels.pins)
        except BaseException:
            await asyncio.shield(self._stop_quietly(box))
            raise

    def _cap_message(self, box: VercelBox, advice: bool = True) -> str:
        """What a session at the plan's cap says; core adds "open a new session" to a BoxGone's itself."""
        text = (
            f"the Vercel sandbox of {box.id} reached the most a sandbox may live on this plan, {_human(self._cap)} "
            f"from its start ({self._cap_setting}), and Vercel stopped it: its files, variables and processes are "
            "gone (set sandbox.vercel.plan or max_duration if your plan allows longer)"
        )
        return text + ("; open a new session" if advice else "")

    def _at_cap(self, box: VercelBox) -> bool:
        """Whether the box's session is at (or past) the plan's cap, so Vercel has stopped it or is stopping it."""
        return box.started > 0 and time.monotonic() >= box.started + self._cap - CAP_SLACK

    def _capped(self, box: VercelBox) -> SandboxError:
        """The error for a command Vercel cut at the cap: not retryable (the session is over), and the box gone."""
        box.gone = True
        return SandboxError(NO_SESSION, self._cap_message(box), status=404, retryable=False, ran=True)

    async def _until_running(self, box: VercelBox, status: Any) -> None:
        """Wait until the new session is ``running``: Vercel may answer the create while the VM still boots.

        Polled with ``GET /v2/sandboxes/{name}?projectId=...&resume=false``, the request the official
        Python client polls with, first at once and then every ``READY_POLL`` seconds, within the run's
        time limit. A session that ends (stopped, failed, aborted) or never runs in that time is a
        retryable 0006 naming its status; the caller stops the sandbox.
        """
        limit = box.spec.limits.timeout
        deadline = time.monotonic() + limit
        first = True
        while status != READY:
            if status in TERMINAL:
                raise self._api.error(
                    "create", None, cause=f"the sandbox {box.name} ended as {status!r} before it was running"
                )
            if status not in TRANSITIONAL:
                raise self._api.error("create", None, cause=f"the sandbox {box.name} has no known status ({status!r})")
            if time.monotonic() >= deadline:
                raise SandboxError(
                    DRIVER_UNAVAILABLE,
                    f"Vercel Sandbox {box.name} was still {status!r}, not running, {limit:g}s after its create "
                    "(the run's time limit); it was stopped and nothing ran. Check Vercel's status, then retry "
                    "(or give the run a longer timeout)",
                    status=503,
                    retryable=True,
                    ran=False,
                )
            if not first:
                await asyncio.sleep(min(READY_POLL, max(deadline - time.monotonic(), 0.0)))
            first = False
            answer = await self._api.json(
                "GET",
                f"/v2/sandboxes/{box.name}",
                "get",
                query={"projectId": str(self._project), "resume": "false"},
                idempotent=True,
            )
            session = answer.get("session") if isinstance(answer, dict) else None
            if not isinstance(session, dict):
                raise self._api.error("get", None, cause="the answer names no session")
            status = session.get("status")

    async def _probe(self, box: VercelBox) -> BoxPython:
        """The box's ``python3`` as pip sees a platform (one command, once per driver)."""
        captured = _Capture()
        run = _Run()
        await self._run(box, "python3", ["-I", "-c", PROBE], {}, run, captured)
        try:
            if run.exit_code != 0:
                raise ValueError(captured.text("stderr"))
            return BoxPython.parse(captured.text("stdout"))
        except ValueError:
            raise SandboxError(
                INVALID_OPTION,
                "packages: the Vercel sandbox's image has no usable python3 to install sandbox.packages.python "
                f"into (it said {captured.text('stderr')[-300:]!r}); choose an image with Python "
                "(sandbox.vercel.runtime: python3.13)",
                ran=False,
            ) from None

    async def _install(self, box: VercelBox, folder: str, pins: Sequence[str]) -> None:
        """Install the uploaded wheels offline (``INSTALL``); a failure is 0001 quoting it, before any code ran."""
        captured = _Capture()
        run = _Run()
        try:
            async with asyncio.timeout(INSTALL_TIMEOUT):
                await self._run(box, "bash", ["-c", INSTALL, folder, INSTALL_WHEELS, *pins], {}, run, captured)
        except TimeoutError:
            raise SandboxError(
                DRIVER_UNAVAILABLE,
                f"packages: installing {', '.join(pins)} in the Vercel sandbox took more than "
                f"{INSTALL_TIMEOUT:.0f}s; retry",
                ran=False,
            ) from None
        if run.exit_code != 0:
            said = captured.text("stderr") + captured.text("stdout")
            where = "in the Vercel sandbox (offline, from the wheels fetched for it)"
            raise SandboxError(INVALID_OPTION, failure_message(pins, said, where), ran=False)

    async def _install_kernel(self, box: VercelBox, pins: Sequence[str]) -> None:
        """Probe (once per driver), fetch, upload and install the kernel's set, in the box's turn to send."""
        async with box.sending:
            await self._ensure(box)
            if self._python is None:
                try:
                    self._python = await self._probe(box)
                except SandboxError as exc:
                    if exc.code != INVALID_OPTION:
                        raise
                    raise kernel_failure(exc.message, "in the Vercel sandbox: its python3 did not answer") from None
            problem = kernel_python_problem(self._python)
            if problem is not None:
                raise SandboxError(INVALID_OPTION, problem, ran=False)
            # Made from the app's installed distributions (the driver depends on the set): no index at run time.
            made = await asyncio.to_thread(kernel_find_links, pins)
            try:
                wheels = await asyncio.to_thread(self._wheelhouse.ensure, self._python, pins, find_links=made)
            except SandboxError as exc:
                if exc.code != INVALID_OPTION:
                    raise
                raise kernel_failure(exc, f"as wheels for {self._python.describe()}") from None
            folder = f".mainsdk/kernel-wheels-{wheels.key[:16]}"
            upload = {f"{folder}/{name}": data for name, data in (await asyncio.to_thread(wheels.read)).items()}
            upload[f"{folder}/{INSTALLER_ZIP}"] = await asyncio.to_thread(installer_zip)
            await self._write(box, upload, level=1)  # wheels are zips already
            captured = _Capture()
            run = _Run()
            args = ["-c", KERNEL_INSTALL, f"{ROOT}/{folder}", KERNEL_WHEELS, KERNEL]
            try:
                async with asyncio.timeout(INSTALL_TIMEOUT):
                    await self._run(box, "bash", args, {}, run, captured)
            except TimeoutError:
                raise SandboxError(
                    DRIVER_UNAVAILABLE,
                    f"cells: installing the kernel's IPython in the Vercel sandbox took more than "
                    f"{INSTALL_TIMEOUT:.0f}s; retry",
                    ran=False,
                ) from None
            if run.exit_code != 0:
                said = captured.text("stderr") + captured.text("stdout")
                raise kernel_failure(said, "in the Vercel sandbox (offline, from the wheels fetched for it)")

    async def _ensure(self, box: VercelBox) -> None:
        """Refuse a stopped box; extend a session's timeout when less than one command's lease is left.

        A one-shot box's lease already covers its one command, files in and out, and the stop.
        """
        async with box.lock:
            if box.gone or box.session_id is None:
                # Gone for good: a session on it is over (0008, core closes it), not an outage to retry forever.
                raise BoxGone(f"the Vercel sandbox of box {box.id} has stopped")
            needed = self._lifetime(box, box.spec.limits.timeout)
            end = box.started + self._cap  # the plan's cap: no extension reaches past it
            if box.session and time.monotonic() >= end - CAP_SLACK:
                box.gone = True  # Vercel stops it at the cap; nothing sent to it could run any more
                raise BoxGone(self._cap_message(box, advice=False))
            # Extend by a whole lease, in a fixed amount, so the requests (and cassettes) do not depend on timing,
            # and extensions stay rare; near the cap, only up to it.
            if box.session and box.expires - time.monotonic() < needed and box.expires < end:
                extra = min(needed, end - box.expires)
                await self._api.json(
                    "POST",
                    f"{SESSIONS}/{box.session_id}/extend-timeout",
                    "extend-timeout",
                    json_body={"duration": int(extra * 1000)},
                    idempotent=False,
                )
                box.expires += extra

    async def _write(self, box: VercelBox, files: Mapping[str, bytes], level: int = 9) -> None:
        """Write files (paths relative to ``ROOT``) as one gzipped tar, extracted by Vercel at ``ROOT``."""
        await self._api.request(
            "POST",
            f"{SESSIONS}/{box.session_id}/fs/write",
            "fs/write",
            content=_targz(files, (), level),
            headers={"content-type": "application/gzip", "x-cwd": ROOT},
            idempotent=True,  # the same bytes to the same paths
        )

    async def _read(self, box: VercelBox, path: str, shown: str) -> bytes:
        try:
            answer = await self._api.request(
                "POST", f"{SESSIONS}/{box.session_id}/fs/read", "fs/read", json_body={"path": path}, idempotent=True
            )
        except NotFound:
            raise SandboxError(NO_SESSION, f"no file {shown!r} in the box", status=404, retryable=False) from None
        return answer.content

    async def _read_capped(self, box: VercelBox, path: str, cap: int) -> bytes:
        """A file's first ``cap`` bytes (an out archive can be as large as the code made it)."""
        chunks: list[bytes] = []
        size = 0
        async with self._api.stream(
            "POST", f"{SESSIONS}/{box.session_id}/fs/read", "fs/read", json_body={"path": path}
        ) as answer:
            async for chunk in answer.aiter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size >= cap:
                    break
        return b"".join(chunks)[:cap]

    async def _stop_quietly(self, box: VercelBox) -> None:
        try:
            await self.mainsdk_driver_stop(box)
        except SandboxError as exc:
            log.warning("could not stop Vercel sandbox %s: %s", box.name, exc.message)

    # --- commands ---------------------------------------------------------------------------------------------------

    async def _run(
        self,
        box: VercelBox,
        program: str,
        args: list[str],
        env: dict[str, str],
        run: _Run,
        output: OutputSink | None,
        stdin: bool = False,
    ) -> None:
        """Run a command and stream its output until it exits, in one request (``cmd?wait=true&logs=true``).

        The answer is NDJSON: the command, its log lines, then the command with
        its ``exitCode`` (vercel-sandbox 0.10.0, ``SandboxApiClient.run_process``).
        If the stream breaks after the command started, it is followed with its
        logs and its wait, never sent again; ``run`` tells the caller what is known.
        """
        body = {
            "command": program,
            "args": args,
            "cwd": ROOT,
            "env": env,
            "sudo": False,
            "wait": True,
            "logs": True,
        }
        if stdin:
            body["attachStdin"] = True  # a live stdin, written with cmd/{id}/stdin (vercel-sandbox 0.10.0 run_process)
        delivered = {"stdout": 0, "stderr": 0}
        seen = {"stdout": 0, "stderr": 0}
        try:
            async with self._api.stream(
                "POST",
                f"{SESSIONS}/{box.session_id}/cmd",
                "cmd",
                json_body=body,
                query={"wait": "true", "logs": "true"},
            ) as answer:
                async for entry in _ndjson(answer):
                    if "command" in entry:
                        command = entry.get("command") or {}
                        if run.cmd_id is None:
                            run.cmd_id = str(command.get("id") or "") or None
                            if run.cmd_id is None:
                                raise self._api.error("cmd", None, cause="the answer names no command id")
                            if run.started is not None:
                                run.started()
                        else:
                            run.exit_code = _exit_code(command, self._api)
                        continue
                    self._deliver(entry, output, seen, delivered)
        except VercelError as exc:
            # A break mid-stream after the command started is followed below; anything else is the answer.
            if run.cmd_id is None or exc.vercel_status is not None or "network:" not in exc.message:
                raise
        except (httpx.TransportError, ValueError) as exc:
            if run.cmd_id is None:
                raise self._api.error("cmd", None, cause=f"the stream broke: {type(exc).__name__}") from None
        if run.exit_code is not None:
            return
        if run.cmd_id is None:
            raise self._api.error("cmd", None, cause="the stream ended before the command started")
        # Started, but the stream ended early: follow it, as vercel-sandbox's run_process does (_RunProcessInterrupted).
        await self._follow_logs(box, run.cmd_id, output, delivered)
        run.exit_code = await self._wait(box, run.cmd_id)

    async def _feed(
        self, box: VercelBox, cmd_id: str, first: bytes | None, chunks: InputStream, ending: Callable[[], bool]
    ) -> None:
        """Write a running command's live stdin: ``first`` (``Command.stdin``), each chunk as it comes, then close.

        ``POST .../cmd/{cmdId}/stdin`` {data (base64), offset, close} (docs "Write to command stdin";
        vercel-sandbox 0.10.0 ``api_client.write_command_stdin``): one write at a time, in order, each at
        most ``STDIN_CHUNK`` bytes, each carrying its ``offset`` so a resend after a 5xx, a 504 (the command
        not reading within 30 s) or a broken connection skips what the command already has. A command that
        ended or closed its stdin (400 ``command_stdin_unavailable``, 404) takes nothing more: the rest is
        dropped, as ``InputStream`` says; so is all of it once the command is being ended (``ending``).
        """
        offset = 0
        path = f"{SESSIONS}/{box.session_id}/cmd/{cmd_id}/stdin"

        async def write(data: bytes, close: bool = False) -> bool:
            nonlocal offset
            body: dict[str, Any] = {"offset": offset}
            if data:
                body["data"] = base64.b64encode(data).decode("ascii")
            if close:
                body["close"] = True
            try:
                async with box.sending:  # in the order of the sandbox's other requests
                    answer = await self._api.json("POST", path, "stdin", json_body=body, idempotent=True)
            except VercelError as exc:
                if exc.vercel_status == 404 or (exc.vercel_status == 400 and exc.vercel_code == STDIN_GONE):
                    return False
                raise
            written = answer.get("bytesWritten") if isinstance(answer, dict) else None
            offset = written if isinstance(written, int) else offset + len(data)
            return True

        try:
            if first and not await self._write_chunks(write, first):
                return
            async for chunk in chunks:
                if ending() or not await self._write_chunks(write, chunk):
                    return
            if not ending():
                await write(b"", close=True)
        except SandboxError as exc:
            # The command runs on without its input; its own end (or its timeout) reports the run.
            log.warning("could not write the stdin of a Vercel command: %s", exc.message)

    @staticmethod
    async def _write_chunks(write: Callable[[bytes], Awaitable[bool]], data: bytes) -> bool:
        for start in range(0, len(data), STDIN_CHUNK):
            if not await write(data[start : start + STDIN_CHUNK]):
                return False
        return True

    def _deliver(
        self, entry: dict[str, Any], output: OutputSink | None, seen: dict[str, int], delivered: dict[str, int]
    ) -> None:
        """One log line to ``output``, skipping what an earlier connection already delivered (Vercel replays)."""
        stream = entry.get("stream")
        if stream == "error":
            detail = entry.get("data") or {}
            raise self._api.error("logs", None, cause=f"{detail.get('code')}: {detail.get('message')}")
        if stream not in ("stdout", "stderr"):
            return
        data = str(entry.get("data", "")).encode("utf-8")
        start = seen[stream]
        seen[stream] += len(data)
        fresh = data[max(delivered[stream] - start, 0) :]
        if fresh and output is not None:
            delivered[stream] += len(fresh)
            (output.stdout if stream == "stdout" else output.stderr)(fresh)
        elif fresh:
            delivered[stream] += len(fresh)

    async def _follow_logs(
        self, box: VercelBox, cmd_id: str, output: OutputSink | None, delivered: dict[str, int]
    ) -> None:
        """Read a started command's logs until it ends; reconnect when the stream breaks (replayed from the start)."""
        path = f"{SESSIONS}/{box.session_id}/cmd/{cmd_id}/logs"
        for attempt in range(LOG_RECONNECTS + 1):
            seen = {"stdout": 0, "stderr": 0}
            try:
                async with self._api.stream("GET", path, "logs") as answer:
                    async for entry in _ndjson(answer):
                        self._deliver(entry, output, seen, delivered)
                return
            except (httpx.TransportError, ValueError) as exc:
                if attempt == LOG_RECONNECTS:
                    raise self._api.error("logs", None, cause=f"the stream broke: {type(exc).__name__}") from None
            except VercelError as exc:
                # A network failure to reach the stream is retried like a break; an answer from Vercel is not.
                if exc.vercel_status is not None or "network:" not in exc.message or attempt == LOG_RECONNECTS:
                    raise

    async def _wait(self, box: VercelBox, cmd_id: str) -> int:
        answer = await self._api.json(
            "GET",
            f"{SESSIONS}/{box.session_id}/cmd/{cmd_id}",
            "cmd wait",
            query={"wait": "true"},
            idempotent=True,
        )
        return _exit_code(answer.get("command") if isinstance(answer, dict) else None, self._api)

    async def _kill(self, box: VercelBox, cmd_id: str | None) -> None:
        """Kill a command's whole tree: SIGTERM to its wrapper, which SIGKILLs the code's group; else stop the box."""
        if box.gone or box.session_id is None:
            return
        if cmd_id is None:
            # The command request got no answer: it may run, and has no id to kill by. Only stopping reaches it.
            await self._stop_quietly(box)
            return
        try:
            await self._api.request(
                "POST",
                f"{SESSIONS}/{box.session_id}/cmd/{cmd_id}/kill",
                "kill",
                json_body={"signal": SIGTERM},
                idempotent=True,
            )
        except SandboxError:
            # The command could not be killed: stop the sandbox rather than leave it running.
            await self._stop_quietly(box)


def _human(seconds: float) -> str:
    """``45 min``, ``24 h``, ``8 s``: a duration for messages."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _bash_added(env: Mapping[str, str]) -> str:
    """The variables bash adds that the caller did not give, for the wrapper to take back (fixed names only)."""
    return " ".join(name for name in ("OLDPWD", "PWD", "SHLVL", "_") if name not in env)


async def _ndjson(answer: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of an NDJSON answer, one per non-empty line."""
    async for line in answer.aiter_lines():
        if line.strip():
            entry = json.loads(line)
            if isinstance(entry, dict):
                yield entry


def _exit_code(command: Any, api: VercelApi) -> int:
    try:
        return int(command["exitCode"])
    except (KeyError, TypeError, ValueError):
        raise api.error("cmd", None, cause="the answer has no exitCode") from None


def _unpack_out(data: bytes, max_bytes: int) -> Collected:
    """The regular files of an out archive within ``max_bytes``, by name; links and the rest are skipped.

    The archive is the code's to tamper with (a process it left in its own
    session can rewrite it before it is read), so nothing in it is trusted: a
    name must be a plain relative path, a file is read only while the total
    stays within ``max_bytes`` (a gzip bomb costs no memory), and at most
    ``MAX_OUT_ENTRIES`` entries are looked at. The archive may be cut (it was
    read up to a cap): what came before counts, and the run is ``truncated``.
    """
    files: dict[str, bytes] = {}
    skipped: list[tuple[str, str]] = []
    truncated = False
    total = 0
    inflated = _Inflate(data, limit=max_bytes + ARCHIVE_SLACK)
    try:
        with tarfile.open(fileobj=inflated, mode="r|") as archive:
            for count, member in enumerate(archive):
                if count >= MAX_OUT_ENTRIES:
                    truncated = True
                    break
                name = _out_name(member.name)
                if name is None or member.isdir():
                    if name is None and member.name.strip("./"):
                        skipped.append((member.name[:200], "not a plain relative name"))
                    continue
                if not member.isfile():
                    skipped.append((name, "not a regular file"))
                    continue
                if total + member.size > max_bytes or name in files:
                    truncated = truncated or name not in files
                    skipped.append((name, "past limits.files" if name not in files else "twice in the archive"))
                    continue
                extracted = archive.extractfile(member)
                content = extracted.read(member.size) if extracted is not None else b""
                total += len(content)
                files[name] = content
    except (tarfile.TarError, EOFError, OSError, zlib.error, TypeError, ValueError):
        # Read up to the cap, cut, or garbage (tarfile's stream mode raises TypeError on a header cut short):
        # what came before counts.
        truncated = True
    # tarfile ends quietly at a stream cut short: only a gzip stream read to its end is the whole archive.
    while not truncated and inflated.read(65536):
        pass  # the end-of-archive blocks and record padding, up to the gzip trailer
    truncated = truncated or not inflated.complete
    return Collected(
        files=tuple(OutFile(name, files[name]) for name in sorted(files)),
        truncated=truncated,
        skipped=tuple(sorted(skipped)),
    )


class _Inflate(io.RawIOBase):
    """A gzip stream inflated as it is read, never past ``limit`` bytes out (what a skipped bomb may cost)."""

    def __init__(self, data: bytes, limit: int) -> None:
        self._data = data
        self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._pending = b""
        self._fed = 0
        self._out = 0
        self._limit = limit

    @property
    def complete(self) -> bool:
        """Whether the gzip stream was read to its end (its trailer checked) within the limit."""
        return self._inflater.eof and not self._pending

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while not self._pending and not self._inflater.eof and self._out < self._limit:
            chunk = self._inflater.unconsumed_tail or self._data[self._fed : self._fed + 65536]
            if not self._inflater.unconsumed_tail:
                self._fed += len(chunk)
            if not chunk:
                break  # the data ends before the stream does: cut
            self._pending = self._inflater.decompress(chunk, 65536)
        size = min(len(view), len(self._pending), max(self._limit - self._out, 0))
        view[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        self._out += size
        return size


def _out_name(raw: str) -> str | None:
    """``raw`` as a name relative to out/ (``./a/b`` is ``a/b``), or None when it is not one (absolute, ``..``)."""
    name = raw.removeprefix("./")
    if not name or name.startswith("/") or "\0" in name:
        return None
    normal = posixpath.normpath(name)
    if normal in (".", "") or normal == ".." or normal.startswith("../"):
        return None
    return normal


def _targz(files: Mapping[str, bytes], folders: Sequence[str], level: int = 9) -> bytes:
    """A gzipped tar of ``folders`` (empty) and ``files``, deterministic: fixed times, owner and order."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            archive.addfile(info)
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), compresslevel=level, mtime=0)


def resolve_token(value: str, environ: Mapping[str, str] | None = None) -> str:
    """``secret:NAME`` is the environment variable NAME; anything else is the token itself."""
    environ = os.environ if environ is None else environ
    if value.startswith("secret:"):
        name = value.removeprefix("secret:")
        token = environ.get(name, "")
        if not token:
            raise SandboxError(
                INVALID_OPTION,
                f"sandbox.vercel.token names the secret {name}, which is not set in the environment; set {name}",
            )
        return token
    return value


def vercel_sandbox_driver(
    *,
    token: str,
    project: str | None,
    team: str | None = None,
    runtime: str | None = None,
    price: Decimal | None = None,
    base_url: str = DEFAULT_BASE_URL,
    client: httpx.AsyncClient | None = None,
    plan: str = "hobby",
    max_duration: float | None = None,
) -> VercelDriver:
    """The ``vercel-sandbox`` driver with explicit settings (for tests: a loopback ``base_url`` or ``client``)."""
    return VercelDriver(
        token=token,
        project=project,
        team=team,
        runtime=runtime,
        price=price,
        base_url=base_url,
        client=client,
        plan=plan,
        max_duration=max_duration,
    )


def driver_from_config(config: AppConfig, **overrides: Any) -> VercelDriver:
    """The driver ``main.yaml`` describes (``sandbox.vercel``, ``sandbox.price``); the ``mainsdk.drivers`` entry point.

    ``MAINSDK_VERCEL_BASE_URL`` points the driver at another API host (the
    conformance recorder's proxy); ``overrides`` go to ``vercel_sandbox_driver``.
    """
    vercel = config.sandbox.section("vercel", VercelConfig)
    settings: dict[str, Any] = {
        "project": vercel.project,
        "team": vercel.team,
        "runtime": vercel.runtime,
        "plan": vercel.plan,
        "max_duration": vercel.session_cap if vercel.max_duration is not None else None,
        "price": config.sandbox.price,
        "base_url": os.environ.get("MAINSDK_VERCEL_BASE_URL") or DEFAULT_BASE_URL,
    }
    settings.update(overrides)
    if "token" not in settings:
        token = vercel.token
        if not token.resolved:  # core resolves it when it loads the driver; this is a factory called by hand
            token = token.resolve(environment_secrets, "sandbox.vercel.token")
        if token.value is None:
            raise SandboxError(INVALID_OPTION, token.missing())
        settings["token"] = token.value
    return vercel_sandbox_driver(**settings)


def _without_values(error: VercelError, rules: Sequence[EgressRule]) -> VercelError:
    """``error`` with no egress header's value in its message, should Vercel's answer ever repeat one."""
    message = error.message
    for value in (v for rule in rules for h in rule.headers for v in (h.value, h.secret_value)):
        if value:
            message = message.replace(value, "[redacted]")
    return type(error)(message, error.vercel_status, error.vercel_code)
