"""The cold path: what the launcher prepares ahead for a box, against real processes. No mocks.

A one-shot run's box (``session=False``) runs one exec and closes, so the server must not
prepare a "hot" spare worker inside it (a second pid namespace, fork and pivot_root thrown
away unused); a session's box gets one, so its next command starts sooner.

A one-shot run is one exchange with the launcher: the open, the files, the exec, /out and
the close all go out before the first answer comes back, with the same errors as before
(a failed open or file runs nothing, and says so).
"""

from __future__ import annotations

import asyncio
import errno
import glob
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from mainsdk_local.launcher import protocol
from mainsdk_local.launcher_client import ExecSpec, Launcher, LauncherBox, OpenFailed

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


async def _exec_true(box: LauncherBox) -> None:
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

    async def recording_open(*, session: bool = True, **options: Any) -> LauncherBox:
        opened.append(session and not options.get("one_shot", False))  # a spy on the real call, run unchanged
        return await real_open(session=session, **options)

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
        assert result.exit_code == 0 and 200 <= made < 256, made  # the root, work/, out/, tmp/ and tmp/home/ take five
    finally:
        await box.close()


async def test_open_box_refuses_a_max_files_that_is_not_a_count(launcher: Launcher) -> None:
    with pytest.raises(ValueError, match="max_files"):
        await launcher.open_box(disk_bytes=MiB, max_files=3)


def test_a_one_shot_run_is_one_exchange_with_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    # Must hold: the open, the files, the exec, /out and the close of a one-shot run are all sent before the app
    # waits for any answer (they were four round trips), and the run's files, output and out files are intact.
    from mainsdk import Sandbox, SandboxDeps

    from mainsdk_local import local_sandbox_driver

    sandbox = Sandbox(SandboxDeps(driver=local_sandbox_driver(), load_entrypoints=False))
    try:
        assert sandbox.run("print(1 + 1)").stdout == "2\n"  # the launcher is up: its hello is not part of a run
        log: list[str] = []
        real_send, real_receive = LauncherBox._send, protocol.receive

        def send(box: LauncherBox, header: dict[str, Any], payload: bytes = b"", fds: list[int] | None = None) -> None:
            log.append(f"send {header.get('op')}")  # spies on the real calls, which run unchanged
            real_send(box, header, payload, fds)

        def receive(sock: Any) -> tuple[bytes, list[int]]:
            data, fds = real_receive(sock)
            if data:
                log.append("receive")
            return data, fds

        monkeypatch.setattr(LauncherBox, "_send", send)
        monkeypatch.setattr(protocol, "receive", receive)
        code = "import pathlib; print(pathlib.Path('in.txt').read_text()); pathlib.Path('../out/o.txt').write_text('x')"
        result = sandbox.run(code, files={"in.txt": "hello"})
        monkeypatch.undo()
        assert (result.stdout, result.exit_code, [f.name for f in result.files]) == ("hello\n", 0, ["o.txt"])
        first_answer = log.index("receive")
        assert [entry for entry in log[first_answer:] if entry.startswith("send")] == [], log
        assert log[:first_answer] == ["send write", "send exec"], log
    finally:
        sandbox.close()


async def test_a_one_shot_exec_behind_a_failed_file_does_not_run(launcher: Launcher) -> None:
    # Must hold: a file that cannot be written (the box's tmpfs is full) fails the exec sent behind it without
    # running it (OpenFailed, the write's own error inside), and the box still closes cleanly.
    files = {"fits.txt": b"x", "too-big.bin": bytes(2 * MiB), "after.txt": b"y"}
    box = await launcher.open_box(disk_bytes=MiB, one_shot=True, files=files)
    out: list[bytes] = []
    try:
        with pytest.raises(OpenFailed) as failed:
            await box.exec(
                ExecSpec(argv=("/bin/sh", "-c", "echo ran"), env={}, timeout=20.0, memory_bytes=64 * MiB),
                on_stdout=out.append,
                on_stderr=out.append,
                then_collect=MiB,
            )
        assert isinstance(failed.value.cause, OSError) and failed.value.cause.errno == errno.ENOSPC
        assert "too-big.bin" in str(failed.value.cause)
        assert out == []
    finally:
        await box.close()
    assert box.gone


async def test_a_one_shot_box_that_cannot_open_runs_nothing(launcher: Launcher) -> None:
    # Must hold: an open the server refuses (here a tmpfs with fewer inodes than the files need) is raised
    # by the exec as OpenFailed, and nothing ran.
    files = {f"f{i}": b"" for i in range(80)}
    box = await launcher.open_box(disk_bytes=MiB, one_shot=True, files=files, max_files=64)
    out: list[bytes] = []
    try:
        with pytest.raises(OpenFailed) as failed:
            await box.exec(
                ExecSpec(argv=("/bin/sh", "-c", "echo ran"), env={}, timeout=20.0, memory_bytes=64 * MiB),
                on_stdout=out.append,
                on_stderr=out.append,
                then_collect=0,
            )
        assert isinstance(failed.value.cause, OSError) and failed.value.cause.errno == errno.ENOSPC
        assert out == []
    finally:
        await box.close()


def test_a_one_shot_run_whose_files_do_not_fit_fails_as_its_start_did() -> None:
    # Must hold: through core, the error is what the start hook raised when it wrote the files itself: an outage
    # (0006) naming mainsdk_driver_start, with nothing run (ran=False), so retryable; the cause is the write's.
    from mainsdk import Sandbox, SandboxDeps, SandboxError

    from mainsdk_local import local_sandbox_driver

    sandbox = Sandbox(SandboxDeps(driver=local_sandbox_driver(), load_entrypoints=False))
    try:
        # 4MB of memory gives the box's tmpfs 2,048 inodes (box_file_count): 2,100 empty files do not fit.
        files = {f"f{i}": b"" for i in range(2100)}
        with pytest.raises(SandboxError) as raised:
            sandbox.run("print('ran')", files=files, limits={"memory": "4MB"})
        error = raised.value
        assert error.code == "MAIN-SANDBOX-0006" and "mainsdk_driver_start" in error.message
        assert (error.ran, error.retryable) == (False, True)
        assert isinstance(error.__cause__, OSError) and error.__cause__.errno == errno.ENOSPC
        assert sandbox.run("print(1 + 1)").stdout == "2\n"  # the launcher is fine
    finally:
        sandbox.close()


async def test_then_collect_is_only_for_a_one_shot_box(launcher: Launcher) -> None:
    box = await launcher.open_box(disk_bytes=MiB, session=False)
    spec = ExecSpec(argv=("/bin/true",), env={}, timeout=20.0, memory_bytes=64 * MiB)
    try:
        with pytest.raises(ValueError, match="one_shot"):
            await box.exec(spec, on_stdout=lambda c: None, on_stderr=lambda c: None, then_collect=MiB)
    finally:
        await box.close()
    one_shot = await launcher.open_box(disk_bytes=MiB, one_shot=True)
    try:
        with pytest.raises(ValueError, match="then_collect"):
            await one_shot.exec(spec, on_stdout=lambda c: None, on_stderr=lambda c: None, then_collect=-1)
        with pytest.raises(ValueError, match="files"):
            await launcher.open_box(disk_bytes=MiB, files={"a": b""})
        with pytest.raises(ValueError, match="path"):
            await launcher.open_box(disk_bytes=MiB, one_shot=True, files={"../etc/x": b""})
    finally:
        await one_shot.close()


async def test_a_one_shot_box_is_torn_down_after_its_run(launcher: Launcher) -> None:
    # Must hold: the server removes a one-shot box's tmpfs and folder after it answered (the teardown waits
    # for a moment with no request, but it comes): nothing of the box stays mounted, and its slot is free.
    for _ in range(3):
        box = await launcher.open_box(disk_bytes=MiB, one_shot=True, files={"a.txt": b"a"})
        out: list[bytes] = []
        spec = ExecSpec(
            argv=("/bin/sh", "-c", "cat /work/a.txt > /out/b.txt; echo ok"), env={}, timeout=20.0, memory_bytes=64 * MiB
        )
        result = await box.exec(spec, on_stdout=out.append, on_stderr=lambda c: None, then_collect=MiB)
        collected = await box.collect_out(max_bytes=MiB)
        await box.close()
        assert (result.exit_code, b"".join(out)) == (0, b"ok\n")
        assert [(f.name, f.data) for f in collected.files] == [("b.txt", b"a")]
    assert launcher._proc is not None
    deadline = time.monotonic() + 30
    while True:
        with open(f"/proc/{launcher._proc.pid}/mountinfo") as mounts:
            boxes = [line for line in mounts if "/box-" in line]
        if not boxes:
            break
        assert time.monotonic() < deadline, boxes
        await asyncio.sleep(0.05)


async def test_a_spare_is_ready_for_the_next_one_shot_run_after_its_box_closed(launcher: Launcher) -> None:
    # Must hold: one-shot runs leave no box open between them, yet the server prepares the next run's worker
    # after one closes (for SPARE_LINGER), so the next run does not fork and set up its own on its critical path.
    box = await launcher.open_box(disk_bytes=MiB, one_shot=True)
    spec = ExecSpec(argv=("/bin/true",), env={}, timeout=20.0, memory_bytes=64 * MiB)
    result = await box.exec(spec, on_stdout=lambda c: None, on_stderr=lambda c: None, then_collect=0)
    await box.collect_out(max_bytes=0)
    await box.close()
    assert result.exit_code == 0
    assert len(await _settled_workers(launcher, 1)) == 1  # the generic spare, made with no box open


async def test_a_resolved_program_is_taken_without_a_thread_hop(monkeypatch: pytest.MonkeyPatch) -> None:
    # Must hold: the interpreter is resolved once; later runs take it from the cache on the event loop, not
    # through asyncio.to_thread (a thread hop on every run's critical path).
    from mainsdk import AsyncSandbox, SandboxDeps

    from mainsdk_local import local_sandbox_driver

    sandbox = AsyncSandbox(SandboxDeps(driver=local_sandbox_driver(), load_entrypoints=False))
    try:
        assert (await sandbox.run("print(1 + 1)")).stdout == "2\n"
        hops: list[str] = []
        real_to_thread = asyncio.to_thread

        async def to_thread(function: Any, /, *args: Any, **kwargs: Any) -> Any:
            hops.append(getattr(function, "__qualname__", repr(function)))  # a spy: the real call runs
            return await real_to_thread(function, *args, **kwargs)

        monkeypatch.setattr(asyncio, "to_thread", to_thread)
        assert (await sandbox.run("print(3)")).stdout == "3\n"
        assert [hop for hop in hops if "ProgramCache" in hop] == []
    finally:
        await sandbox.aclose()
