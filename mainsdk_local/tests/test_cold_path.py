"""The cold path: what the launcher prepares ahead for a box, against real processes. No mocks.

A one-shot run's box (``session=False``) runs one exec and closes, so the server must not
prepare a "hot" spare worker inside it (a second pid namespace, fork and pivot_root thrown
away unused); a session's box gets one, so its next command starts sooner.
"""

from __future__ import annotations

import asyncio
import glob
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from mainsdk_local.launcher_client import Box, ExecSpec, Launcher

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the launcher is Linux only")

MiB = 1 << 20
# Far longer than the server waits before it prepares a spare (SPARE_QUIET and SPARE_DELAY are fractions of this).
SETTLE_SECONDS = 1.5


@pytest.fixture
def launcher() -> Iterator[Launcher]:
    """A launcher of its own: its server's children are this test's workers only."""
    instance = Launcher()
    if instance.isolation != "namespace":
        instance.close()
        pytest.skip("namespaces are not available here (spares exist only in namespace mode)")
    yield instance
    instance.close()


def _workers(launcher: Launcher) -> set[int]:
    """The server's children: each is a worker (B, pid 1 of its own pid namespace), running or spare."""
    assert launcher._proc is not None
    pids: set[int] = set()
    for path in glob.glob(f"/proc/{launcher._proc.pid}/task/*/children"):
        with open(path) as fh:
            pids.update(int(p) for p in fh.read().split())
    return pids


async def _exec_true(box: Box) -> None:
    result = await box.exec(
        ExecSpec(argv=("/bin/true",), env={}, timeout=20.0, memory_bytes=64 * MiB),
        on_stdout=lambda chunk: None,
        on_stderr=lambda chunk: None,
    )
    assert result.exit_code == 0


async def _settled_workers(launcher: Launcher, at_least: int) -> set[int]:
    """The server's workers once at least ``at_least`` exist and nothing changed for SETTLE_SECONDS."""
    deadline = time.monotonic() + 30
    while len(_workers(launcher)) < at_least:
        assert time.monotonic() < deadline, f"fewer than {at_least} workers after 30 s: {_workers(launcher)}"
        await asyncio.sleep(0.02)
    while True:
        before = _workers(launcher)
        await asyncio.sleep(SETTLE_SECONDS)
        after = _workers(launcher)
        if after == before or time.monotonic() > deadline:
            return after


async def test_a_one_shot_box_gets_no_hot_spare(launcher: Launcher) -> None:
    box = await launcher.open_box(disk_bytes=MiB, session=False)
    try:
        await _exec_true(box)
        # Only the generic spare stays: a hot spare would be a second worker, prepared for this box while open.
        assert len(await _settled_workers(launcher, 1)) == 1
    finally:
        await box.close()


async def test_a_session_box_gets_a_hot_spare(launcher: Launcher) -> None:
    box = await launcher.open_box(disk_bytes=MiB, session=True)
    try:
        await _exec_true(box)
        assert len(await _settled_workers(launcher, 2)) == 2  # the generic spare and this box's hot one
        await _exec_true(box)  # the hot spare serves the next exec
    finally:
        await box.close()


async def test_open_box_refuses_a_session_flag_that_is_not_a_bool(launcher: Launcher) -> None:
    with pytest.raises(ValueError, match="session"):
        await launcher.open_box(disk_bytes=MiB, session="yes")  # type: ignore[arg-type]


def test_core_opens_a_one_shot_box_for_a_run_and_a_session_box_for_a_session() -> None:
    """``BoxSpec.session`` reaches the launcher: a run's box gets no hot spare, a session's does."""
    from mainsdk import Sandbox, SandboxDeps

    from mainsdk_local import local_sandbox_driver

    driver = local_sandbox_driver()
    opened: list[bool] = []
    real_open = driver._launcher.open_box

    async def recording_open(*, session: bool = True, **limits: Any) -> Box:
        opened.append(session)  # a spy on the real call, which runs unchanged
        return await real_open(session=session, **limits)

    driver._launcher.open_box = recording_open  # type: ignore[method-assign]
    sandbox = Sandbox(SandboxDeps(driver=driver, load_entrypoints=False))
    try:
        assert sandbox.run("print(1 + 1)").stdout == "2\n"
        assert opened == [False]
        session = sandbox.create()
        try:
            assert session.run("python3", ["-c", "print(3)"]).stdout == "3\n"
        finally:
            session.close()
        assert opened == [False, True]
    finally:
        sandbox.close()


async def test_a_box_holds_no_more_files_than_max_files(launcher: Launcher) -> None:
    # Must hold: an empty file costs the kernel memory and no tmpfs block, so only a count bounds a box's files
    # (a session kept 90,000 of them past a 64 MiB memory limit); the box's tmpfs takes max_files as nr_inodes.
    box = await launcher.open_box(disk_bytes=MiB, session=False, max_files=256)
    out: list[bytes] = []
    script = "i=0; while [ $i -lt 1000 ]; do (: > /work/f$i) 2>/dev/null || break; i=$((i+1)); done; echo $i"
    try:
        result = await box.exec(
            ExecSpec(argv=("/bin/sh", "-c", script), env={}, timeout=20.0, memory_bytes=64 * MiB),
            on_stdout=out.append,
            on_stderr=lambda chunk: None,
        )
        made = int(b"".join(out))
        assert result.exit_code == 0 and 200 <= made < 256, made  # the root, work/ and out/ take three
    finally:
        await box.close()


async def test_open_box_refuses_a_max_files_that_is_not_a_count(launcher: Launcher) -> None:
    with pytest.raises(ValueError, match="max_files"):
        await launcher.open_box(disk_bytes=MiB, max_files=3)
