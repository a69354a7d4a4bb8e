"""A real driver that runs in memory, for core's own tests: core's run lifecycle in milliseconds, no process.

Core's checks, limits, redaction, audit, sessions, files and error boundary are the same whatever the driver;
this one lets core/tests exercise them in the ``core`` tox env, where no driver is installed. It implements
every hook of ``mainsdk.hookspecs`` (typed as ``mainsdk.driver.SessionDriver``) and is handed to a sandbox
as ``SandboxDeps(driver=MemoryDriver(), load_entrypoints=False)``, no entry point needed.

A box is two dicts (the work and out folders). A command is a tiny script, given as ``bash -c SCRIPT`` (a run
in language ``bash``, or a session's ``run("bash", ["-c", SCRIPT])``), one statement a line::

    out TEXT          TEXT to stdout, one chunk        err TEXT          TEXT to stderr
    chunks N TEXT     TEXT to stdout N times, N chunks sleep SECONDS     wait (the driver keeps command.timeout)
    exit CODE         end with CODE                    signal N|NAME     end killed by that signal
    write PATH TEXT   a file (``../out/x``: out folder) cat PATH          a file's bytes to stdout
    env NAME          the variable's value to stdout   stdin             the command's stdin to stdout
    refused HOST      the code tried HOST, not given   memory            end stopped at the memory limit
    fail              the driver itself raises (an outage in its exec hook)

TEXT is a Python string or bytes literal when it starts with a quote (``out "a\\n"``, ``out b"\\xff"``),
else the rest of the line as it is. ``MemoryDriver(fail={"mainsdk_driver_start": OSError("down")})``
makes a hook raise; ``honours_timeout=False`` makes the exec ignore the time limit, so core's own
backstop deadline is what stops the command.
"""

from __future__ import annotations

import ast
import asyncio
import itertools
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from mainsdk.driver import (
    BoxSpec,
    Capabilities,
    Collected,
    Command,
    ExecOutcome,
    Folder,
    OutFile,
    OutputSink,
    SessionDriver,
    StopReason,
)
from mainsdk.errors import INVALID_OPTION, NO_SESSION, SandboxError
from mainsdk.hookspecs import hookimpl

__all__ = ["MemoryBox", "MemoryDriver", "ScriptError", "script", "typed"]

CAPABILITIES = Capabilities(
    isolation="microvm",  # what it claims; nothing runs, so nothing can escape
    languages=frozenset({"bash"}),
    network=True,
    memory_limit=True,
    memory_limit_scope="tree",
    sessions=True,
    background=True,  # execs run at once in a box, each cancelled on its own
    reports_signals=True,
    outage_remedy="check the memory driver's fail= argument (a test made it fail)",
)

_box_ids = itertools.count(1)


class ScriptError(Exception):
    """A line of a script the memory driver cannot read: the test's own mistake."""


@attrs.define
class MemoryBox:
    """A started box: its spec, its two folders, and what happened in it (for tests to assert on)."""

    id: str
    spec: BoxSpec
    work: dict[str, bytes]
    out: dict[str, bytes] = attrs.field(factory=dict)
    stopped: bool = False
    commands: list[Command] = attrs.field(factory=list)
    cancelled: int = 0  # execs core cancelled (its output limit, its backstop deadline)


def script(*lines: str) -> str:
    """A script of ``lines``, one statement each (readability at the call site)."""
    return "\n".join(lines)


def _text(raw: str) -> bytes:
    raw = raw.strip(" ")
    if raw[:1] in {"'", '"'} or raw[:2] in {"b'", 'b"'}:
        value = ast.literal_eval(raw)
        return value if isinstance(value, bytes) else str(value).encode()
    return raw.encode()


def _folder(path: str) -> tuple[str, str]:
    return ("out", path[len("../out/") :]) if path.startswith("../out/") else ("work", path)


@attrs.frozen
class _Ended(Exception):
    """How a script ended before its last line."""

    exit_code: int | None
    stop: StopReason | None = None
    signal: int | str | None = None


class MemoryDriver:
    """The driver plugin. ``boxes`` holds every box it started, ``calls`` every hook core called, in order."""

    def __init__(
        self,
        *,
        capabilities: Capabilities = CAPABILITIES,
        fail: Mapping[str, BaseException] | None = None,
        honours_timeout: bool = True,
    ) -> None:
        self.capabilities = capabilities
        self.fail = dict(fail or {})
        self.honours_timeout = honours_timeout
        self.boxes: list[MemoryBox] = []
        self.calls: list[str] = []
        self.policies: list[Any] = []

    def _enter(self, hook: str) -> None:
        self.calls.append(hook)
        if hook in self.fail:
            raise self.fail[hook]

    @hookimpl
    def mainsdk_driver_capabilities(self) -> Capabilities:
        self._enter("mainsdk_driver_capabilities")
        return self.capabilities

    @hookimpl
    def mainsdk_network_policy(self, hosts: Sequence[str]) -> Any:
        self._enter("mainsdk_network_policy")
        return {"allow": sorted(hosts)} if hosts else None

    @hookimpl
    def mainsdk_driver_check(self, command: Command, spec: BoxSpec) -> None:
        self._enter("mainsdk_driver_check")
        if command.program != "bash" or command.args[:1] != ("-c",) or len(command.args) != 2:
            raise SandboxError(INVALID_OPTION, f"the memory driver runs bash -c SCRIPT, not {command.program!r}")

    @hookimpl
    async def mainsdk_driver_start(self, spec: BoxSpec) -> MemoryBox:
        self._enter("mainsdk_driver_start")
        self.policies.append(spec.network_policy)
        box = MemoryBox(f"mem_{next(_box_ids)}", spec, dict(spec.files))
        self.boxes.append(box)
        return box

    @hookimpl
    async def mainsdk_driver_exec(self, box: MemoryBox, command: Command, output: OutputSink) -> ExecOutcome:
        self._enter("mainsdk_driver_exec")
        box.commands.append(command)
        started = time.monotonic()
        run = self._run(box, command, output)
        try:
            if self.honours_timeout:
                ended = await asyncio.wait_for(run, command.timeout)
            else:
                ended = await run
        except TimeoutError:
            ended = _Ended(None, stop="timeout")
        except asyncio.CancelledError:
            box.cancelled += 1  # a real driver kills the command's tree here, then re-raises
            raise
        return ExecOutcome(ended.exit_code, ended.stop, time.monotonic() - started, signal=ended.signal)

    async def _run(self, box: MemoryBox, command: Command, output: OutputSink) -> _Ended:
        try:
            for line in command.args[1].splitlines():
                await asyncio.sleep(0)  # a chunk at a time, as output arrives from a real box
                self._statement(box, command, output, line)
                verb, _, rest = line.strip().partition(" ")
                if verb == "sleep":
                    await asyncio.sleep(float(rest))
        except _Ended as ended:
            return ended
        return _Ended(0)

    def _statement(self, box: MemoryBox, command: Command, output: OutputSink, line: str) -> None:
        verb, _, rest = line.strip().partition(" ")
        if verb in {"", "sleep"}:
            return
        if verb == "out":
            output.stdout(_text(rest))
        elif verb == "err":
            output.stderr(_text(rest))
        elif verb == "chunks":
            count, _, text = rest.partition(" ")
            for _ in range(int(count)):
                output.stdout(_text(text))
        elif verb == "exit":
            raise _Ended(int(rest))
        elif verb == "signal":
            raise _Ended(None, signal=int(rest) if rest.isdigit() else rest)
        elif verb == "memory":
            raise _Ended(None, stop="memory")
        elif verb == "write":
            path, _, text = rest.partition(" ")
            folder, name = _folder(path)
            (box.out if folder == "out" else box.work)[name] = _text(text)
        elif verb == "cat":
            folder, name = _folder(rest)
            files = box.out if folder == "out" else box.work
            if name not in files:
                output.stderr(f"cat: {rest}: No such file or directory\n".encode())
                raise _Ended(1)
            output.stdout(files[name])
        elif verb == "env":
            output.stdout(command.env.get(rest, "").encode())
        elif verb == "stdin":
            output.stdout(command.stdin or b"")
        elif verb == "refused":
            output.host_refused(rest)
        elif verb == "fail":
            raise RuntimeError("the backend fell over (token=tok_in_the_drivers_message)")
        else:
            raise ScriptError(f"the memory driver has no statement {verb!r} (line {line!r})")

    @hookimpl
    async def mainsdk_driver_write_file(self, box: MemoryBox, folder: Folder, path: str, data: bytes) -> None:
        self._enter("mainsdk_driver_write_file")
        (box.out if folder is Folder.OUT else box.work)[path] = data

    @hookimpl
    async def mainsdk_driver_read_file(self, box: MemoryBox, folder: Folder, path: str) -> bytes:
        self._enter("mainsdk_driver_read_file")
        files = box.out if folder is Folder.OUT else box.work
        if path not in files:
            raise SandboxError(NO_SESSION, f"no file {path!r} in the session", status=404, ran=False)
        return files[path]

    @hookimpl
    async def mainsdk_driver_collect(self, box: MemoryBox, max_bytes: int) -> Collected:
        self._enter("mainsdk_driver_collect")
        kept: list[OutFile] = []
        taken = 0
        for name, data in sorted(box.out.items()):
            if taken + len(data) > max_bytes:
                return Collected(tuple(kept), truncated=True, skipped=((name, "past limits.files"),))
            taken += len(data)
            kept.append(OutFile(name, data))
        return Collected(tuple(kept))

    @hookimpl
    async def mainsdk_driver_stop(self, box: MemoryBox) -> None:
        self._enter("mainsdk_driver_stop")
        box.stopped = True


def typed(driver: MemoryDriver) -> SessionDriver[MemoryBox]:
    """``driver`` as the contract types it: mypy --strict checks every hook's signature against ``SessionDriver``
    here (a hook with a wrong name, argument or return type is a type error), so no test needs to call it."""
    return driver
