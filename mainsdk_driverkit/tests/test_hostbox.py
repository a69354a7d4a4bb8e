"""``mainsdk_driverkit.hostbox``: the subprocess, folder and out-folder helpers a host-folder driver builds on.

Every test runs real processes and real files: hostile code is played by bash and python doing what
hostile code does (never reading stdin, escaping the process group, leaving links, fifos, deep trees).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mainsdk.driver import BoxSpec, Command, Folder, RunLimits
from mainsdk.errors import INVALID_OPTION, NO_SESSION, OUTPUT, SandboxError
from mainsdk_driverkit.hostbox import (
    DRAIN_SECONDS,
    MAX_OUT_DEPTH,
    MAX_OUT_FILES,
    HostBox,
    collect_folder,
    run_subprocess,
)

BASH = shutil.which("bash") or "/bin/bash"
PYTHON = os.path.realpath(sys.executable)
LIMITS = RunLimits(timeout=30, memory=256 * 1024 * 1024, output=1 << 20, files=1 << 20, disk=1 << 20)


class Sink:
    """An ``OutputSink`` that keeps what it is sent."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.err = bytearray()
        self.chunks = 0

    def stdout(self, data: bytes) -> None:
        self.out += data
        self.chunks += 1

    def stderr(self, data: bytes) -> None:
        self.err += data

    def host_refused(self, host: str) -> None:
        raise AssertionError(host)


def gone(pid: int) -> bool:
    """True once ``pid`` is no process, or only a zombie waiting for a reaper that is not us."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


def wait_gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return gone(pid)


@pytest.fixture
def leftover() -> Iterator[list[int]]:
    """Pids a test expects gone; killed at the end whatever the test found, so nothing outlives it."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def bash(script: str, *, timeout: float = 30, stdin: bytes | None = None, env: dict[str, str] | None = None) -> Command:
    return Command("bash", ("-c", script), stdin=stdin, timeout=timeout, env=env or {})


async def test_output_exit_code_and_only_the_commands_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APP_SECRET", "s3cret")  # the app's environment must not reach the code
    sink = Sink()
    command = bash('echo "out:$GIVEN:${APP_SECRET-unset}:$(pwd)"; echo err >&2; exit 7', env={"GIVEN": "g"})
    outcome = await run_subprocess(BASH, command, sink, cwd=tmp_path)
    assert (outcome.exit_code, outcome.stop, outcome.signal) == (7, None, None)
    assert bytes(sink.out) == f"out:g:unset:{tmp_path}\n".encode()
    assert bytes(sink.err) == b"err\n"
    assert outcome.duration > 0


async def test_output_is_sent_as_it_is_made_not_at_the_end(tmp_path: Path) -> None:
    sink = Sink()
    seen: list[bytes] = []

    async def watch() -> None:
        while b"first" not in sink.out:
            await asyncio.sleep(0.02)
        seen.append(bytes(sink.out))

    watcher = asyncio.ensure_future(watch())
    outcome = await run_subprocess(BASH, bash("echo first; sleep 1; echo second"), sink, cwd=tmp_path)
    await watcher
    assert outcome.exit_code == 0 and seen == [b"first\n"] and bytes(sink.out) == b"first\nsecond\n"


async def test_stdin_is_given_and_closed(tmp_path: Path) -> None:
    sink = Sink()
    outcome = await run_subprocess(BASH, bash("wc -c", stdin=b"x" * 300_000), sink, cwd=tmp_path)
    assert outcome.exit_code == 0 and sink.out.strip() == b"300000"


async def test_a_timeout_kills_the_whole_group_and_says_timeout(tmp_path: Path, leftover: list[int]) -> None:
    pidfile = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {pidfile}; wait"
    started = time.monotonic()
    outcome = await run_subprocess(BASH, bash(script, timeout=1), Sink(), cwd=tmp_path)
    leftover.append(int(pidfile.read_text()))
    assert (outcome.stop, outcome.exit_code, outcome.signal) == ("timeout", None, None)
    assert time.monotonic() - started < 1 + 2 * DRAIN_SECONDS + 5
    assert wait_gone(leftover[0]), "the command's background child outlived its timeout"


async def test_code_that_never_reads_a_large_stdin_still_stops_at_its_timeout(tmp_path: Path) -> None:
    # 8 MB is far past a pipe's buffer: a driver that awaits writing stdin before the deadline starts hangs here.
    started = time.monotonic()
    outcome = await run_subprocess(BASH, bash("sleep 60", timeout=1, stdin=b"x" * (8 << 20)), Sink(), cwd=tmp_path)
    assert outcome.stop == "timeout"
    assert time.monotonic() - started < 1 + 2 * DRAIN_SECONDS + 5


async def test_a_cancel_kills_the_whole_group_before_it_goes_on(tmp_path: Path, leftover: list[int]) -> None:
    pidfile = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {pidfile}; yes"  # floods stdout too: the pipes are full when the cancel comes
    sink = Sink()
    task = asyncio.ensure_future(run_subprocess(BASH, bash(script), sink, cwd=tmp_path))
    while not pidfile.exists() or not pidfile.read_text().strip() or len(sink.out) < 1 << 20:
        await asyncio.sleep(0.02)
    leftover.append(int(pidfile.read_text()))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2 * DRAIN_SECONDS + 5)  # a pending Process.wait() would hang here
    assert wait_gone(leftover[0]), "the command's background child outlived the cancel"


async def test_a_process_that_left_the_group_and_holds_the_pipes_does_not_turn_an_exit_into_a_timeout(
    tmp_path: Path, leftover: list[int]
) -> None:
    # setsid: the grandchild escapes the group kill (weak isolation), keeping stdout open for 60 s.
    pidfile = tmp_path / "escaped.pid"
    script = f"setsid sleep 60 & echo $! > {pidfile}; echo done; exit 3"
    sink = Sink()
    started = time.monotonic()
    outcome = await run_subprocess(BASH, bash(script, timeout=20), sink, cwd=tmp_path)
    leftover.append(int(pidfile.read_text()))
    assert (outcome.exit_code, outcome.stop) == (3, None)
    assert bytes(sink.out) == b"done\n"
    assert time.monotonic() - started < 2 * DRAIN_SECONDS + 5  # not the 20 s timeout, not the 60 s sleep


async def test_a_sink_that_raises_kills_the_command_and_its_error_comes_out_of_the_hook(
    tmp_path: Path, leftover: list[int]
) -> None:
    class Raising(Sink):
        def stdout(self, data: bytes) -> None:
            raise LookupError("the app's own bug")

    pidfile = tmp_path / "child.pid"
    command = bash(f"sleep 60 & echo $! > {pidfile}; yes", timeout=30)
    with pytest.raises(LookupError, match="the app's own bug"):
        await asyncio.wait_for(run_subprocess(BASH, command, Raising(), cwd=tmp_path), 2 * DRAIN_SECONDS + 10)
    leftover.append(int(pidfile.read_text()))
    assert wait_gone(leftover[0]), "the command's background child outlived the sink's failure"


@pytest.mark.parametrize("executable", ["no-such-program", "not-executable", "not-a-binary", "."])
async def test_a_program_that_cannot_start_is_0001_naming_it_and_nothing_ran(tmp_path: Path, executable: str) -> None:
    (tmp_path / "not-executable").write_text("#!/bin/sh\n")
    (tmp_path / "not-a-binary").write_bytes(b"\x00\x01 neither ELF nor #!")
    (tmp_path / "not-a-binary").chmod(0o755)
    with pytest.raises(SandboxError) as caught:
        await run_subprocess(str(tmp_path / executable), Command("mytool"), Sink(), cwd=tmp_path)
    assert (caught.value.code, caught.value.ran) == (INVALID_OPTION, False)
    assert "'mytool'" in caught.value.message


async def test_a_command_killed_by_a_signal_is_reported_by_the_signals_name(tmp_path: Path) -> None:
    outcome = await run_subprocess(BASH, bash("kill -SEGV $$"), Sink(), cwd=tmp_path)
    assert (outcome.exit_code, outcome.signal, outcome.stop) == (None, "SIGSEGV", None)


async def test_the_memory_cap_holds_for_each_process(tmp_path: Path) -> None:
    code = "import sys\ntry:\n    b = bytearray(400 * 1024 * 1024)\nexcept MemoryError:\n    sys.exit(42)\n"
    command = Command("python3", ("-c", code), timeout=30)
    capped = await run_subprocess(PYTHON, command, Sink(), cwd=tmp_path, memory=128 * 1024 * 1024)
    assert capped.exit_code == 42
    uncapped = await run_subprocess(PYTHON, command, Sink(), cwd=tmp_path)
    assert uncapped.exit_code == 0


def spec(**files: bytes) -> BoxSpec:
    return BoxSpec(id="box-1", limits=LIMITS, files=files)


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HostBox]:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    made = HostBox.create(BoxSpec(id="box-1", limits=LIMITS, files={"data.csv": b"a,b\n", "in/deep.txt": b"d"}))
    yield made
    made.remove()


def test_a_box_holds_its_files_in_work_and_an_empty_out(box: HostBox, tmp_path: Path) -> None:
    assert box.root.parent == tmp_path and box.id == "box-1"
    assert (box.work / "data.csv").read_bytes() == b"a,b\n" and (box.work / "in/deep.txt").read_bytes() == b"d"
    assert list(box.out.iterdir()) == []
    box.remove()
    assert not box.root.exists()


def test_reads_and_writes_reach_work_and_out(box: HostBox) -> None:
    box.write(Folder.WORK, "new/x.txt", b"x")
    box.write(Folder.OUT, "report.txt", b"r")
    assert box.read(Folder.WORK, "new/x.txt") == b"x" and box.read(Folder.OUT, "report.txt") == b"r"
    assert (box.out / "report.txt").read_bytes() == b"r"


@pytest.mark.parametrize(
    ("folder", "path"),
    [(Folder.WORK, name) for name in ("missing.txt", "in", "link", "fifo", "dirlink/secret")]
    + [(Folder.OUT, "nothing")],
)
def test_a_read_of_what_is_not_a_regular_file_in_the_box_is_0008(
    box: HostBox, tmp_path: Path, folder: Folder, path: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host secret")
    os.symlink(outside / "secret", box.work / "link")
    os.symlink(outside, box.work / "dirlink")
    os.mkfifo(box.work / "fifo")  # opened without waiting for a writer, then refused by its type
    with pytest.raises(SandboxError) as caught:
        box.read(folder, path)
    assert (caught.value.code, caught.value.status, caught.value.ran) == (NO_SESSION, 404, False)


def test_a_file_larger_than_limits_disk_is_never_read_in_part(box: HostBox) -> None:
    (box.work / "big.bin").write_bytes(b"x" * (LIMITS.disk + 1))
    with pytest.raises(SandboxError) as caught:
        box.read(Folder.WORK, "big.bin")
    assert (caught.value.code, caught.value.ran) == (OUTPUT, False) and "'big.bin'" in caught.value.message
    (box.work / "big.bin").write_bytes(b"x" * LIMITS.disk)
    assert len(box.read(Folder.WORK, "big.bin")) == LIMITS.disk


def test_a_write_through_a_link_the_code_made_is_refused_and_writes_nothing_outside(
    box: HostBox, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, box.work / "dirlink")
    os.symlink(outside / "file", box.work / "filelink")
    for path in ("dirlink/planted", "filelink"):
        with pytest.raises(SandboxError) as caught:
            box.write(Folder.WORK, path, b"planted")
        assert caught.value.code == INVALID_OPTION and path in caught.value.message
    assert list(outside.iterdir()) == []


def test_a_write_into_an_out_folder_the_code_replaced_by_a_link_is_refused(box: HostBox, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    box.out.rmdir()
    os.symlink(outside, box.out)  # the code can reach ../out from its working folder
    with pytest.raises(SandboxError) as caught:
        box.write(Folder.OUT, "planted", b"planted")
    assert caught.value.code == INVALID_OPTION and "symlink" in caught.value.message
    assert list(outside.iterdir()) == []


def test_collect_keeps_regular_files_and_names_what_it_left(box: HostBox, tmp_path: Path) -> None:
    (box.out / "s/t").mkdir(parents=True)
    (box.out / "s/t/b.bin").write_bytes(bytes(range(256)))
    (box.out / "a.txt").write_bytes(b"a")
    os.symlink("/etc/hostname", box.out / "link")
    os.symlink(tmp_path, box.out / "dirlink")  # a folder link is not entered
    os.mkfifo(box.out / "fifo")
    collected = box.collect(1 << 20)
    assert [(f.name, f.data) for f in collected.files] == [("a.txt", b"a"), ("s/t/b.bin", bytes(range(256)))]
    assert sorted(collected.skipped) == [
        ("dirlink", "a symbolic link"),
        ("fifo", "not a regular file"),
        ("link", "a symbolic link"),
    ]
    assert not collected.truncated


def test_collect_keeps_what_fits_past_a_file_too_large(tmp_path: Path) -> None:
    (tmp_path / "a_big.bin").write_bytes(b"x" * 600)
    (tmp_path / "b_small.bin").write_bytes(b"y" * 300)
    (tmp_path / "c_small.bin").write_bytes(b"z" * 300)
    collected = collect_folder(tmp_path, 700)
    assert [f.name for f in collected.files] == ["a_big.bin"]
    too_large = "larger than what is left of limits.files"
    assert collected.truncated and collected.skipped == (("b_small.bin", too_large), ("c_small.bin", too_large))
    collected = collect_folder(tmp_path, 650)
    assert [f.name for f in collected.files] == ["a_big.bin"] and collected.truncated
    collected = collect_folder(tmp_path, 500)
    assert [f.name for f in collected.files] == ["b_small.bin"] and collected.truncated


def test_collect_stops_at_its_bounds_on_files_and_depth(tmp_path: Path) -> None:
    many = tmp_path / "many"
    many.mkdir()
    for i in range(MAX_OUT_FILES + 5):
        (many / f"{i:05}").write_bytes(b"")
    collected = collect_folder(many, 1 << 20)
    assert len(collected.files) == MAX_OUT_FILES and collected.truncated
    deep = tmp_path / "deep"
    (deep.joinpath(*["d"] * (MAX_OUT_DEPTH + 3))).mkdir(parents=True)
    (deep / "top.txt").write_bytes(b"t")
    collected = collect_folder(deep, 1 << 20)
    assert [f.name for f in collected.files] == ["top.txt"] and collected.truncated


def test_collect_of_an_out_folder_replaced_by_a_link_reads_nothing(box: HostBox, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host secret")
    box.out.rmdir()
    os.symlink(outside, box.out)
    collected = box.collect(1 << 20)
    [(name, why)] = collected.skipped
    assert collected.files == () and name == "" and why.startswith("unreadable folder: ")


def _random_tree(rng: random.Random, folder: Path, outside: Path, depth: int) -> None:
    for i in range(rng.randint(0, 6)):
        name = f"{rng.choice('abcXYZ_.-')}{i}{rng.choice(['', '.txt', ' space', 'é'])}"
        kind = rng.choices(["file", "dir", "link", "dirlink", "fifo", "empty"], [6, 2, 1, 1, 1, 1])[0]
        path = folder / name
        if kind == "file":
            path.write_bytes(rng.randbytes(rng.randint(1, 400)))
        elif kind == "empty":
            path.write_bytes(b"")
        elif kind == "dir" and depth < 4:
            path.mkdir()
            _random_tree(rng, path, outside, depth + 1)
        elif kind == "link":
            os.symlink(outside / "secret", path)
        elif kind == "dirlink":
            os.symlink(outside, path)
        elif kind == "fifo":
            os.mkfifo(path)


# A fixed-seed slice of 30 trees; HOSTBOX_FUZZ_SEEDS=1500 runs a longer one (about 20 s).
@pytest.mark.parametrize("seed", range(int(os.environ.get("HOSTBOX_FUZZ_SEEDS", "30"))))
def test_collect_of_random_trees_keeps_only_regular_files_within_budget_and_names_the_rest(
    tmp_path: Path, seed: int
) -> None:
    # Random trees of files, folders, links to a secret outside, fifos, checked against what must hold.
    rng = random.Random(seed)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"SECRET-OUTSIDE-THE-BOX")
    out = tmp_path / "out"
    out.mkdir()
    _random_tree(rng, out, outside, 0)
    regular = {
        path.relative_to(out).as_posix(): path.read_bytes()
        for path in out.rglob("*")
        if path.is_file() and not path.is_symlink() and not any(p.is_symlink() for p in path.parents)
    }
    budget = rng.choice([0, 100, 700, 1 << 20])
    collected = collect_folder(out, budget)
    kept = {f.name: f.data for f in collected.files}
    assert len(kept) == len(collected.files)  # no file twice
    assert all(regular.get(name) == data for name, data in kept.items())  # only regular files, as they are
    assert not any(b"SECRET-OUTSIDE" in data for data in kept.values())  # no link followed
    assert sum(map(len, kept.values())) <= budget
    skipped = {name for name, _ in collected.skipped}
    left_out = set(regular) - set(kept)
    assert left_out <= skipped or collected.truncated
    assert collected.truncated == any(why.startswith("larger than") for _, why in collected.skipped)
    if budget == 1 << 20:
        assert kept == regular and not collected.truncated
