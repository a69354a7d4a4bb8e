"""What the warm pool's test modules share: a launcher with a pool, one run in a fresh box, the pool's stats, and
waiting until an entry of a kind is ready. Each module builds its own kind's ``ExecSpec`` and calls these.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping

import pytest
from mainsdk_local.launcher_client import ExecResult, ExecSpec, Launcher

MiB = 1 << 20


def pooled_launcher(size: int = 2) -> Iterator[Launcher]:
    """A launcher with a pool of ``size`` (a fixture's body); skips where the pool cannot work."""
    instance = Launcher(pool=size)
    if instance.isolation != "namespace" or instance._hello.get("pool") != size:
        instance.close()
        pytest.skip("the warm pool needs namespaces and memory and pids cgroups (root), which this machine lacks")
    yield instance
    instance.close()


class Ran:
    """What a run gave its caller: the launcher's result and everything it wrote."""

    def __init__(self, result: ExecResult, stdout: bytes, stderr: bytes) -> None:
        self.result = result
        self.stdout = stdout
        self.stderr = stderr

    def seen(self) -> tuple[int | None, int | None, str | None, bytes, bytes]:
        """Everything the caller sees of the run, but whether it was warm and how long it took."""
        return (self.result.exit_code, self.result.signal, self.result.stop, self.stdout, self.stderr)


async def run_in_box(
    launcher: Launcher,
    spec: ExecSpec,
    *,
    files: Mapping[str, bytes] | None = None,
    disk: int = 16 * MiB,
    session: bool = False,
) -> Ran:
    """One run in a fresh box, as the driver does it: open, write files, exec, close."""
    box = await launcher.open_box(disk_bytes=disk, session=session)
    out: list[bytes] = []
    err: list[bytes] = []
    try:
        for path, data in (files or {}).items():
            await box.write_file(path, data)
        result = await box.exec(spec, on_stdout=out.append, on_stderr=err.append)
    finally:
        await box.close()
    return Ran(result, b"".join(out), b"".join(err))


async def stats(launcher: Launcher) -> dict[str, int]:
    """The pool's counters (``ready``, ``<kind>_ready``, ``hits``, ...)."""
    box = await launcher.open_box(disk_bytes=MiB, session=False)
    try:
        return await box.pool_stats()
    finally:
        await box.close()


async def wait_ready(launcher: Launcher, kind: str, ask: Callable[[], Awaitable[object]], seconds: float) -> None:
    """Unless an entry of ``kind`` is ready, ``ask`` for one (a run of its key), then wait until one is."""
    if (await stats(launcher))[f"{kind}_ready"] == 0:
        await ask()
    deadline = time.monotonic() + seconds
    while (await stats(launcher))[f"{kind}_ready"] == 0:
        assert time.monotonic() < deadline, f"no {kind} pool entry became ready in {seconds:.0f} s"
        await asyncio.sleep(0.05)
