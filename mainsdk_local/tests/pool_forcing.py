"""Run a test module's code on pool entries: before each run the warm pool could take (a one-shot box's exec), make
sure an entry of its kind is ready, then check that the run took one.

Without this, "the suite passes with the pool on" says little: most tests open a fresh sandbox and run once or
twice, and a run that finds no entry ready runs cold. Measured on test_escapes.py when only Python had a pool: 6 of
37 python runs were warm. ``force_warm`` patches the launcher client for one test.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any

import attrs
import pytest
from mainsdk_local.launcher.pool_python import code_index

from mainsdk_local import launcher_client

READY_WITHIN = 60.0  # seconds a warm interpreter of the run's kind gets to become ready


class WarmRuns:
    """What the patched client saw: runs the pool could take, and which of them ran cold anyway."""

    def __init__(self) -> None:
        self.warm = 0
        self.cold: list[str] = []
        self.unpooled = 0  # runs the pool could take, on a launcher with no pool
        self.kinds: dict[str, int] = {}  # warm runs by the kind of entry that served them


async def _stats(launcher: launcher_client.Launcher) -> dict[str, int]:
    probe = await _OPEN(launcher, disk_bytes=1 << 20, session=False)
    try:
        return await probe.pool_stats()
    finally:
        await probe.close()


def _primers(spec: launcher_client.ExecSpec) -> list[launcher_client.ExecSpec]:
    """Execs that make the pool warm what ``spec`` can take: a pre-exec box of its root (any exec), and, for a
    shape an interpreter kind takes, that interpreter with a no-op for code (its key: argv up to the code, env)."""
    primers = [attrs.evolve(spec, argv=("/usr/bin/true",), warm="exec", stdin=None, proxy=False)]
    if spec.warm == "python" and spec.stdin is None and (index := code_index(list(spec.argv))) is not None:
        primers.append(attrs.evolve(spec, argv=(*spec.argv[:index], "pass"), proxy=False))
    if spec.warm == "node" and spec.stdin is None and len(spec.argv) == 3 and spec.argv[1] == "-e":
        primers.append(attrs.evolve(spec, argv=(*spec.argv[:2], "0"), proxy=False))
    return primers


async def _prime(launcher: launcher_client.Launcher, spec: launcher_client.ExecSpec, disk_bytes: int) -> None:
    """Run each primer once, so the pool warms an entry of its kind, then wait until the pool is idle again."""
    for primer in _primers(spec):
        box = await _OPEN(launcher, disk_bytes=disk_bytes, session=False)  # a warm node's key holds the disk size
        try:
            await _EXEC(box, primer, on_stdout=lambda chunk: None, on_stderr=lambda chunk: None)
        finally:
            await box.close()
    deadline = time.monotonic() + READY_WITHIN
    while (seen := await _stats(launcher))["warming"] or not seen["ready"]:
        assert time.monotonic() < deadline, f"no pool entry became ready: {seen}"
        await asyncio.sleep(0.02)


_OPEN = launcher_client.Launcher.open_box
_EXEC = launcher_client.LauncherBox.exec


def pool_works() -> bool:
    """Whether a launcher here gets a warm pool (namespaces, and memory and pids cgroups: root)."""
    launcher = launcher_client.Launcher(pool=1)
    try:
        return launcher.isolation == "namespace" and launcher._hello.get("pool") == 1
    finally:
        launcher.close()


def force_warm(monkeypatch: pytest.MonkeyPatch) -> WarmRuns:
    """Patch the launcher client so that every run the pool can take finds an entry of its kind ready."""
    seen = WarmRuns()
    opened: weakref.WeakKeyDictionary[launcher_client.LauncherBox, tuple[launcher_client.Launcher, bool, int]] = (
        weakref.WeakKeyDictionary()
    )

    async def open_box(self: launcher_client.Launcher, **options: Any) -> launcher_client.LauncherBox:
        box = await _OPEN(self, **options)
        session = bool(options.get("session", True)) and not options.get("one_shot", False)
        opened[box] = (self, session, int(options.get("disk_bytes", 0)))
        return box

    async def exec_(
        self: launcher_client.LauncherBox, spec: launcher_client.ExecSpec, **options: Any
    ) -> launcher_client.ExecResult:
        launcher, session, disk_bytes = opened.get(self, (None, True, 0))
        shaped = launcher is not None and not session and spec.warm is not None and self.namespaces
        takes = shaped and launcher is not None and launcher._hello.get("pool", 0) > 0
        seen.unpooled += shaped and not takes
        if takes:
            assert launcher is not None
            await _prime(launcher, spec, disk_bytes)
        result = await _EXEC(self, spec, **options)
        if takes:
            if result.warm:
                seen.warm += 1
                seen.kinds[result.warm_kind or ""] = seen.kinds.get(result.warm_kind or "", 0) + 1
            else:
                seen.cold.append(spec.argv[-1][:80])  # the code (the figures wrapper passes it last)
        return result

    monkeypatch.setattr(launcher_client.Launcher, "open_box", open_box)
    monkeypatch.setattr(launcher_client.LauncherBox, "exec", exec_)
    return seen
