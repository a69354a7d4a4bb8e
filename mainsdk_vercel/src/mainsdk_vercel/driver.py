"""The ``vercel-sandbox`` driver: each box is a Vercel Sandbox microVM, driven through REST API v1 with httpx.

A box's sandbox is created on first use, not at ``start``, because only the
first command says which interpreter it needs and the runtime (image) is
fixed at create: ``python3.13`` for Python, ``node24`` for Node and Bash.
See README.md for how a run maps to API calls.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import logging
import os
import posixpath
import tarfile
import time
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import attrs
import httpx
from mainsdk.config import AppConfig
from mainsdk.driver import BoxSpec, Capabilities, Collected, Command, ExecOutcome, OutFile, OutputSink
from mainsdk.errors import DRIVER_UNAVAILABLE, INVALID_OPTION, NO_SESSION, SandboxError
from mainsdk.hookspecs import hookimpl

from mainsdk_vercel._api import DEFAULT_BASE_URL, GONE, NotFound, VercelApi, VercelError

log = logging.getLogger("mainsdk.vercel")
DRIVER_ID = "vercel-sandbox"
ROOT = "/vercel/sandbox"  # the runtime's home and default cwd, writable by the sandbox's user
WORK = f"{ROOT}/work"
OUT = f"{ROOT}/out"
PRIVATE = f"{ROOT}/.mainsdk"  # the driver's own files (stdin of long code), outside work and out
VCPUS = 2  # Vercel's default size; memory is 2 GB per vCPU
# Vercel's published prices (providers.md): active CPU $0.128 per vCPU-hour, memory $0.0212 per GB-hour.
CPU_PER_HOUR = Decimal("0.128")
MEMORY_GB_PER_HOUR = Decimal("0.0212")
# Room past a command's own limit before Vercel's own timeout stops the VM: files in, collect, stop.
MARGIN = 60.0
LOG_RECONNECTS = 3
# The runtime each language needs: node24 has no Python, python3.13 no Node; both have Bash.
RUNTIMES = {"python3": "python3.13", "python": "python3.13", "node": "node24"}
DEFAULT_RUNTIME = "python3.13"
PROGRAMS = {"python": "python3", "python3": "python3", "node": "node", "bash": "bash"}


def vercel_network_policy(hosts: Sequence[str]) -> dict[str, Any]:
    """The ``networkPolicy`` for hosts: ``deny-all`` with none, else ``custom`` allowing exactly those domains.

    Vercel takes ``*.example.com`` wildcards in ``allowedDomains`` as they are.
    """
    if not hosts:
        return {"mode": "deny-all"}
    return {"mode": "custom", "allowedDomains": list(hosts)}


def default_price(vcpus: int = VCPUS) -> Decimal:
    """Dollars per second of a box of ``vcpus`` with every CPU busy: the worst case, for max-cost checks."""
    per_hour = vcpus * CPU_PER_HOUR + 2 * vcpus * MEMORY_GB_PER_HOUR
    return (per_hour / 3600).quantize(Decimal("1e-10"))


@attrs.define(eq=False)
class VercelBox:
    """A box: its spec, and the sandbox behind it once created (``sandbox_id``)."""

    id: str
    spec: BoxSpec
    session: bool
    runtime: str | None = None
    sandbox_id: str | None = None
    expires: float = 0.0  # monotonic time Vercel's own timeout stops the sandbox
    gone: bool = False  # stopped (by us, or under us): nothing more to ask of it
    commands: int = 0  # commands sent so far: names per command, unique in the VM and the same on every run
    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)


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
    ) -> None:
        self._api = VercelApi(token=token, team=team, base_url=base_url, client=client)
        self._project = project
        self._runtime = runtime
        self._vcpus = vcpus
        self._price = price if price is not None else default_price(vcpus)

    def __repr__(self) -> str:
        return f"VercelDriver(project={self._project!r})"  # never the token

    # --- hooks ------------------------------------------------------------------------------------------------------

    @hookimpl
    def mainsdk_driver_capabilities(self) -> Capabilities:
        return Capabilities(
            isolation="microvm",
            network=True,
            wildcard_hosts=True,
            memory_limit=False,  # a command gets the whole VM: no per-command memory cap to enforce
            sessions=True,
            production=True,
            price_per_second=self._price,
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
        # No request yet: the first command picks the runtime (see the module docstring).
        return VercelBox(spec.id, spec, session=spec.idle is not None)

    @hookimpl
    async def mainsdk_driver_exec(self, box: VercelBox, command: Command, output: OutputSink) -> ExecOutcome:
        await self._ensure(box, command.program)
        assert box.sandbox_id is not None
        program = PROGRAMS.get(command.program, command.program)
        args = list(command.args)
        env = dict(command.env)
        box.commands += 1
        if command.stdin is not None:
            # v1 commands take no stdin: the bytes go in a file the command reads, through a fixed script.
            path = f"{PRIVATE}/stdin-{box.commands}"
            await self._write(box, {path.removeprefix(ROOT + "/"): command.stdin})
            program, args = "bash", ["-c", 'exec "$@" <"$0"', path, program, *args]
        marker = ""
        if box.session:
            # Marks the command's whole tree, so a kill can reach what it left in the background.
            marker = f"command-{box.commands}"
            env["MAINSDK_COMMAND"] = marker
        loop = asyncio.get_running_loop()
        started = loop.time()
        cmd_id: str | None = None
        try:
            async with asyncio.timeout(command.timeout):
                cmd_id = await self._start_command(box, program, args, env)
                await self._stream_logs(box, cmd_id, output)
                exit_code = await self._wait(box, cmd_id)
        except TimeoutError:
            await self._kill(box, cmd_id, marker)
            return ExecOutcome(exit_code=None, stop="timeout", duration=loop.time() - started)
        except asyncio.CancelledError:
            await asyncio.shield(self._kill(box, cmd_id, marker))
            raise
        except VercelError as exc:
            if exc.vercel_status in GONE:
                box.gone = True  # stopped under us: nothing runs there any more
            elif cmd_id is not None:
                await self._kill(box, cmd_id, marker)
            raise
        return ExecOutcome(exit_code=exit_code, duration=loop.time() - started)

    @hookimpl
    async def mainsdk_driver_write_file(self, box: VercelBox, path: str, data: bytes) -> None:
        await self._ensure(box, None)
        await self._write(box, {f"work/{path}": data})

    @hookimpl
    async def mainsdk_driver_read_file(self, box: VercelBox, path: str) -> bytes:
        await self._ensure(box, None)
        return await self._read(box, posixpath.normpath(posixpath.join(WORK, path)), path)

    @hookimpl
    async def mainsdk_driver_collect(self, box: VercelBox, max_bytes: int) -> Collected:
        if box.sandbox_id is None or box.gone:
            return Collected()  # never created, or stopped to kill a command it could not address
        listing = await self._list_out(box)
        files: list[OutFile] = []
        skipped: list[tuple[str, str]] = []
        total = 0
        truncated = False
        for kind, size, name in listing:
            if kind != "f":
                if kind != "d":
                    skipped.append((name, "not a regular file"))
                continue
            if total + size > max_bytes:
                truncated = True
                skipped.append((name, "past limits.files"))
                continue
            total += size
            files.append(OutFile(name, await self._read(box, f"{OUT}/{name}", f"../out/{name}")))
        return Collected(files=tuple(files), truncated=truncated, skipped=tuple(skipped))

    @hookimpl
    async def mainsdk_driver_stop(self, box: VercelBox) -> None:
        if box.sandbox_id is None or box.gone:
            return
        box.gone = True
        try:
            await self._api.request("POST", f"/v1/sandboxes/{box.sandbox_id}/stop", "stop", idempotent=True)
        except VercelError as exc:
            if exc.vercel_status not in GONE:  # already stopped is stopped
                raise

    @hookimpl
    def mainsdk_driver_shutdown(self) -> None:
        # Clients are per event loop and closed with it; nothing process-wide is held.
        return None

    # --- the box's sandbox ------------------------------------------------------------------------------------------

    def _lifetime(self, box: VercelBox, command_timeout: float) -> float:
        """Seconds the sandbox must live from now: this command, the session's idle time, and room to collect."""
        return command_timeout + (box.spec.idle or 0.0) + MARGIN

    async def _ensure(self, box: VercelBox, program: str | None) -> None:
        """Create the box's sandbox on first use (with its files), or extend a session's timeout when short."""
        async with box.lock:
            if box.gone:
                raise SandboxError(DRIVER_UNAVAILABLE, f"the Vercel sandbox of box {box.id} has stopped")
            needed = self._lifetime(box, box.spec.limits.timeout)
            if box.sandbox_id is not None:
                # A session outliving its first lease: extend by a whole lease, in a fixed amount, so the
                # requests (and cassettes) do not depend on timing, and extensions stay rare.
                if box.expires - time.monotonic() < needed:
                    await self._api.json(
                        "POST",
                        f"/v1/sandboxes/{box.sandbox_id}/extend-timeout",
                        "extend-timeout",
                        json_body={"duration": int(needed * 1000)},
                        idempotent=False,
                    )
                    box.expires += needed
                return
            runtime = self._runtime or RUNTIMES.get(PROGRAMS.get(program or "", program or ""), DEFAULT_RUNTIME)
            body: dict[str, Any] = {
                "projectId": self._project,
                "runtime": runtime,
                "resources": {"vcpus": self._vcpus},
                "timeout": int(needed * (2 if box.session else 1) * 1000),
                "networkPolicy": box.spec.network_policy or vercel_network_policy(box.spec.hosts),
            }
            answer = await self._api.json("POST", "/v1/sandboxes", "create", json_body=body, idempotent=False)
            try:
                box.sandbox_id = str(answer["sandbox"]["id"])
            except (KeyError, TypeError):
                raise self._api.error("create", None, cause="the answer names no sandbox id") from None
            box.runtime = runtime
            box.expires = time.monotonic() + needed * (2 if box.session else 1)
            # The work and out folders, and the files, in one request.
            files = {f"work/{name}": data for name, data in box.spec.files.items()}
            await self._write(box, files, folders=("work", "out"))

    async def _write(self, box: VercelBox, files: Mapping[str, bytes], folders: Sequence[str] = ()) -> None:
        """Write files (paths relative to ``ROOT``) as one gzipped tar, extracted by Vercel at ``ROOT``."""
        await self._api.request(
            "POST",
            f"/v1/sandboxes/{box.sandbox_id}/fs/write",
            "fs/write",
            content=_targz(files, folders),
            headers={"content-type": "application/gzip", "x-cwd": ROOT},
            idempotent=True,  # the same bytes to the same paths
        )

    async def _read(self, box: VercelBox, path: str, shown: str) -> bytes:
        try:
            answer = await self._api.request(
                "POST",
                f"/v1/sandboxes/{box.sandbox_id}/fs/read",
                "fs/read",
                json_body={"path": path},
                idempotent=True,
            )
        except NotFound:
            raise SandboxError(NO_SESSION, f"no file {shown!r} in the box", status=404, retryable=False) from None
        return answer.content

    # --- commands ---------------------------------------------------------------------------------------------------

    async def _start_command(self, box: VercelBox, program: str, args: list[str], env: dict[str, str]) -> str:
        answer = await self._api.json(
            "POST",
            f"/v1/sandboxes/{box.sandbox_id}/cmd",
            "cmd",
            json_body={"command": program, "args": args, "cwd": WORK, "env": env, "sudo": False},
            idempotent=False,  # never send a command twice
        )
        try:
            return str(answer["command"]["id"])
        except (KeyError, TypeError):
            raise self._api.error("cmd", None, cause="the answer names no command id") from None

    async def _stream_logs(self, box: VercelBox, cmd_id: str, output: OutputSink) -> None:
        """Send the command's output to ``output`` until it ends; reconnect when the stream breaks.

        Vercel replays a command's logs from its start on every connection, so
        a reconnect skips as many bytes of each stream as were already delivered.
        """
        delivered = {"stdout": 0, "stderr": 0}
        sinks = {"stdout": output.stdout, "stderr": output.stderr}
        path = f"/v1/sandboxes/{box.sandbox_id}/cmd/{cmd_id}/logs"
        for attempt in range(LOG_RECONNECTS + 1):
            seen = {"stdout": 0, "stderr": 0}
            try:
                async with self._api.stream("GET", path, "logs") as answer:
                    async for line in answer.aiter_lines():
                        if not line.strip():
                            continue
                        entry = json.loads(line)
                        stream = entry.get("stream")
                        if stream == "error":
                            detail = entry.get("data") or {}
                            raise self._api.error("logs", None, cause=f"{detail.get('code')}: {detail.get('message')}")
                        if stream not in sinks:
                            continue
                        data = str(entry.get("data", "")).encode("utf-8")
                        start = seen[stream]
                        seen[stream] += len(data)
                        fresh = data[max(delivered[stream] - start, 0) :]
                        if fresh:
                            delivered[stream] += len(fresh)
                            sinks[stream](fresh)
                return
            except (httpx.TransportError, ValueError) as exc:
                if attempt == LOG_RECONNECTS:
                    raise self._api.error("logs", None, cause=f"the stream broke: {type(exc).__name__}") from None
            except SandboxError as exc:
                # A network failure to reach the stream is retried like a break; an answer from Vercel is not.
                if "network:" not in exc.message or attempt == LOG_RECONNECTS:
                    raise

    async def _wait(self, box: VercelBox, cmd_id: str) -> int:
        answer = await self._api.json(
            "GET",
            f"/v1/sandboxes/{box.sandbox_id}/cmd/{cmd_id}",
            "cmd wait",
            query={"wait": "true"},
            idempotent=True,
        )
        try:
            return int(answer["command"]["exitCode"])
        except (KeyError, TypeError, ValueError):
            raise self._api.error("cmd wait", None, cause="the answer has no exitCode") from None

    async def _kill(self, box: VercelBox, cmd_id: str | None, marker: str) -> None:
        """Kill a command: SIGKILL by id, and in a session whatever its tree left behind; else stop the sandbox."""
        if box.gone or box.sandbox_id is None:
            return
        try:
            if cmd_id is None:
                # The command request got no answer: it may run, and has no id to kill by. Only stopping reaches it.
                await self.mainsdk_driver_stop(box)
                return
            await self._api.request(
                "POST",
                f"/v1/sandboxes/{box.sandbox_id}/cmd/{cmd_id}/kill",
                "kill",
                json_body={"signal": 9},
                idempotent=True,
            )
            if marker:
                await self._kill_tree(box, marker)
        except SandboxError:
            # The command could not be killed: stop the sandbox rather than leave it running.
            try:
                await self.mainsdk_driver_stop(box)
            except SandboxError as exc:
                log.warning("could not stop Vercel sandbox %s: %s", box.sandbox_id, exc.message)

    async def _kill_tree(self, box: VercelBox, marker: str) -> None:
        """Kill every process carrying the command's marker in its environment (its background children too)."""
        script = (
            'for p in /proc/[0-9]*; do grep -qz "^MAINSDK_COMMAND=$0\\$" "$p/environ" 2>/dev/null '
            '&& kill -9 "${p#/proc/}" 2>/dev/null; done; true'
        )
        cmd_id = await self._start_command(box, "bash", ["-c", script, marker], {})
        await self._wait(box, cmd_id)

    async def _list_out(self, box: VercelBox) -> list[tuple[str, int, str]]:
        """The out folder as (type, size, name) by ``find``, which does not follow links: v1 has no list endpoint."""
        cmd_id = await self._start_command(box, "find", [OUT, "-mindepth", "1", "-printf", "%y %s %P\\0"], {})
        chunks: list[bytes] = []

        class _Collect:
            def stdout(self, data: bytes) -> None:
                chunks.append(data)

            def stderr(self, data: bytes) -> None:
                pass

            def host_refused(self, host: str) -> None:
                pass

        await self._stream_logs(box, cmd_id, _Collect())
        entries = []
        for record in b"".join(chunks).split(b"\0"):
            if not record:
                continue
            kind, size, name = record.decode("utf-8", "replace").split(" ", 2)
            entries.append((kind, int(size), name))
        return sorted(entries, key=lambda e: e[2])


def _targz(files: Mapping[str, bytes], folders: Sequence[str]) -> bytes:
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
    return gzip.compress(raw.getvalue(), mtime=0)


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
) -> VercelDriver:
    """The ``vercel-sandbox`` driver with explicit settings (for tests: a loopback ``base_url`` or ``client``)."""
    return VercelDriver(
        token=token, project=project, team=team, runtime=runtime, price=price, base_url=base_url, client=client
    )


def driver_from_config(config: AppConfig, **overrides: Any) -> VercelDriver:
    """The driver ``main.yaml`` describes (``sandbox.vercel``, ``sandbox.price``); the ``mainsdk.drivers`` entry point.

    ``MAINSDK_VERCEL_BASE_URL`` points the driver at another API host (the
    conformance recorder's proxy); ``overrides`` go to ``vercel_sandbox_driver``.
    """
    vercel = config.sandbox.vercel
    settings: dict[str, Any] = {
        "project": vercel.project,
        "team": vercel.team,
        "runtime": vercel.runtime,
        "price": config.sandbox.price,
        "base_url": os.environ.get("MAINSDK_VERCEL_BASE_URL") or DEFAULT_BASE_URL,
    }
    settings.update(overrides)
    if "token" not in settings:
        settings["token"] = resolve_token(vercel.token)
    return vercel_sandbox_driver(**settings)
