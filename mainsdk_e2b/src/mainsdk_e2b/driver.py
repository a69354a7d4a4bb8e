"""The ``e2b`` driver: each box is one E2B sandbox (a Firecracker microVM), driven through the official SDK.

A run is: create the sandbox with its egress policy, upload the work files in
one multipart request, start the command (a Connect server stream), list and
read the out folder, kill the sandbox. The deadline is kept here, on the
client side, and the command is killed at it: the SDK's own ``timeout`` is not
always enforced (E2B issue 500).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import posixpath
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

import attrs
import httpx
from e2b import AsyncSandbox
from e2b.exceptions import (
    AuthenticationException,
    FileNotFoundException,
    NotFoundException,
    RateLimitException,
    ServiceBusyException,
)
from e2b.sandbox.commands.command_handle import CommandExitException
from e2b.sandbox.filesystem.filesystem import FileType
from mainsdk.config import AppConfig
from mainsdk.driver import (
    LANGUAGES,
    BoxSpec,
    Capabilities,
    Collected,
    Command,
    ExecOutcome,
    OutFile,
    OutputSink,
)
from mainsdk.errors import DRIVER_UNAVAILABLE, INVALID_OPTION, NO_SESSION, SandboxError
from mainsdk.hookspecs import hookimpl
from mainsdk.secrets import SecretResolver

if TYPE_CHECKING:
    from e2b.sandbox.sandbox_api import SandboxNetworkOpts

DRIVER_ID = "e2b"
log = logging.getLogger("mainsdk.e2b")

# The seed's two folders, side by side so ``../out`` from the work folder is the out folder, as on the local driver.
HOME = "/home/user"
WORK = f"{HOME}/work"
OUT = f"{HOME}/out"
# The only variables a command gets besides the ones it is given: a login shell's would leak the template's.
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# E2B's published prices (FAQ): per vCPU-second and per GiB-second of allocated memory.
PRICE_PER_VCPU_SECOND = Decimal("0.000014")
PRICE_PER_GIB_SECOND = Decimal("0.0000045")
DEFAULT_VCPUS = 2
DEFAULT_MEMORY_MIB = 512

# A sandbox outlives its deadline by this much at most if the driver itself dies: E2B kills it then.
SANDBOX_MARGIN = 60
# How long the driver waits for the stream's end once it killed a command; the sandbox goes anyway.
KILL_WAIT = 2.0
# A command gets a refresh of the sandbox's lifetime only when less than its timeout and this is left.
KEEP_ALIVE_SLACK = 10
REQUEST_TIMEOUT = 30.0
LIST_DEPTH = 32
_SECRET_REF = re.compile(r"^secret:([A-Za-z_][A-Za-z0-9_]*)$")


def e2b_network_policy(hosts: Sequence[str]) -> dict[str, list[str]]:
    """E2B's egress policy for ``hosts``: those allowed out, everything else denied; no hosts is nothing out.

    ``allow_out`` takes names and ``*.wildcards`` (filtered by Host on port 80
    and SNI on 443) and wins over ``deny_out``, which denies all IPv4 here.
    """
    return {"allow_out": list(hosts), "deny_out": ["0.0.0.0/0"]}


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
    stdin_files: int = 0
    stopped: bool = False


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
    ) -> None:
        self._api_key = api_key or None
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
            sessions=True,
            production=True,
            price_per_second=self._price,
            outage_remedy="check E2B's status and the API key (sandbox.e2b.key, default secret:E2B_API_KEY)",
        )

    @hookimpl
    def mainsdk_network_policy(self, hosts: Sequence[str]) -> dict[str, list[str]]:
        """E2B's egress policy for ``hosts`` (see ``e2b_network_policy``)."""
        return e2b_network_policy(hosts)

    @hookimpl
    async def mainsdk_driver_start(self, spec: BoxSpec) -> E2BBox:
        """Create the sandbox with the egress policy and upload the work files in one request."""
        lifetime = math.ceil((spec.idle or 0) + spec.limits.timeout) + SANDBOX_MARGIN
        policy = spec.network_policy if spec.network_policy is not None else e2b_network_policy(spec.hosts)
        opts: dict[str, Any] = {"request_timeout": self._request_timeout, "api_key": self._key()}
        if self._api_url:
            opts["api_url"] = self._api_url
        if self._sandbox_url:
            opts["sandbox_url"] = self._sandbox_url
        try:
            sandbox = await AsyncSandbox.create(
                template=self._template, timeout=lifetime, network=cast("SandboxNetworkOpts", policy), **opts
            )
        except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
            raise self._unavailable("create a sandbox", exc) from None
        box = E2BBox(spec.id, sandbox, sandbox.sandbox_id, time.monotonic() + lifetime, lifetime)
        if spec.files:
            entries = [{"path": f"{WORK}/{name}", "data": bytes(data)} for name, data in sorted(spec.files.items())]
            try:
                # multipart: every file in one request, whatever envd version answers
                await sandbox.files.write_files(entries, use_octet_stream=False)  # type: ignore[arg-type]
            except BaseException as exc:
                await self._kill(box)
                if isinstance(exc, Exception):
                    raise self._unavailable("upload the work files", exc) from None
                raise
        return box

    @hookimpl
    async def mainsdk_driver_exec(self, box: E2BBox, command: Command, output: OutputSink) -> ExecOutcome:
        """Run ``command`` under its deadline, streaming its output; kill it at the deadline or on cancel."""
        sandbox = box.sandbox
        await self._keep_alive(box, command.timeout)
        stdin_path = None
        if command.stdin is not None:
            box.stdin_files += 1
            stdin_path = f"/tmp/mainsdk-stdin-{box.stdin_files}"  # a counter, not a random name: same bytes each run
            try:
                await sandbox.files.write_files([{"path": stdin_path, "data": command.stdin}], use_octet_stream=False)
            except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
                raise self._unavailable("upload the command's input", exc) from None
        line = shell_line(command, stdin_path)
        started = time.monotonic()
        handle: Any = None
        waiter: asyncio.Future[Any] | None = None
        exit_code: int | None = None
        try:
            async with asyncio.timeout(command.timeout) as deadline:
                handle = await sandbox.commands.run(
                    line,
                    background=True,
                    envs=dict(command.env),
                    on_stdout=lambda text: output.stdout(text.encode()),
                    on_stderr=lambda text: output.stderr(text.encode()),
                    # The SDK's own bound is only a backstop behind this deadline.
                    timeout=command.timeout + SANDBOX_MARGIN,
                    request_timeout=self._request_timeout,
                )
                # Shielded: a cancel must reach this task, not the SDK's stream reader, which the kill ends.
                waiter = asyncio.ensure_future(handle.wait())
                try:
                    exit_code = (await asyncio.shield(waiter)).exit_code
                except CommandExitException as exited:
                    exit_code = exited.exit_code
        except TimeoutError:
            if not deadline.expired():
                raise self._unavailable("run the command", TimeoutError("the request timed out")) from None
            await self._kill_command(handle, waiter)
            return ExecOutcome(exit_code=None, stop="timeout", duration=time.monotonic() - started)
        except asyncio.CancelledError:
            # Core cancels at the output limit and at its own deadline: the command must not outlive that.
            await self._kill_command(handle, waiter)
            raise
        except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
            raise self._unavailable("run the command", exc) from None
        return ExecOutcome(exit_code=exit_code, duration=time.monotonic() - started)

    @hookimpl
    async def mainsdk_driver_write_file(self, box: E2BBox, path: str, data: bytes) -> None:
        """Write one file into the work folder (sessions)."""
        try:
            await box.sandbox.files.write_files([{"path": f"{WORK}/{path}", "data": data}], use_octet_stream=False)
        except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
            raise self._unavailable("write a file", exc) from None

    @hookimpl
    async def mainsdk_driver_read_file(self, box: E2BBox, path: str) -> bytes:
        """Read a file of the work folder, or ``../out/...`` of the out folder (sessions)."""
        full = posixpath.normpath(f"{WORK}/{path}")
        try:
            return bytes(await box.sandbox.files.read(full, format="bytes"))
        except FileNotFoundException:
            raise SandboxError(
                NO_SESSION, f"no file {path!r} in the session's box", status=404, retryable=False
            ) from None
        except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
            raise self._unavailable("read a file", exc) from None

    @hookimpl
    async def mainsdk_driver_collect(self, box: E2BBox, max_bytes: int) -> Collected:
        """List the out folder once and read its regular files, at most ``max_bytes`` in all; links are skipped."""
        try:
            entries = await box.sandbox.files.list(OUT, depth=LIST_DEPTH)
        except FileNotFoundException:
            return Collected()  # the command never got to make it
        except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
            raise self._unavailable("list the out folder", exc) from None
        files: list[OutFile] = []
        skipped: list[tuple[str, str]] = []
        truncated = False
        total = 0
        for entry in sorted(entries, key=lambda e: e.path):
            name = posixpath.relpath(entry.path, OUT)
            if entry.type == FileType.SYMLINK or entry.symlink_target is not None:
                skipped.append((name, "a link, not followed"))
                continue
            if entry.type != FileType.FILE:
                continue
            if total + entry.size > max_bytes:
                truncated = True
                skipped.append((name, "past limits.files"))
                continue
            try:
                data = bytes(await box.sandbox.files.read(entry.path, format="bytes"))
            except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
                raise self._unavailable("read an out file", exc) from None
            if total + len(data) > max_bytes:  # it grew since it was listed
                truncated = True
                skipped.append((name, "past limits.files"))
                continue
            total += len(data)
            files.append(OutFile(name, data))
        return Collected(tuple(files), truncated, tuple(skipped))

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

    async def _keep_alive(self, box: E2BBox, timeout: float) -> None:
        """Push the sandbox's end back only when the command could outlive it (a long session); else no request."""
        if box.expires - time.monotonic() >= timeout + KEEP_ALIVE_SLACK:
            return
        lifetime = math.ceil(timeout + box.lifetime)
        try:
            await box.sandbox.set_timeout(lifetime)
        except Exception as exc:  # noqa: BLE001 - any SDK failure is the provider's: 0006
            raise self._unavailable("keep the sandbox alive", exc) from None
        box.expires = time.monotonic() + lifetime

    async def _kill_command(self, handle: Any, waiter: asyncio.Future[Any] | None) -> None:
        """SIGKILL the command (one SendSignal), then give its stream a moment to end. Never raises."""
        if handle is None:
            return  # not started yet: nothing to signal; the sandbox's kill ends it
        try:
            await asyncio.wait_for(handle.kill(), KILL_WAIT)
        except Exception as exc:  # noqa: BLE001 - the command is being stopped; the sandbox kill follows anyway
            log.warning("e2b: killing a command failed: %s", type(exc).__name__)
        if waiter is not None:
            await asyncio.wait({waiter}, timeout=KILL_WAIT)
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

    def _unavailable(self, what: str, exc: BaseException) -> SandboxError:
        """MAIN-SANDBOX-0006 with the provider's reason, and never the key."""
        return SandboxError(DRIVER_UNAVAILABLE, f"E2B could not {what}: {self._reason(exc)}")

    def _reason(self, exc: BaseException) -> str:
        kinds = (
            (AuthenticationException, "authentication failed (check sandbox.e2b.key)"),
            (RateLimitException, "rate limited"),
            (ServiceBusyException, "the service is busy"),
            (NotFoundException, "the sandbox is gone"),
        )
        label = next((text for kind, text in kinds if isinstance(exc, kind)), None)
        if label is None:
            label = "unreachable" if isinstance(exc, (OSError, httpx.TransportError)) else type(exc).__name__
        detail = " ".join(str(exc).split())[:200]
        if self._api_key:
            detail = detail.replace(self._api_key, "[redacted]")
        return f"{label}: {detail}" if detail else label


def shell_line(command: Command, stdin_path: str | None = None) -> str:
    """The one line envd's ``bash -l -c`` runs: make the folders, enter the work folder, run the program.

    ``env -i`` leaves the command only ``PATH``, ``HOME`` and the variables it
    was given; their values travel in the request's ``envs``, so the line
    names them but never holds a value. Each argument is quoted: no shell
    ever reads one.
    """
    given = [f'{name}="${name}"' for name in sorted(command.env)]
    line = f"mkdir -p {WORK} {OUT} && cd {WORK} && "
    if stdin_path is not None:
        # Open the input, then remove it, so the work and out folders hold nothing of it.
        line += f"exec 0<{stdin_path} && rm -f {stdin_path} && "
    else:
        line += "exec 0</dev/null && "
    words = ["exec", "/usr/bin/env", "-i", f"PATH={BASE_PATH}", f"HOME={HOME}", *given]
    return line + " ".join(words) + " " + shlex.join([command.program, *command.args])


def e2b_sandbox_driver(
    *,
    api_key: str | None,
    api_url: str | None = None,
    sandbox_url: str | None = None,
    template: str | None = None,
    price: Decimal | None = None,
    vcpus: int = DEFAULT_VCPUS,
    memory_mib: int = DEFAULT_MEMORY_MIB,
) -> E2BDriver:
    """An ``e2b`` driver with an explicit key and endpoints (tests, or an app that resolves the key itself).

    ``api_url`` / ``sandbox_url`` point the SDK elsewhere (a replay server on
    loopback); ``price`` overrides the estimate from ``vcpus`` and ``memory_mib``.
    """
    return E2BDriver(
        api_key=api_key,
        api_url=api_url,
        sandbox_url=sandbox_url,
        template=template,
        price=price,
        vcpus=vcpus,
        memory_mib=memory_mib,
    )


def resolve_key(
    reference: str, environ: Mapping[str, str] | None = None, *, secret: SecretResolver | None = None
) -> tuple[str | None, str]:
    """The key ``sandbox.e2b.key`` names, and what to say when it has none.

    ``secret:NAME`` goes through the app's secret resolver (``SandboxDeps.secret``)
    when core passes one, else the environment; anything else is the key itself.
    """
    match = _SECRET_REF.match(reference)
    if match is None:
        return reference, "sandbox.e2b.key is empty"
    name = match.group(1)
    lookup = secret if secret is not None else (os.environ if environ is None else environ).get
    value = lookup(name)
    return value or None, f"sandbox.e2b.key names the secret {name}, which has no value; set {name}"


def driver_from_config(config: AppConfig, *, secret: SecretResolver | None = None) -> E2BDriver:
    """The driver ``sandbox.driver: e2b`` loads: key, template and price from ``sandbox.e2b`` and ``sandbox.price``.

    The SDK's own ``E2B_API_URL`` / ``E2B_SANDBOX_URL`` still apply, for
    pointing it at a recorder or a replay server.
    """
    key, missing = resolve_key(config.sandbox.e2b.key, secret=secret)
    return E2BDriver(
        api_key=key,
        template=config.sandbox.e2b.template,
        price=config.sandbox.price,
        missing_key=missing,
    )
