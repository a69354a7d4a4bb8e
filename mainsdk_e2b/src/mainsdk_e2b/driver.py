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
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import math
import os
import re
import shlex
import tarfile
import time
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import attrs
import httpx
from e2b import AsyncSandbox
from e2b.exceptions import (
    AuthenticationException,
    FileNotFoundException,
    NotFoundException,
    RateLimitException,
    SandboxException,
    ServiceBusyException,
)
from e2b.sandbox.commands.command_handle import CommandExitException
from e2b.sandbox.sandbox_api import SandboxQuery
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
    NetworkReach,
    OutFile,
    OutputSink,
    SandboxError,
    SecretResolver,
    before_command,
    environment_secrets,
)
from mainsdk.hookspecs import hookimpl
from mainsdk_driverkit.installed import kernel_find_links
from mainsdk_driverkit.wheelhouse import Wheelhouse, failure_message, kernel_failure

from mainsdk_e2b.config import PLAN_HOURS, E2BConfig
from mainsdk_e2b.packages import (
    ENV_PYTHON,
    KERNEL,
    KERNEL_WHEELS,
    PROBE,
    WHEELS,
    BoxPython,
    install_line,
    kernel_install_line,
    kernel_python_problem,
)

if TYPE_CHECKING:
    from e2b.sandbox.sandbox_api import SandboxNetworkOpts

DRIVER_ID = "e2b"
log = logging.getLogger("mainsdk.e2b")

# The seed's two folders, side by side so ``../out`` from the work folder is the out folder, as on the local driver.
HOME = "/home/user"
WORK = f"{HOME}/work"
OUT = f"{HOME}/out"
FOLDERS = {Folder.WORK: WORK, Folder.OUT: OUT}
# The only variables a command gets besides the ones it is given: a login shell's would leak the template's.
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The bundle envd appends E2B's egress-proxy CA to, at every create and resume (e2b-dev/infra
# packages/envd/internal/host/cacerts.go ``CaBundlePath``, from /init's ``caBundle``, api/init.go), and only it:
# curl and urllib read it, but requests, httpx and pip (certifi), git and node (its own store) do not. With egress
# headers E2B's proxy ends TLS for the rules' hosts with that CA, so each client is pointed at the bundle.
E2B_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
TRUST_VARIABLES = (
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "NODE_EXTRA_CA_CERTS",
    "PIP_CERT",
    "REQUESTS_CA_BUNDLE",
    "SSL_CERT_FILE",
)

# E2B's published prices (FAQ): per vCPU-second and per GiB-second of allocated memory.
PRICE_PER_VCPU_SECOND = Decimal("0.000014")
PRICE_PER_GIB_SECOND = Decimal("0.0000045")
DEFAULT_VCPUS = 2
DEFAULT_MEMORY_MIB = 512

# A sandbox outlives its deadline by this much at most if the driver itself dies: E2B kills it then.
SANDBOX_MARGIN = 60
# How long the driver waits for a killed command's stream to end; in a run the command archives out/ first.
KILL_WAIT = 2.0
ARCHIVE_WAIT = 10.0
# The in-VM backstop kills the code this long past its deadline if the driver is gone (core's own grace).
BACKSTOP_GRACE = 5
# A command gets a refresh of the sandbox's lifetime only when less than its timeout and this is left.
KEEP_ALIVE_SLACK = 10
# A session's request that fails this close to the plan's cap failed because E2B ended the sandbox there.
CAP_SLACK = 5.0
REQUEST_TIMEOUT = 30.0
# The box's python is probed in seconds; installing pandas and matplotlib offline takes about 15 s.
PROBE_TIMEOUT = 60.0
INSTALL_TIMEOUT = 600.0
# The programs a box with packages runs from its packages' environment (core's python runs and cells say python3).
PYTHON_PROGRAMS = frozenset({"python3", "python"})
# The archive a run's command leaves: named after its pid (the start event's), so the driver knows it.
ARCHIVE = "/tmp/mainsdk-out-{pid}.tar"
# Bytes read of an archive past limits.files: tar headers and padding (512 B a member, more for long names).
ARCHIVE_SLACK = 1024 * 1024
# Metadata keys on every sandbox the driver creates: the run's or session's id and its tenant.
META_BOX = "mainsdk_box"
META_TENANT = "mainsdk_tenant"
# On a sandbox created with egress headers: a worker that reconnects to the session points its commands at
# E2B_CA_BUNDLE too (the rules themselves are not listed back).
META_EGRESS = "mainsdk_egress"
# What every MAIN-SANDBOX-0006 of this driver ends with (Capabilities.outage_remedy, the README's promise).
OUTAGE_REMEDY = "check E2B's status and the API key (sandbox.e2b.key, default secret:E2B_API_KEY)"
_SECRET_REF = re.compile(r"secret:([A-Za-z_][A-Za-z0-9_]*)")  # matched whole: ``$`` lets a final newline by


def e2b_network_policy(hosts: Sequence[str]) -> dict[str, list[str]]:
    """E2B's egress policy for ``hosts``: those allowed out, everything else denied; no hosts is nothing out.

    ``allow_out`` takes names and ``*.wildcards`` (filtered by Host on port 80
    and SNI on 443) and wins over ``deny_out``, which denies all IPv4 here.
    """
    return {"allow_out": list(hosts), "deny_out": ["0.0.0.0/0"]}


# E2B's API limits on a create's network.rules (e2b-dev/infra packages/api/internal/handlers/sandbox_create.go,
# validateNetworkRules): core's own limits are wider, so the driver refuses what E2B would, before any request.
MAX_RULE_DOMAINS = 10
MAX_RULE_DOMAIN_BYTES = 128
MAX_HEADER_NAME_BYTES = 64
MAX_HEADER_VALUE_BYTES = 2048
MAX_HEADERS_PER_RULE = 20
# A header value with these in it is read by E2B's egress proxy as a placeholder for a token or a team secret
# it holds (packages/shared/pkg/networktransform/placeholders.go): a secret's value is never one.
E2B_PLACEHOLDERS = ("${e2b.identity.tokens.", "${e2b.secrets.")
# govalidator IsDNSName, which the API holds each rule's domain to (no "*", no IP).
_DNS_NAME = re.compile(r"([a-zA-Z0-9_][a-zA-Z0-9_-]{0,62})(\.[a-zA-Z0-9_][a-zA-Z0-9_-]{0,62})*[._]?")


def e2b_network_rules(rules: Sequence[EgressRule]) -> dict[str, list[dict[str, Any]]]:
    """The create's ``network.rules`` for the box's egress headers: per host, one rule that sets them.

    E2B's egress proxy sets each header on the box's HTTP and HTTPS requests to that domain, replacing one
    of the same name (spec/openapi.yml ``SandboxNetworkTransform``: "An existing header with the same name is
    replaced"); at most one rule per domain (``maxNetworkRuleTransformsPerDomain``). The values are the
    secrets' own: they go to E2B's API, never into the sandbox.
    """
    return {rule.host: [{"transform": {"headers": {h.name: h.value for h in rule.headers}}}] for rule in rules}


def check_egress(rules: Sequence[EgressRule]) -> None:
    """Refuse (MAIN-SANDBOX-0001, nothing sent) egress headers E2B's API would answer with a 400.

    Names the host, the header or the secret at fault, never a value.
    """
    if len(rules) > MAX_RULE_DOMAINS:
        raise SandboxError(
            INVALID_OPTION,
            f"egress names {len(rules)} hosts; E2B takes network rules for at most {MAX_RULE_DOMAINS} "
            "(network.rules, sandbox_create.go maxNetworkRuleDomains): give this run fewer",
            ran=False,
        )
    for rule in rules:
        where = f"egress[{rule.host!r}]"
        if len(rule.host.encode()) > MAX_RULE_DOMAIN_BYTES or _DNS_NAME.fullmatch(rule.host) is None:
            raise SandboxError(
                INVALID_OPTION,
                f"{where}: E2B takes network rules for DNS names of at most {MAX_RULE_DOMAIN_BYTES} characters "
                "only; name the host another way or drop it from egress",
                ran=False,
            )
        if len(rule.headers) > MAX_HEADERS_PER_RULE:
            raise SandboxError(
                INVALID_OPTION,
                f"{where}.headers: E2B sets at most {MAX_HEADERS_PER_RULE} headers per host; give fewer",
                ran=False,
            )
        for header in rule.headers:
            at = f"{where}.headers.{header.name}"
            if len(header.name.encode()) > MAX_HEADER_NAME_BYTES:
                raise SandboxError(
                    INVALID_OPTION,
                    f"{at}: E2B takes header names of at most {MAX_HEADER_NAME_BYTES} characters; use a shorter one",
                    ran=False,
                )
            if len(header.value.encode()) > MAX_HEADER_VALUE_BYTES:
                raise SandboxError(
                    INVALID_OPTION,
                    f"{at}: the value of secret {header.secret!r} (with its prefix) is longer than the "
                    f"{MAX_HEADER_VALUE_BYTES} bytes E2B takes for a header value",
                    ran=False,
                )
            if any(marker in header.value for marker in E2B_PLACEHOLDERS):
                raise SandboxError(
                    INVALID_OPTION,
                    f"{at}: the value of secret {header.secret!r} (with its prefix) holds '${{e2b.', which E2B's "
                    "egress proxy would read as a placeholder for another credential; it cannot be sent as it is",
                    ran=False,
                )


def estimate_price(vcpus: int = DEFAULT_VCPUS, memory_mib: int = DEFAULT_MEMORY_MIB) -> Decimal:
    """Dollars per second of a sandbox of that size, from E2B's published per-vCPU and per-GiB prices."""
    return (PRICE_PER_VCPU_SECOND * vcpus + PRICE_PER_GIB_SECOND * Decimal(memory_mib) / 1024).normalize()


@attrs.define
class E2BBox:
    """A started box: the E2B sandbox, and what the driver tracks of it."""

    id: str
    sandbox: AsyncSandbox = attrs.field(repr=False)
    sandbox_id: str
    expires: float  # monotonic time E2B will kill it at unless told otherwise
    lifetime: int  # seconds E2B keeps it after a refresh
    # Monotonic time of the plan's cap: E2B ends the sandbox then, whatever it is told (``E2BDriver._at_cap``).
    cap_at: float = math.inf
    archive_limit: int | None = None  # a run: its command archives out/ up to this many bytes; None in a session
    archive_pid: int | None = None  # the pid (start event) of the command whose archive ``collect`` reads
    stdin_files: int = 0
    stopped: bool = False
    python: str | None = None  # the interpreter of the box's packages (``packages.ENV_PYTHON``), when it has some
    kernel_site: str | None = None  # the folder of the cell kernel's packages, once installed (``KERNEL``)
    # The box has egress headers: E2B's proxy ends TLS for their hosts, so every command trusts E2B_CA_BUNDLE.
    egress: bool = False
    # A session's requests go one at a time, in an order set by core's calls, never by network timing: core
    # starts the cell kernel's exec as a task and writes the first cell at once, so without this the kernel's
    # input upload and the cell's write race (and a replay, strict about one sandbox's order, sees them
    # swapped). Each hook that sends yields once, then waits for its turn (``_in_turn``, a FIFO lock) until its
    # request is answered (for a command: until envd's start event).
    in_order: asyncio.Lock = attrs.field(factory=asyncio.Lock, repr=False)


# E2B's egress firewall matches names only on port 80 (HTTP Host) and 443 (TLS SNI); every other port is
# CIDR-only (e2b-dev/infra packages/orchestrator/pkg/tcpfirewall/proxy.go). When any domain is allowed, the API
# adds its nameserver 8.8.8.8 to the allowed addresses, on every port (packages/api/internal/orchestrator/
# create_instance.go buildEgressConfig, packages/shared/pkg/sandbox-network/firewall.go DefaultNameserver).
E2B_NETWORK_REACH = NetworkReach(
    filtered=(("http", 80), ("https", 443)),
    extra=("8.8.8.8/32 every port (E2B's nameserver, opened whenever a domain is allowed)",),
)


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
        # The longest E2B lets a sandbox run from its start (the team's plan), and the setting that said so.
        self._max_length = max_length
        self._plan = plan
        self._wheelhouse = wheelhouse or Wheelhouse()
        # Each template's python, probed once (one Start in the first box that needs packages).
        self._box_pythons: dict[str | None, BoxPython] = {}
        self._missing_key = missing_key
        self._api_url = api_url
        self._sandbox_url = sandbox_url
        self._template = template
        self._price = price if price is not None else estimate_price(vcpus, memory_mib)
        self._request_timeout = request_timeout

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
        box_python = self._box_pythons.get(self._template) if packages else None
        wheels: list[Path] = []
        if box_python is not None:
            wheels = (await asyncio.to_thread(self._wheelhouse.ensure, box_python, packages)).paths
        if spec.limits.timeout > self._max_length:
            raise SandboxError(
                INVALID_OPTION,
                f"limits.timeout {spec.limits.timeout:g}s is longer than E2B lets a sandbox run "
                f"({self._cap_text()}): lower it, or set the plan your team has",
                ran=False,
            )
        # E2B refuses a create's timeout past the team's maximum with a 400 (handlers/timeout_helper.go
        # validateAndParseTimeout): a long idle time is asked for up to the cap, and kept alive from there.
        lifetime = min(math.ceil((spec.idle or 0) + spec.limits.timeout) + SANDBOX_MARGIN, self._max_length)
        # Exactly the policy core handed over (and audited); none at all: nothing out.
        policy = spec.network_policy if spec.network_policy is not None else e2b_network_policy(())
        if spec.egress:
            check_egress(spec.egress)
            # The headers' values join the policy here only, never the audited one core holds.
            policy = {**policy, "rules": e2b_network_rules(spec.egress)}
        # The box's id (core's run or session id) and its tenant: how a failed create's orphans and a session
        # another worker opened are found again (GET /v2/sandboxes?metadata=, spec/openapi.yml).
        metadata = {META_BOX: spec.id, META_TENANT: spec.tenant, **({META_EGRESS: "headers"} if spec.egress else {})}
        opts = self._opts()
        asked = time.monotonic()  # E2B's start time comes after this: the cap measured from here is never late
        try:
            sandbox = await AsyncSandbox.create(
                template=self._template,
                timeout=lifetime,
                network=cast("SandboxNetworkOpts", policy),
                metadata=metadata,
                # The SDK resends a create on 429/502/503/504 with the same key (e2b retry.py); the key only helps
                # where the API honours it, so a failed create also looks for what it may have left (below).
                idempotency_key=idempotency_key(spec.id),
                **opts,
            )
        except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
            if spec.egress and isinstance(exc, SandboxException) and getattr(exc, "status_code", None) == 400:
                # The API checks network.rules before it makes anything (sandbox_create.go validateNetworkConfig):
                # a team without E2B's network-transform-rules feature is told so here. Not retryable.
                reason = self._reason(exc, spec.egress)
                remedy = (
                    "network transform rules must be enabled for your E2B team, or drop egress"
                    if "not available for your team" in reason
                    else "fix what E2B names, or drop egress"
                )
                raise SandboxError(
                    INVALID_OPTION,
                    f"E2B refused the create with egress headers (network.rules): {reason}; {remedy}",
                    ran=False,
                ) from None
            # A create that succeeded but answered 502/504 (or timed out), on any of the SDK's tries, leaves a
            # billed sandbox: find it by the box's id in its metadata and kill it. A 401 refused them all.
            if not isinstance(exc, AuthenticationException):
                await self._kill_orphans(spec.id)
            raise self._unavailable("create a sandbox", exc, egress=spec.egress) from None
        box = E2BBox(
            spec.id,
            sandbox,
            sandbox.sandbox_id,
            asked + lifetime,
            lifetime,
            cap_at=asked + self._max_length,
            egress=bool(spec.egress),
        )
        if spec.idle is None:
            box.archive_limit = spec.limits.files
        try:
            if packages and box_python is None:
                box_python = await self._probe(box)
                wheels = (await asyncio.to_thread(self._wheelhouse.ensure, box_python, packages)).paths
            entries = [{"path": f"{WORK}/{name}", "data": bytes(data)} for name, data in sorted(spec.files.items())]
            entries += [{"path": f"{WHEELS}/{wheel.name}", "data": wheel.read_bytes()} for wheel in wheels]
            if entries:
                try:
                    # multipart: every file and wheel in one request, whatever envd version answers
                    await sandbox.files.write_files(entries, use_octet_stream=False)  # type: ignore[arg-type]
                except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
                    raise self._unavailable("upload the work files", exc) from None
            if packages:
                await self._install(box, packages, [wheel.name for wheel in wheels])
        except BaseException:
            await self._kill(box)
            raise
        return box

    @hookimpl
    async def mainsdk_driver_exec(self, box: E2BBox, command: Command, output: OutputSink) -> ExecOutcome:
        """Run ``command`` under its deadline, streaming its output; kill its whole tree at the deadline or cancel."""
        sandbox = box.sandbox
        turn = await self._in_turn(box)
        try:
            self._check_cap(box)
            await self._keep_alive(box, command.timeout)
            stdin_path = None
            # A live stdin (Command.input) gets the given bytes first over the same channel, not as a file.
            live = command.input is not None
            if command.stdin is not None and not live:
                box.stdin_files += 1
                stdin_path = f"/tmp/mainsdk-stdin-{box.stdin_files}"  # a counter, not random: same bytes each run
                try:
                    await sandbox.files.write_files(
                        [{"path": stdin_path, "data": command.stdin}], use_octet_stream=False
                    )
                except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
                    raise self._unavailable("upload the command's input", exc) from None
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
        try:
            async with asyncio.timeout(min(command.timeout, max(box.cap_at - started, 0.0))) as deadline:
                with turn:  # the next request of this box may go once envd said the command started
                    handle = await sandbox.commands.run(
                        line,
                        background=True,
                        envs=dict(command.env),
                        on_stdout=lambda text: output.stdout(text.encode()),
                        on_stderr=lambda text: output.stderr(text.encode()),
                        # envd kills (the one pid of) the command at this bound; the in-VM backstop and this deadline
                        # come first.
                        timeout=command.timeout + SANDBOX_MARGIN,
                        request_timeout=self._request_timeout,
                        # envd's StartRequest.stdin: a pipe the driver writes with SendInput, else /dev/null.
                        stdin=live,
                    )
                box.archive_pid = handle.pid
                # Shielded: a cancel must reach this task, not the SDK's stream reader, which the kill ends.
                waiter = asyncio.ensure_future(handle.wait())
                if live:
                    await self._feed(box, handle.pid, command, waiter)
                try:
                    exit_code = (await asyncio.shield(waiter)).exit_code
                except CommandExitException as exited:
                    exit_code = exited.exit_code
                    signal = signal_of(exited.error)
        except TimeoutError:
            if not deadline.expired():
                raise self._unavailable("run the command", TimeoutError("the request timed out"), box) from None
            if capped:
                if waiter is not None:
                    waiter.cancel()
                raise self._cap_reached(box) from None
            await self._kill_command(box, handle, waiter)
            return ExecOutcome(exit_code=None, stop="timeout", duration=time.monotonic() - started)
        except asyncio.CancelledError:
            # Core cancels at the output limit and at its own deadline: the command must not outlive that.
            await self._kill_command(box, handle, waiter)
            raise
        except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
            raise self._unavailable("run the command", exc, box) from None
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
        with await self._in_turn(box):
            self._check_cap(box)
            await self._keep_alive(box, box.lifetime - SANDBOX_MARGIN)
            try:
                await box.sandbox.files.write_files(
                    [{"path": f"{FOLDERS[folder]}/{path}", "data": data}], use_octet_stream=False
                )
            except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
                raise self._unavailable("write a file", exc, box) from None

    @hookimpl
    async def mainsdk_driver_read_file(self, box: E2BBox, folder: Folder, path: str) -> bytes:
        """Read a file of the work or the out folder (sessions)."""
        full = f"{FOLDERS[folder]}/{path}"  # checked by core: relative, no '.' or '..' segment
        self._check_cap(box)
        try:
            return bytes(await box.sandbox.files.read(full, format="bytes"))
        except FileNotFoundException:
            raise SandboxError(
                NO_SESSION, f"no file {path!r} in the session's box", status=404, retryable=False
            ) from None
        except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
            raise self._unavailable("read a file", exc, box) from None

    @hookimpl
    async def mainsdk_driver_collect(self, box: E2BBox, max_bytes: int) -> Collected:
        """Read the archive the command made of the out folder (one request) and take its files, never its links."""
        if box.archive_pid is None:
            return Collected()  # the command never started: there is no out folder to read
        path = ARCHIVE.format(pid=box.archive_pid)
        cap = max_bytes + (box.archive_limit or max_bytes) + ARCHIVE_SLACK
        data = bytearray()
        try:
            reader = await box.sandbox.files.read(path, format="stream", request_timeout=self._request_timeout)
            async with contextlib.aclosing(reader):
                async for chunk in reader:
                    data += chunk
                    if len(data) > cap:
                        break  # more than the limit can hold: what came is enough, the rest is cut
        except FileNotFoundException:
            # The command was killed before it could archive out/ (the kill fell back to envd's one-pid SIGKILL).
            log.warning("e2b: the out folder of sandbox %s was not archived; its files are lost", box.sandbox_id)
            return Collected(truncated=True, skipped=(("", "the out folder was not archived"),))
        except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
            raise self._unavailable("read the out folder", exc) from None
        return extract_out_archive(bytes(data[:cap]), max_bytes, cut=len(data) > cap)

    @hookimpl
    async def mainsdk_driver_reconnect(self, spec: BoxSpec) -> E2BBox | None:
        """Take up session ``spec.id`` another worker opened: found by its id and tenant in the metadata, connected.

        Another tenant's session, a killed one and an unknown id are all None
        (core answers MAIN-SANDBOX-0008). Two requests: a list, a connect.
        """
        wanted = {META_BOX: spec.id, META_TENANT: spec.tenant}
        opts = self._opts()
        try:
            found = await AsyncSandbox.list(query=SandboxQuery(metadata=wanted), **opts).next_items()
        except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
            raise self._unavailable("look for the session", exc) from None
        # The filter is E2B's (exact per key); the tenant is checked here again, whatever the filter did.
        mine = [info for info in found if (info.metadata or {}).get(META_TENANT) == spec.tenant]
        if not mine:
            return None
        try:
            sandbox = await AsyncSandbox.connect(mine[0].sandbox_id, **opts)
        except NotFoundException:
            return None  # killed between the list and the connect
        except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
            raise self._unavailable("reconnect to the session", exc) from None
        # Its end is not known here (this clock is not the opener's): the first command pushes it back. The cap
        # is: E2B measures it from the sandbox's start, which the listing gives.
        lifetime = min(math.ceil((spec.idle or 0) + spec.limits.timeout) + SANDBOX_MARGIN, self._max_length)
        cap_at = time.monotonic() + mine[0].started_at.timestamp() + self._max_length - time.time()
        egress = (mine[0].metadata or {}).get(META_EGRESS) == "headers"
        return E2BBox(spec.id, sandbox, mine[0].sandbox_id, time.monotonic(), lifetime, cap_at=cap_at, egress=egress)

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

    async def _kill_orphans(self, box_id: str) -> None:
        """Kill every sandbox tagged with ``box_id``: what a create that failed may have started. Never raises."""
        try:
            # No retries of its own: the create's already took their time; one look, then E2B's timeout.
            query = SandboxQuery(metadata={META_BOX: box_id})
            paginator = AsyncSandbox.list(query=query, **{**self._opts(), "retries": 0})
            found: list[Any] = []
            while paginator.has_next and len(found) < 100:  # a handful at most: one per create the SDK sent
                found += await paginator.next_items()
        except Exception as exc:  # noqa: BLE001 - the create's own error is what the caller gets
            log.warning("e2b: could not look for sandboxes a failed create left (%s)", type(exc).__name__)
            return
        for orphan in found:
            log.warning("e2b: killing sandbox %s, left by a create that failed", orphan.sandbox_id)
            try:
                await AsyncSandbox.kill(orphan.sandbox_id, **self._opts())
            except Exception as exc:  # noqa: BLE001 - one failure must not spare the others; E2B's timeout remains
                log.warning("e2b: killing sandbox %s failed (%s)", orphan.sandbox_id, type(exc).__name__)

    async def _probe(self, box: E2BBox) -> BoxPython:
        """The template's python as pip picks wheels for it: one command in the box, once per template."""
        try:
            done = await box.sandbox.commands.run(
                f"python3 -E -s -c {shlex.quote(PROBE)}",
                envs={"PATH": BASE_PATH},
                timeout=PROBE_TIMEOUT,
                request_timeout=self._request_timeout,
            )
            found = BoxPython.from_probe(done.stdout)
        except CommandExitException as exc:
            raise SandboxError(
                INVALID_OPTION,
                f"packages: the E2B template's python3 did not answer ({' '.join(exc.stderr.split())[:300]}); "
                "packages need python3 in the template",
                ran=False,
            ) from None
        except ValueError as exc:
            raise SandboxError(INVALID_OPTION, f"packages: {exc}", ran=False) from None
        except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
            raise self._unavailable("ask the template's python3 for its version", exc) from None
        self._box_pythons[self._template] = found
        return found

    async def _install(self, box: E2BBox, packages: Sequence[str], wheels: Sequence[str]) -> None:
        """Install the uploaded wheels offline into the box's packages environment (one command)."""
        try:
            await box.sandbox.commands.run(
                install_line(wheels),
                envs={"PATH": BASE_PATH},
                timeout=INSTALL_TIMEOUT,
                request_timeout=self._request_timeout,
            )
        except CommandExitException as exc:
            where = "in the E2B box (offline, from the wheels fetched for it)"
            raise SandboxError(
                INVALID_OPTION, failure_message(packages, exc.stdout + exc.stderr, where), ran=False
            ) from None
        except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
            raise self._unavailable("install the packages", exc) from None
        box.python = ENV_PYTHON

    async def _install_kernel(self, box: E2BBox, pins: Sequence[str]) -> None:
        """Probe (once per template), fetch, upload and install the kernel's set, in the box's turn."""
        with await self._in_turn(box):
            self._check_cap(box)
            box_python = self._box_pythons.get(self._template) or await self._probe(box)
            problem = kernel_python_problem(box_python)
            if problem is not None:
                raise SandboxError(INVALID_OPTION, problem, ran=False)
            # Made from the app's installed distributions (the driver depends on the set): no index at run time.
            made = await asyncio.to_thread(kernel_find_links, pins)
            try:
                wheels = (await asyncio.to_thread(self._wheelhouse.ensure, box_python, pins, find_links=made)).paths
            except SandboxError as exc:
                if exc.code != INVALID_OPTION:
                    raise
                raise kernel_failure(exc, f"as wheels for {box_python.describe()}") from None
            entries = [{"path": f"{KERNEL_WHEELS}/{wheel.name}", "data": wheel.read_bytes()} for wheel in wheels]
            try:
                await box.sandbox.files.write_files(entries, use_octet_stream=False)  # type: ignore[arg-type]
            except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
                raise self._unavailable("upload the cell kernel's packages", exc, box) from None
            try:
                await box.sandbox.commands.run(
                    kernel_install_line([wheel.name for wheel in wheels]),
                    envs={"PATH": BASE_PATH},
                    user="root",
                    timeout=INSTALL_TIMEOUT,
                    request_timeout=self._request_timeout,
                )
            except CommandExitException as exc:
                where = "in the E2B box (offline, from the wheels fetched for it)"
                raise kernel_failure(exc.stdout + exc.stderr, where) from None
            except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
                raise self._unavailable("install the cell kernel's packages", exc, box) from None

    @staticmethod
    async def _in_turn(box: E2BBox) -> _Turn:
        """Wait for this call's turn to send to ``box`` (see ``E2BBox.in_order``); release it with ``with``."""
        await asyncio.sleep(0)  # the same number of steps for every hook: the order is the event loop's, fixed
        await box.in_order.acquire()
        return _Turn(box.in_order)

    async def _keep_alive(self, box: E2BBox, timeout: float) -> None:
        """Push the sandbox's end back only when the command could outlive it (a long session); else no request.

        A command longer than the sandbox's own lifetime (core's cell kernel: no deadline of its own) counts as
        one lifetime: it is kept alive by what the session sends it next (``write_file``, ``_send_input``). E2B
        never lets a
        sandbox outlive the plan's cap, measured from its start: ``POST /sandboxes/{id}/timeout`` silently sets
        the end to ``now + min(asked, cap - (now - start))`` and answers 204, and past the cap a 400 "Max
        instance length exceeded" (e2b-dev/infra ``packages/api/internal/orchestrator/keep_alive.go``
        ``KeepAliveFor``, ``getMaxAllowedTTL``). So the driver asks for no more than is left before the cap,
        and knows the end it gets; a box whose end is the cap needs no more asking.
        """
        timeout = min(timeout, box.lifetime - SANDBOX_MARGIN)
        now = time.monotonic()
        if box.expires >= box.cap_at or box.expires - now >= timeout + KEEP_ALIVE_SLACK:
            return
        wanted, left = math.ceil(timeout + box.lifetime), math.floor(box.cap_at - now)
        if left <= 0:
            raise self._cap_reached(box)
        try:
            await box.sandbox.set_timeout(min(wanted, left))
        except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
            raise self._unavailable("keep the sandbox alive", exc, box) from None
        box.expires = now + wanted if wanted < left else box.cap_at  # up to the cap: E2B ends it there

    async def _feed(self, box: E2BBox, pid: int, command: Command, ended: asyncio.Future[Any]) -> None:
        """Deliver a command's live stdin until EOF or its end: ``Command.stdin``, each chunk the app sends, EOF.

        One envd ``SendInput`` per chunk, in order, each in the box's turn; ``CloseStdin`` when the app closes
        the stream (envd 0.5.2+, e2b-dev/infra ``packages/envd/internal/services/process/input.go``). envd
        refuses input to a process started without stdin, or whose stdin is closed (``handler.go``
        ``WriteStdin``): the driver starts such a command with ``stdin: true``. A chunk the command can no longer
        take is dropped. It runs in the exec's own task, so a cancel (core closes the stream and cancels the
        kernel's exec at once) stops it before it sends anything more: no EOF races the killer.
        """
        assert command.input is not None
        chunks = aiter(command.input)
        pending = [command.stdin] if command.stdin else []
        getter: asyncio.Future[bytes | None] | None = None
        try:
            while True:
                for data in pending:
                    await self._send_input(box, pid, data)
                    _raise_if_cancelled()
                getter = asyncio.ensure_future(anext(chunks, None))
                done, _ = await asyncio.wait({getter, ended}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    return  # the command ended: what the app sends now is dropped
                chunk, getter = getter.result(), None
                if chunk is None:
                    break
                pending = [chunk]
            with await self._in_turn(box):
                _raise_if_cancelled()
                await box.sandbox.commands.close_stdin(pid, request_timeout=self._request_timeout)
        except Exception as exc:  # noqa: BLE001 - the command ended (or envd is gone): the rest is dropped
            log.warning("e2b: a command's input stopped (%s); what follows is dropped", type(exc).__name__)
        finally:
            if getter is not None and not getter.done():
                getter.cancel()

    async def _send_input(self, box: E2BBox, pid: int, data: bytes) -> None:
        # Input may start up to a command's timeout of work (a cell), then idle time: as a write does.
        with await self._in_turn(box):
            self._check_cap(box)
            await self._keep_alive(box, box.lifetime - SANDBOX_MARGIN)
            await box.sandbox.commands.send_stdin(pid, data, request_timeout=self._request_timeout)

    async def _kill_command(self, box: E2BBox, handle: Any, waiter: asyncio.Future[Any] | None) -> None:
        """Kill the command's whole session (one more command, as root), then let its stream end. Never raises.

        envd's SendSignal reaches one pid, so the code's children would live on;
        the killer stops and kills every process of the code's session. The
        command itself then archives out/ (a run) and ends.
        """
        if handle is None:
            return  # not started yet: nothing to signal; the sandbox's kill ends it
        try:
            await asyncio.wait_for(
                box.sandbox.commands.run(
                    killer_line(handle.pid), user="root", timeout=KILL_WAIT * 5, request_timeout=self._request_timeout
                ),
                KILL_WAIT * 5,
            )
        except Exception as exc:  # noqa: BLE001 - fall back to envd's one-pid SIGKILL; the sandbox kill follows a run
            log.warning("e2b: killing a command's processes failed: %s", type(exc).__name__)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(handle.kill(), KILL_WAIT)
        if waiter is not None:
            await asyncio.wait({waiter}, timeout=ARCHIVE_WAIT if box.archive_limit is not None else KILL_WAIT)
            if waiter.done() and not waiter.cancelled():
                waiter.exception()  # retrieved: its end no longer matters
            else:
                waiter.cancel()
        with contextlib.suppress(Exception):
            await handle.disconnect()

    async def _kill(self, box: E2BBox) -> None:
        if box.stopped:
            return
        box.stopped = True
        try:
            await box.sandbox.kill(request_timeout=self._request_timeout)
        except Exception as exc:  # noqa: BLE001 - E2B ends it at its timeout anyway; say so without the details
            log.warning(
                "e2b: killing sandbox %s failed (%s); E2B ends it at its timeout", box.sandbox_id, type(exc).__name__
            )

    def _cap_text(self) -> str:
        hours = self._max_length / 3600
        return f"{hours:g} h from its start, {self._plan}"

    def _cap_reached(self, box: E2BBox) -> BoxGone:
        """The session's sandbox reached the plan's cap: it is over (0008, not retryable), and why."""
        return BoxGone(
            f"E2B ends a sandbox {self._cap_text()}, and this session's sandbox {box.sandbox_id} reached it "
            "(for longer sessions: a plan with a longer maximum, sandbox.e2b.plan or sandbox.e2b.max_hours)"
        )

    def _check_cap(self, box: E2BBox) -> None:
        """Refuse a request to a sandbox past the plan's cap: E2B has ended it (keep_alive.go, the evictor)."""
        if time.monotonic() >= box.cap_at:
            raise self._cap_reached(box)

    def _unavailable(
        self, what: str, exc: BaseException, box: E2BBox | None = None, *, egress: Sequence[EgressRule] = ()
    ) -> SandboxError:
        """MAIN-SANDBOX-0006 with the provider's reason and what to check (``OUTAGE_REMEDY``), never the key.

        A session's request that failed once its sandbox reached the plan's cap is the cap's answer instead.
        """
        if box is not None and time.monotonic() >= box.cap_at - CAP_SLACK:
            return self._cap_reached(box)
        return SandboxError(DRIVER_UNAVAILABLE, f"E2B could not {what}: {self._reason(exc, egress)}; {OUTAGE_REMEDY}")

    def _reason(self, exc: BaseException, egress: Sequence[EgressRule] = ()) -> str:
        kinds = (
            (AuthenticationException, "authentication failed (check sandbox.e2b.key)"),
            (RateLimitException, "rate limited"),
            (ServiceBusyException, "the service is busy"),
            (NotFoundException, "the sandbox is gone"),
        )
        label = next((text for kind, text in kinds if isinstance(exc, kind)), None)
        if label is None and "sandbox was not found" in str(exc):
            # E2B's proxy answers 502 "The sandbox was not found" for a sandbox it lost (e2b-dev/infra
            # packages/shared/pkg/proxy/template/sandbox_not_found.go), not a 404.
            label = "the sandbox is gone"
        if label is None:
            label = "unreachable" if isinstance(exc, (OSError, httpx.TransportError)) else type(exc).__name__
        detail = " ".join(str(exc).split())
        # Neither the key nor an egress header's value, should an answer ever repeat one (E2B's never do): redacted
        # before the cut, so no cut leaves part of one.
        for value in (self._api_key, *(v for rule in egress for h in rule.headers for v in (h.value, h.secret_value))):
            if value:
                detail = detail.replace(value, "[redacted]")
        return f"{label}: {_cut_at_word(detail, 200)}" if detail else label


def _cut_at_word(text: str, limit: int) -> str:
    """``text``, or its first words within ``limit`` characters and an ellipsis: never a word cut in two."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    return (head.rsplit(" ", 1)[0] if " " in head else head) + " …"


def _raise_if_cancelled() -> None:
    """Raise the cancel this task was asked for, should a library below have swallowed it (an HTTP call's)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class _Turn:
    """A box's turn to send, held until released (``with`` or ``release``); releasing twice is harmless."""

    def __init__(self, lock: asyncio.Lock) -> None:
        self._lock: asyncio.Lock | None = lock

    def release(self) -> None:
        """Let the box's next request go."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def __enter__(self) -> _Turn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


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


# The raw wait status of the program, kept in a file (argv[1]) for the script; the waiter leads the session.
_WAITER = (
    "import os, sys\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.execvp(sys.argv[2], sys.argv[2:])\n"
    "status = os.waitpid(pid, 0)[1]\n"
    "open(sys.argv[1], 'w').write(str(status))\n"
    "sys.exit(os.waitstatus_to_exitcode(status) % 256)\n"
)
STATUS = "/tmp/mainsdk-status-{pid}"
# Go's names of the signals (syscall.Signal.String()), as envd's end event says them: "signal: <name>".
GO_SIGNALS = {
    "hangup": 1, "interrupt": 2, "quit": 3, "illegal instruction": 4, "trace/breakpoint trap": 5, "aborted": 6,
    "bus error": 7, "floating point exception": 8, "killed": 9, "user defined signal 1": 10,
    "segmentation fault": 11, "user defined signal 2": 12, "broken pipe": 13, "alarm clock": 14, "terminated": 15,
    "CPU time limit exceeded": 24, "file size limit exceeded": 25, "bad system call": 31,
}  # fmt: skip


def signal_of(error: str | None) -> int | None:
    """The signal number envd's end event names (``"signal: segmentation fault"``), or None."""
    if not error or not error.startswith("signal: "):
        return None
    name = error[len("signal: ") :].strip()
    if name.startswith("signal ") and name[len("signal ") :].isdigit():
        return int(name[len("signal ") :])
    return GO_SIGNALS.get(name)


# SIGSTOP every process of session $1 (so none can fork any more), a few passes, then SIGKILL them all. Plain
# /proc, no procps: the session is the 4th field after the name's closing ") " in /proc/PID/stat (proc(5)).
_KILL_SESSION = (
    'mainsdk_kill() { local s=$1 n f l p; [ -n "$s" ] || return 0; '
    "for n in STOP STOP STOP KILL KILL; do for f in /proc/[0-9]*/stat; do "
    'read -r l 2>/dev/null < "$f" || continue; set -- ${l##*") "}; [ "$4" = "$s" ] || continue; '
    'p=${f#/proc/}; kill -$n "${p%/stat}" 2>/dev/null; done; done; }'
)


def shell_line(
    command: Command,
    stdin_path: str | None = None,
    *,
    archive_limit: int | None = None,
    live: bool = False,
    trust: bool = False,
) -> str:
    """The script envd's ``bash -l -c`` runs: the program in a session of its own, then the clean-up.

    The program starts under ``setsid``, so it and everything it starts share a
    session no other process is in; when it ends (or at the in-VM backstop, a
    few seconds past its deadline, should the driver be gone) that whole
    session is killed, and with ``archive_limit`` (a run) the regular files of
    the out folder, sorted, up to that many bytes, are archived into one tar
    the driver reads in one request. The script exits with the program's status.

    ``env -i`` leaves the program only ``PATH``, ``HOME`` and the variables it
    was given; their values travel in the request's ``envs``, so the line
    names them but never holds a value. Each argument is quoted: no shell
    ever reads one. With ``trust`` (a box with egress headers) it also gets
    ``TRUST_VARIABLES``, each naming ``E2B_CA_BUNDLE``, before the given ones,
    so a variable the caller gives wins.
    """
    given = [f'{name}="${name}"' for name in sorted(command.env)]
    trusted = [f"{name}={E2B_CA_BUNDLE}" for name in TRUST_VARIABLES] if trust else []
    words = ["/usr/bin/setsid", '"${w8[@]}"', "/usr/bin/env", "-i", f"PATH={BASE_PATH}", f"HOME={HOME}"]
    words += [*trusted, *given]
    program = " ".join(words) + " " + shlex.join([command.program, *command.args])
    # Open the input, then remove it, so the work and out folders hold nothing of it. A live stdin is the script's
    # own (envd's pipe, started with stdin: true), handed on to the program.
    if live:
        stdin = "exec 3<&0"
    elif stdin_path is not None:
        stdin = f"exec 3<{stdin_path} && rm -f {stdin_path}"
    else:
        stdin = "exec 3</dev/null"
    backstop = math.ceil(command.timeout) + BACKSTOP_GRACE
    lines = [
        f"mkdir -p {WORK} {OUT} && cd {WORK} && {stdin} || exit 125",
        _KILL_SESSION,
        # bash's $? cannot tell a death by SIGSEGV from `exit 139`: a waiter keeps the raw wait status, when
        # the template has python3 (the base one does), and the script ends by that signal itself (below).
        f'sf={STATUS.format(pid="$$")}; rm -f -- "$sf"; w8=(); [ -x /usr/bin/python3 ] && '
        f'w8=(/usr/bin/python3 -E -s -c {shlex.quote(_WAITER)} "$sf")',
        # `&` without job control would give the program /dev/null as input: hence the explicit 0<&3.
        f"{program} 0<&3 3<&- &",
        "c=$!; exec 3<&-",
        # The backstop's stdio is /dev/null: envd ends the stream only when every holder of its pipes is gone.
        f"( sleep {backstop} & s=$!; trap 'kill $s; exit 0' TERM; wait $s; mainsdk_kill $c ) "
        "</dev/null >/dev/null 2>&1 &",
        "w=$!; wait $c; r=$?; kill $w 2>/dev/null; mainsdk_kill $c",
    ]
    if archive_limit is not None:
        lines.append(archive_script(archive_limit))
    # Killed by signal N: the script ends by N too, so envd's end event names it ("signal: segmentation
    # fault", handler.go); no core file. A status the waiter never wrote (killed at a limit) changes nothing.
    lines.append(
        'z=$(cat -- "$sf" 2>/dev/null); rm -f -- "$sf"; n=$(( ${z:-0} & 127 ))\n'
        'if [ "$n" -ne 0 ] && [ "$n" -ne 127 ]; then ulimit -c 0; trap - "$n"; kill -"$n" $$; fi'
    )
    lines.append("exit $r")
    return "\n".join(lines)


def archive_script(limit: int) -> str:
    """Shell that archives the out folder's regular files, by name, up to ``limit`` bytes, as ``ARCHIVE``.

    A file that would pass the limit is left out and a member ``truncated``
    says so; links, devices and folders are never archived (``find -type f``
    does not follow links, ``--hard-dereference`` stores hard links as files).
    Every name is under ``out/``; the driver still checks each one.
    """
    archive = ARCHIVE.format(pid="$$")
    return "\n".join(
        [
            f'a={archive}; rm -rf -- "$a.d" "$a"; mkdir -m 700 -- "$a.d" && : > "$a.d/list"',
            f"if [ -d {OUT} ] && [ ! -L {OUT} ] && cd {OUT}; then",
            "  find . -mindepth 1 -type f -printf '%s %P\\0' | LC_ALL=C sort -z -t ' ' -k 2 > \"$a.d/found\"; t=0",
            "  while IFS= read -r -d '' e; do z=${e%% *}; n=${e#* }",
            f'    if [ $((t + z)) -le {limit} ]; then t=$((t + z)); printf \'out/%s\\0\' "$n" >> "$a.d/list"',
            '    else : > "$a.d/truncated"; fi',
            '  done < "$a.d/found"',
            "fi",
            'set --; [ -e "$a.d/truncated" ] && set -- -C "$a.d" truncated',
            f'tar -cf "$a.d/tar" -C {HOME} --null --no-recursion --hard-dereference -T "$a.d/list" "$@" 2>/dev/null',
            'mv -fT -- "$a.d/tar" "$a"',
        ]
    )


def killer_line(pid: int) -> str:
    """The command that kills what command ``pid`` started: every session led by a child of ``pid``.

    ``pid`` is the script of ``shell_line`` (the start event's pid); its one
    child that leads a session is the program's. Killing it lets the script go
    on to its clean-up and end.
    """
    return (
        f"{_KILL_SESSION}\n"
        'for f in /proc/[0-9]*/stat; do read -r l 2>/dev/null < "$f" || continue; p=${f#/proc/}; p=${p%/stat}; '
        f'set -- ${{l##*") "}}; [ "$2" = {int(pid)} ] && [ "$4" = "$p" ] && mainsdk_kill "$p"; done; true'
    )


def extract_out_archive(data: bytes, max_bytes: int, *, cut: bool = False) -> Collected:
    """The out files in an archive ``archive_script`` made, checked as untrusted input.

    Only regular members under ``out/`` with a plain relative name are taken
    (no ``..``, no absolute path, no empty part, no link), each once, at most
    ``max_bytes`` in all. ``cut``: the archive was read only in part. A broken
    archive keeps what came before the break and says it was truncated.
    """
    files: list[OutFile] = []
    skipped: list[tuple[str, str]] = []
    truncated = cut
    total = 0
    seen: set[str] = set()
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as archive:
            for member in archive:
                if member.name == "truncated" and member.isreg():
                    truncated = True
                    continue
                name = member.name[len("out/") :] if member.name.startswith("out/") else ""
                parts = name.split("/")
                if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in name:
                    skipped.append((member.name, "not a plain name under out/"))
                    continue
                if not member.isreg():
                    skipped.append((name, "not a regular file"))
                    continue
                if name in seen:
                    skipped.append((name, "archived twice"))
                    continue
                if total + member.size > max_bytes:
                    truncated = True
                    skipped.append((name, "past limits.files"))
                    continue
                stream = archive.extractfile(member)
                content = stream.read() if stream is not None else b""
                if len(content) != member.size:
                    truncated = True
                    break
                seen.add(name)
                total += len(content)
                files.append(OutFile(name, content))
    except (tarfile.TarError, EOFError, OSError):
        truncated = True  # what came before the break stands
    return Collected(tuple(files), truncated, tuple(skipped))


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
