"""The ``example`` driver: a template to copy when writing a mainsdk sandbox driver.

Each command is a plain subprocess (no shell) in its box's own temp folder, with
an empty environment, its own session (setsid) so the whole process group can be
killed, and an RLIMIT_AS memory cap. That is ``weak`` isolation: the code shares
the host's network, file system and user. Development only, so it declares
``production=False`` and core refuses it when ``MAINSDK_ENV=production``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
from mainsdk.config import AppConfig
from mainsdk.driver import BoxSpec, Capabilities, Collected, Command, ExecOutcome, OutFile, OutputSink, StopReason
from mainsdk.errors import INVALID_OPTION, NO_SESSION, SandboxError
from mainsdk.hookspecs import hookimpl

__all__ = ["ExampleBox", "ExampleDriver", "driver_from_config"]

# The programs core asks for, by name. Python is the app's own base interpreter, resolved through its venv
# link so the code does not get the app's installed packages. No node: V8 reserves about 1 GB of address
# space at start, so RLIMIT_AS cannot cap it; a driver must not offer a language it cannot limit.
PROGRAMS: dict[str, str | None] = {"python3": os.path.realpath(sys.executable), "bash": shutil.which("bash")}
READ_CHUNK = 65536
DRAIN_TIMEOUT = 2.0  # a grandchild that left the process group could hold the pipes open forever


@attrs.define
class ExampleBox:
    """A box: a temp folder holding ``work/`` (the cwd) and ``out/``, gone when the box stops."""

    id: str
    root: Path
    memory: int

    @property
    def work(self) -> Path:
        """The code's working folder."""
        return self.root / "work"


def _inside(box: ExampleBox, path: str) -> Path:
    """``path`` under the work folder (``../out/x`` reaches the out folder); core has checked it already."""
    target = (box.work / path).resolve()
    if not target.is_relative_to(box.root.resolve()):  # a symlink the code made must not lead out
        raise SandboxError(INVALID_OPTION, f"{path!r} leads out of the box")
    return target


def _memory_cap(limit: int) -> Callable[[], None]:
    def apply() -> None:  # runs in the child between fork and exec
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


class ExampleDriver:
    """The driver plugin: one ``@hookimpl`` per hook of ``mainsdk.hookspecs``."""

    @hookimpl
    def mainsdk_driver_capabilities(self) -> Capabilities:
        return Capabilities(
            isolation="weak",
            languages=frozenset({"python", "bash"}),
            network=False,  # it cannot give hosts, so core refuses a run that asks for any (MAIN-SANDBOX-0005)
            memory_limit=True,
            sessions=True,
            production=False,
            network_reach=None,  # it gives no hosts: no filtering to declare, no extra reach
            reports_signals=True,  # a crash comes back as 128 + N and the signal's name (see exec below)
            # Named in MAIN-SANDBOX-0006: what could fail here is local, not a provider.
            outage_remedy="check that the temp folder has free space and that python3 and bash can be started",
        )

    @hookimpl
    def mainsdk_network_policy(self, hosts: Sequence[str]) -> Any:
        return None  # there is no egress policy to send; core never gives this driver hosts

    @hookimpl
    async def mainsdk_driver_start(self, spec: BoxSpec) -> ExampleBox:
        root = Path(tempfile.mkdtemp(prefix="mainsdk-example-"))
        box = ExampleBox(spec.id, root, spec.limits.memory)
        (root / "work").mkdir()
        (root / "out").mkdir()
        for path, data in spec.files.items():
            await self.mainsdk_driver_write_file(box, path, data)
        return box

    @hookimpl
    async def mainsdk_driver_exec(self, box: ExampleBox, command: Command, output: OutputSink) -> ExecOutcome:
        executable = PROGRAMS.get(command.program)
        if executable is None:
            raise SandboxError(INVALID_OPTION, f"the example driver runs {sorted(PROGRAMS)}, not {command.program!r}")
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            executable,
            *command.args,
            cwd=box.work,
            env=dict(command.env),  # only what core passes: never the app's environment
            stdin=asyncio.subprocess.PIPE if command.stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # setsid: the code and its children are one process group to kill
            preexec_fn=_memory_cap(box.memory),
        )
        assert proc.stdout is not None and proc.stderr is not None
        readers = [
            asyncio.ensure_future(_pump(proc.stdout, output.stdout)),
            asyncio.ensure_future(_pump(proc.stderr, output.stderr)),
        ]
        stop: StopReason | None = None
        try:
            if proc.stdin is not None:
                proc.stdin.write(command.stdin or b"")
                with contextlib.suppress(ConnectionError):
                    await proc.stdin.drain()
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), command.timeout)
            except TimeoutError:
                stop = "timeout"
        finally:
            # Always, also when core cancels us (output limit, its own deadline): kill the whole group, then reap.
            _kill_group(proc.pid)
            await asyncio.shield(proc.wait())
            await asyncio.wait(readers, timeout=DRAIN_TIMEOUT)
            for reader in readers:
                reader.cancel()
        returncode = proc.returncode
        if stop or returncode is None:
            return ExecOutcome(exit_code=None, stop=stop, duration=time.monotonic() - started)
        # asyncio gives -N for a child killed by signal N; core wants the signal, by name (the host's numbering
        # may not be Linux's), and reports 128 + N as a shell would.
        if returncode >= 0:
            return ExecOutcome(exit_code=returncode, duration=time.monotonic() - started)
        return ExecOutcome(exit_code=None, duration=time.monotonic() - started, signal=_signal_name(-returncode))

    @hookimpl
    async def mainsdk_driver_write_file(self, box: ExampleBox, path: str, data: bytes) -> None:
        target = _inside(box, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    @hookimpl
    async def mainsdk_driver_read_file(self, box: ExampleBox, path: str) -> bytes:
        target = _inside(box, path)
        if not target.is_file():
            # Not an outage: a retry would not help, so not MAIN-SANDBOX-0006.
            raise SandboxError(NO_SESSION, f"no file {path!r} in the session", status=404)
        return target.read_bytes()

    @hookimpl
    async def mainsdk_driver_collect(self, box: ExampleBox, max_bytes: int) -> Collected:
        files: list[OutFile] = []
        skipped: list[tuple[str, str]] = []
        total, truncated = 0, False
        out = box.root / "out"
        for path in sorted(out.rglob("*")):
            name = path.relative_to(out).as_posix()
            if path.is_symlink() or not path.is_file():  # never follow a link the code made
                if path.is_symlink():
                    skipped.append((name, "a symbolic link"))
                continue
            data = path.read_bytes()
            if total + len(data) > max_bytes:
                truncated = True
                break
            total += len(data)
            files.append(OutFile(name, data))
        return Collected(tuple(files), truncated, tuple(skipped))

    @hookimpl
    async def mainsdk_driver_stop(self, box: ExampleBox) -> None:
        await asyncio.to_thread(shutil.rmtree, box.root, True)


async def _pump(stream: asyncio.StreamReader, sink: Callable[[bytes], None]) -> None:
    """Pass output on as it arrives: core cuts it at the limit and redacts it."""
    while chunk := await stream.read(READ_CHUNK):
        sink(chunk)


def _signal_name(number: int) -> int | str:
    """The signal's name (``SIGSEGV``), else its number (a real-time signal has no name of its own)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return number


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def driver_from_config(config: AppConfig) -> ExampleDriver:
    """The entry point (``mainsdk.drivers: example``): build the driver from the parsed ``main.yaml``."""
    return ExampleDriver()
