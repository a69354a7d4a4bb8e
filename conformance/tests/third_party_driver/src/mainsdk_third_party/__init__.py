"""A third party's whole mainsdk driver, written against the public contract only: each run a plain subprocess
in a temp folder (weak isolation). About 60 lines of code; it passes the conformance suite unchanged."""

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace as Box
from typing import Any

import attrs
from mainsdk.driver import BoxSpec, Capabilities, Collected, Command, ExecOutcome, OutFile, OutputSink
from mainsdk.hookspecs import hookimpl

PIPE = asyncio.subprocess.PIPE
SPAWN: dict[str, Any] = {"stdin": PIPE, "stdout": PIPE, "stderr": PIPE, "start_new_session": True}  # killpg-able


@attrs.frozen
class ThirdPartyConfig:  # sandbox.third-party, declared in mainsdk.driver_configs: core checks it, with lines
    python: str = attrs.field(factory=lambda: os.path.realpath(sys.executable))  # the interpreter for python3


@attrs.define
class SubprocessDriver:
    config: ThirdPartyConfig = attrs.field(factory=ThirdPartyConfig)

    @hookimpl
    def mainsdk_driver_capabilities(self) -> Capabilities:
        return Capabilities(isolation="weak", languages=frozenset({"python"}))  # no network: no policy hook

    @hookimpl
    async def mainsdk_driver_start(self, spec: BoxSpec) -> Box:
        box = Box(id=spec.id, root=Path(tempfile.mkdtemp()))
        (box.root / "out").mkdir()
        (box.root / "work").mkdir()
        for name, data in spec.files.items():
            (box.root / "work" / name).parent.mkdir(parents=True, exist_ok=True)
            (box.root / "work" / name).write_bytes(data)
        return box

    @hookimpl
    async def mainsdk_driver_exec(self, box: Box, command: Command, output: OutputSink) -> ExecOutcome:
        program = self.config.python if command.program == "python3" else command.program
        proc = await asyncio.create_subprocess_exec(
            program, *command.args, cwd=box.root / "work", env=command.env, **SPAWN
        )
        streams = ((proc.stdout, output.stdout), (proc.stderr, output.stderr))
        pumps = [asyncio.ensure_future(_pump(stream, sink)) for stream, sink in streams]
        proc.stdin.write(command.stdin or b""), proc.stdin.close()  # type: ignore[union-attr]
        started, stop = asyncio.get_running_loop().time(), None
        try:
            await asyncio.wait_for(proc.wait(), command.timeout)
        except TimeoutError:
            stop = "timeout"
        finally:  # also when core cancels: kill the whole group and reap it, or proc.wait() stays pending
            with contextlib.suppress(ProcessLookupError):  # the group may be gone already
                os.killpg(proc.pid, signal.SIGKILL)
            await asyncio.shield(proc.wait())
            await asyncio.wait(pumps, timeout=2)
        took = asyncio.get_running_loop().time() - started
        return ExecOutcome(None if stop else proc.returncode, stop, took)  # type: ignore[arg-type]

    @hookimpl
    async def mainsdk_driver_collect(self, box: Box, max_bytes: int) -> Collected:
        out = box.root / "out"
        paths = [path for path in sorted(out.rglob("*")) if path.is_file() and not path.is_symlink()]
        files = [OutFile(path.relative_to(out).as_posix(), path.read_bytes()) for path in paths]
        kept = [f for i, f in enumerate(files) if sum(len(g.data) for g in files[: i + 1]) <= max_bytes]
        return Collected(tuple(kept), truncated=len(kept) < len(files))

    @hookimpl
    async def mainsdk_driver_stop(self, box: Box) -> None:
        shutil.rmtree(box.root, ignore_errors=True)


async def _pump(stream: Any, sink: Any) -> None:
    while chunk := await stream.read(65536):
        sink(chunk)


def driver_from_config(config: Any) -> SubprocessDriver:
    return SubprocessDriver(config.sandbox.section("third-party", ThirdPartyConfig))
