"""Run a test module's code on warm interpreters: before each python run the warm pool could take, make sure one
of its kind is ready, then check that the run took it.

Without this, "the suite passes with the pool on" says little: most tests open a fresh sandbox and run once or
twice, and a run that finds no warm interpreter ready runs cold. Measured on test_escapes.py: 6 of 37 python runs
were warm. ``warm_runs`` (a fixture factory) patches the launcher client for one test.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any

import attrs
import pytest
from mainsdk_local.launcher.pool_python import code_index

from mainsdk_local import launcher_client as LC

READY_WITHIN = 60.0  # seconds a warm interpreter of the run's kind gets to become ready


class WarmRuns:
    """What the patched client saw: runs the pool could take, and which of them ran cold anyway."""

    def __init__(self) -> None:
        self.warm = 0
        self.cold: list[str] = []
        self.unpooled = 0  # python runs of a shape the pool takes, on a launcher with no pool


async def _stats(launcher: LC.Launcher) -> dict[str, int]:
    probe = await _OPEN(launcher, disk_bytes=1 << 20, session=False)
    try:
        return await probe.pool_stats()
    finally:
        await probe.close()


async def _prime(launcher: LC.Launcher, spec: LC.ExecSpec, index: int) -> None:
    """Run ``spec``'s kind once (code ``pass``), so the pool warms one of it, and wait until the pool is idle again."""
    box = await _OPEN(launcher, disk_bytes=1 << 20, session=False)
    try:
        shape = attrs.evolve(spec, argv=(*spec.argv[:index], "pass"), stdin=None, proxy=False)
        await _EXEC(box, shape, on_stdout=lambda chunk: None, on_stderr=lambda chunk: None)
    finally:
        await box.close()
    deadline = time.monotonic() + READY_WITHIN
    while (seen := await _stats(launcher))["warming"] or not seen["ready"]:
        assert time.monotonic() < deadline, f"no warm interpreter became ready: {seen}"
        await asyncio.sleep(0.02)


_OPEN = LC.Launcher.open_box
_EXEC = LC.Box.exec


def pool_works() -> bool:
    """Whether a launcher here gets a warm pool (namespaces, and memory and pids cgroups: root)."""
    launcher = LC.Launcher(pool=1)
    try:
        return launcher.isolation == "namespace" and launcher._hello.get("pool") == 1
    finally:
        launcher.close()


def force_warm(monkeypatch: pytest.MonkeyPatch) -> WarmRuns:
    """Patch the launcher client so that every python run the pool can take finds a warm interpreter ready."""
    seen = WarmRuns()
    opened: weakref.WeakKeyDictionary[LC.Box, tuple[LC.Launcher, bool]] = weakref.WeakKeyDictionary()

    async def open_box(self: LC.Launcher, **options: Any) -> LC.Box:
        box = await _OPEN(self, **options)
        opened[box] = (self, bool(options.get("session", True)) and not options.get("one_shot", False))
        return box

    async def exec_(self: LC.Box, spec: LC.ExecSpec, **options: Any) -> LC.ExecResult:
        launcher, session = opened.get(self, (None, True))
        index = code_index(list(spec.argv)) if spec.warm == "python" and spec.stdin is None else None
        shaped = launcher is not None and not session and index is not None
        takes = shaped and launcher is not None and launcher._hello.get("pool", 0) > 0
        seen.unpooled += shaped and not takes
        if takes:
            assert launcher is not None and index is not None
            await _prime(launcher, spec, index)
        result = await _EXEC(self, spec, **options)
        if takes:
            if result.warm:
                seen.warm += 1
            else:
                seen.cold.append(spec.argv[-1][:80])  # the code (the figures wrapper passes it last)
        return result

    monkeypatch.setattr(LC.Launcher, "open_box", open_box)
    monkeypatch.setattr(LC.Box, "exec", exec_)
    return seen
