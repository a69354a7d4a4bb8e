"""The local driver's checkpoints beyond the suite's: layers stacked by forks of forks, a fork outliving its
source and its snapshot, a pause that really stops the box's processes, and what weak mode declares."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from mainsdk import SandboxError, Session
from mainsdk.errors import INVALID_OPTION

from mainsdk_local import local_sandbox_driver

TICKS = "import time\nn = 0\nwhile True:\n    n += 1\n    open('ticks.txt', 'w').write(str(n))\n    time.sleep(0.01)"
READ = ["-c", "import os; print(sorted(os.listdir('.')), [open(n).read() for n in sorted(os.listdir('.'))])"]


def _checkpoints_here(make_sandbox: Callable[..., Any]) -> Any:
    built = make_sandbox()
    caps = built.sandbox.capabilities()
    if "filesystem" not in caps.checkpoint_kinds:
        pytest.skip("the launcher found no overlayfs over idmapped layers here (it needs root and namespaces)")
    return built


def _one(forks: list[Session | SandboxError]) -> Session:
    (fork,) = forks
    assert isinstance(fork, Session), fork
    return fork


def test_forks_of_forks_stack_their_layers_and_each_changes_only_its_own(make_sandbox: Callable[..., Any]) -> None:
    sandbox = _checkpoints_here(make_sandbox).sandbox
    opened: list[Session] = []
    try:
        level = sandbox.create()
        opened.append(level)
        level.write("f0.txt", "0")
        for n in range(1, 5):
            # Each level over the last: one layer more, a file of its own, an inherited one changed.
            level = _one(level.fork())
            opened.append(level)
            level.write(f"f{n}.txt", str(n))
            level.write("f0.txt", f"0 by {n}")
        names = [f"f{n}.txt" for n in range(5)]
        assert level.run("python3", READ).stdout == f"{names} ['0 by 4', '1', '2', '3', '4']\n"
        assert opened[0].run("python3", READ).stdout == "['f0.txt'] ['0']\n"
        assert opened[2].run("python3", READ).stdout == f"{names[:3]} ['0 by 2', '1', '2']\n"
    finally:
        for session in opened:
            session.close()


def test_a_fork_outlives_its_source_and_its_deleted_snapshot(make_sandbox: Callable[..., Any]) -> None:
    sandbox = _checkpoints_here(make_sandbox).sandbox
    source = sandbox.create()
    source.write("big.bin", b"x" * (4 << 20))
    snapshot = source.snapshot()
    made = sandbox.create(snapshot=snapshot)
    source.close()
    sandbox.delete_snapshot(snapshot)
    try:
        assert made.read("big.bin") == b"x" * (4 << 20)
        made.run("python3", ["-c", "open('big.bin', 'ab').write(b'y')"])
        assert len(made.read("big.bin")) == (4 << 20) + 1
    finally:
        made.close()


def test_a_paused_box_runs_nothing_until_resumed(make_sandbox: Callable[..., Any]) -> None:
    sandbox = _checkpoints_here(make_sandbox).sandbox
    if not sandbox.capabilities().pause:
        pytest.skip("no cgroup freezer here")
    with sandbox.create() as session:
        process = session.start("python3", ["-c", TICKS])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _ticks(session) is None:
            time.sleep(0.05)
        session.pause()
        sandbox.resume(session.id)  # read through a running box, then paused again for the check
        first = _ticks(session)
        session.pause()
        time.sleep(1.0)
        sandbox.resume(session.id)
        after_pause = _ticks(session)
        time.sleep(1.0)
        later = _ticks(session)
        process.kill()
    assert first is not None and after_pause is not None and later is not None
    # A tick each 10 ms. Frozen for 1 s: only the ticks of the calls around it (a few, more under load), never
    # the second's hundred; running for 1 s: many, even on a loaded machine.
    assert int(after_pause) - int(first) < 40, (first, after_pause)
    assert int(later) - int(after_pause) >= 40, (after_pause, later)


def _ticks(session: Session) -> bytes | None:
    try:
        return session.read("ticks.txt") or None
    except SandboxError:
        return None


def test_weak_mode_declares_no_checkpoints_and_refuses_a_snapshot_naming_the_driver(
    make_sandbox: Callable[..., Any],
) -> None:
    built = make_sandbox(driver=local_sandbox_driver(force_weak=True))
    caps = built.sandbox.capabilities()
    assert (caps.checkpoint_kinds, caps.pause) == (frozenset(), False)
    assert caps.checkpoint_why.startswith("the launcher runs weak or not as root; memory snapshots: ")
    with built.sandbox.create() as session:
        for call in (session.snapshot, session.fork, session.pause, lambda: session.snapshot(kind="memory")):
            with pytest.raises(SandboxError) as caught:
                call()
            assert caught.value.code == INVALID_OPTION and "'local'" in caught.value.message
        assert caught.value.message.endswith(f"(Capabilities.checkpoint_kinds): {caps.checkpoint_why}")


def test_memory_snapshots_are_refused_naming_the_driver_and_what_it_offers(make_sandbox: Callable[..., Any]) -> None:
    # CRIU 4.1+ is what a memory snapshot needs on this kernel (Debian's 3.17 fails at start); the driver looks for
    # one and says what it found, and why even a working one keeps no box (test_memory_snapshots.py).
    sandbox = _checkpoints_here(make_sandbox).sandbox
    with sandbox.create() as session, pytest.raises(SandboxError) as caught:
        session.snapshot(kind="memory")
    assert caught.value.code == INVALID_OPTION
    assert "'local'" in caught.value.message and "'memory'" in caught.value.message
    why = sandbox.capabilities().checkpoint_why
    assert why.startswith("memory snapshots") and "CRIU" in why
    assert caught.value.message.endswith(f"it offers: filesystem (Capabilities.checkpoint_kinds): {why}")


def test_an_idle_session_pauses_instead_of_closing_where_main_yaml_says_so(make_sandbox: Callable[..., Any]) -> None:
    from conftest import CONFIG

    built = make_sandbox(CONFIG.replace("sandbox:\n", "sandbox:\n  sessions: { on-idle: pause }\n", 1))
    sandbox = built.sandbox
    if not sandbox.capabilities().pause:
        pytest.skip("no cgroup freezer here")
    session = sandbox.create(idle="2s")
    try:
        session.write("a.txt", "kept")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not session.paused:
            time.sleep(0.05)
        assert session.paused and not session.closed
        time.sleep(1.0)  # paused is not idle: it stays paused, never closed
        assert session.paused and not session.closed
        sandbox.resume(session.id)
        assert session.read("a.txt") == b"kept"
    finally:
        session.close()
    assert [e.kind for e in built.events if e.kind in ("pause", "resume")][:2] == ["pause", "resume"]
