"""The default file store's lifetime: bounded in size and age, and no folder left behind by a dead process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from mainsdk import errors
from mainsdk.errors import SandboxError
from mainsdk.files import (
    TEMP_PREFIX,
    FileStoreFull,
    LocalDirectoryFileStore,
    _process_identity,
    remove_stale_folders,
)


def no_file(store: LocalDirectoryFileStore, tenant: str, file_id: str) -> SandboxError:
    with pytest.raises(SandboxError) as caught:
        store.read(tenant, file_id)
    assert caught.value.code == errors.NO_SESSION
    return caught.value


def test_the_oldest_files_make_room_within_max_bytes(tmp_path: Path) -> None:
    store = LocalDirectoryFileStore(tmp_path, max_bytes="2KB")
    refs = [store.put("t", f"f{i}.bin", bytes([i]) * 600) for i in range(5)]
    assert store.held <= 2048
    # The newest fit; the oldest went first, and reading them is 0008, like an id that never was.
    assert store.read("t", refs[-1].id) == bytes([4]) * 600
    assert store.read("t", refs[-2].id) == bytes([3]) * 600
    for ref in refs[:3]:  # 600 bytes and ~150 of metadata each: two fit in 2KB
        error = no_file(store, "t", ref.id)
    assert "2KB" in error.message
    assert {p.name for p in tmp_path.rglob("file_*")} == {n for r in refs[3:] for n in (r.id, f"{r.id}.json")}


def test_a_thousand_runs_worth_of_files_stay_within_the_bound(tmp_path: Path) -> None:
    # The figure: ~270 KB per 1,000 runs, without limit. Bounded, the store holds at most max_bytes.
    store = LocalDirectoryFileStore(tmp_path, max_bytes="64KB")
    for i in range(1000):
        store.put(f"tenant-{i % 7}", "out.txt", b"x" * 120)
    on_disk = sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
    assert store.held <= 64 * 1024 and on_disk == store.held


def test_files_older_than_max_age_are_gone(tmp_path: Path) -> None:
    store = LocalDirectoryFileStore(tmp_path, max_age=0.2)
    old = store.put("t", "old.txt", b"old")
    time.sleep(0.3)  # only a lower bound matters: the file is at least this old
    no_file(store, "t", old.id)
    assert not list(tmp_path.rglob(old.id + "*"))
    new = store.put("t", "new.txt", b"new")
    assert store.read("t", new.id) == b"new"


def test_a_file_larger_than_the_store_is_refused_whole(tmp_path: Path) -> None:
    store = LocalDirectoryFileStore(tmp_path, max_bytes="1KB")
    kept = store.put("t", "a.txt", b"a")
    with pytest.raises(FileStoreFull) as caught:
        store.put("t", "big.bin", b"b" * 2048)
    assert isinstance(caught.value, OSError) and "max_bytes" in str(caught.value)
    assert store.read("t", kept.id) == b"a"  # nothing was evicted for a file that could never fit


def test_a_reused_directory_is_counted_against_the_bound(tmp_path: Path) -> None:
    first = LocalDirectoryFileStore(tmp_path)
    refs = [first.put("t", f"{i}", b"z" * 700) for i in range(3)]
    again = LocalDirectoryFileStore(tmp_path, max_bytes="1KB")  # a restart with a lower bound
    assert again.held <= 1024
    no_file(again, "t", refs[0].id)
    assert again.read("t", refs[2].id) == b"z" * 700


@pytest.mark.parametrize(("option", "value"), [("max_bytes", 0), ("max_bytes", "lots"), ("max_age", -1)])
def test_bad_bounds_are_refused_naming_the_option(tmp_path: Path, option: str, value: object) -> None:
    with pytest.raises(SandboxError) as caught:
        LocalDirectoryFileStore(tmp_path, **{option: value})  # type: ignore[arg-type]
    assert caught.value.code == errors.INVALID_OPTION and option in caught.value.message


# A real app process: makes the default store (in its TMPDIR), keeps a file, says where, then waits.
APP = textwrap.dedent(
    """
    import sys, time
    from mainsdk.files import LocalDirectoryFileStore
    store = LocalDirectoryFileStore()
    store.put("t", "kept.txt", b"kept")
    print(store.root, flush=True)
    time.sleep(120)
    """
)


def start_app(temp: Path, app: str = APP) -> tuple[subprocess.Popen[str], Path]:
    env = {**os.environ, "TMPDIR": str(temp)}
    proc = subprocess.Popen([sys.executable, "-c", app], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    root = Path(proc.stdout.readline().strip())
    assert root.parent == temp and root.name.startswith(TEMP_PREFIX) and any(root.rglob("file_*"))
    return proc, root


def test_a_killed_apps_folder_is_removed_by_the_next_store_and_a_live_ones_is_not(tmp_path: Path) -> None:
    killed, stale = start_app(tmp_path)
    alive, live = start_app(tmp_path)
    try:
        killed.send_signal(signal.SIGKILL)  # no atexit: the folder stays behind
        killed.wait(30)
        assert stale.exists()
        # The next app to start a default store cleans up after the dead one, and only after it.
        nxt = subprocess.run(
            [sys.executable, "-c", "from mainsdk.files import LocalDirectoryFileStore; LocalDirectoryFileStore()"],
            env={**os.environ, "TMPDIR": str(tmp_path)},
            timeout=60,
            check=True,
        )
        assert nxt.returncode == 0
        assert not stale.exists()
        assert live.exists() and any(live.rglob("file_*"))
    finally:
        alive.kill()
        alive.wait(30)
        killed.stdout and killed.stdout.close()
        alive.stdout and alive.stdout.close()


def test_a_reused_pid_does_not_protect_a_stale_folder(tmp_path: Path) -> None:
    # A folder named for this very pid (alive) but an older start: the process that made it is gone.
    boot, namespace, pid, start = _process_identity(os.getpid()).split("-")
    reused = tmp_path / f"{TEMP_PREFIX}{boot}-{namespace}-{pid}-{int(start) - 1}-abc"
    mine = tmp_path / f"{TEMP_PREFIX}{boot}-{namespace}-{pid}-{start}-abc"
    other_namespace = tmp_path / f"{TEMP_PREFIX}{boot}-{int(namespace) + 1}-{pid}-1-abc"
    other_boot = tmp_path / f"{TEMP_PREFIX}{'f' * 12 if boot != 'f' * 12 else 'e' * 12}-{namespace}-{pid}-{start}-abc"
    not_ours = tmp_path / f"{TEMP_PREFIX}abc"  # an older name we cannot judge
    for folder in (reused, mine, other_namespace, other_boot, not_ours):
        folder.mkdir()
        (folder / "f").write_text("x")
    target = tmp_path / "target"
    target.mkdir()
    (target / "precious").write_text("x")
    link = tmp_path / f"{TEMP_PREFIX}{boot}-{namespace}-1-1-link"
    link.symlink_to(target)
    removed = remove_stale_folders(tmp_path)
    assert sorted(Path(p).name for p in removed) == sorted([reused.name, other_boot.name])
    assert mine.exists() and other_namespace.exists() and not_ours.exists()
    assert (target / "precious").exists() and link.is_symlink()


def test_an_app_that_left_through_os_exit_is_cleaned_up_too(tmp_path: Path) -> None:
    # os._exit skips atexit just as SIGKILL does.
    app, stale = start_app(tmp_path, APP.replace("time.sleep(120)", "import os; os._exit(0)"))
    assert app.wait(30) == 0 and stale.exists()
    if app.stdout:
        app.stdout.close()
    LocalDirectoryFileStore(tmp_path / "explicit")  # an explicit directory cleans nothing: it is the app's own
    assert stale.exists()
    assert remove_stale_folders(tmp_path) == [str(stale)]
    assert not stale.exists()
