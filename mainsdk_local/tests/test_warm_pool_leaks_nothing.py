"""Attacks on the warm pool: a run that reaches for another run, a warming interpreter, the control channel,
or the pool's own bounds. Real launcher, real namespaces, real CPython; no mocks.

Each test says whether it caught a hole (it failed on the code before its fix) or guards a guarantee that
already held (it would catch a regression). The helpers come from ``warm_python_runs`` and ``pool_runs``.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Iterator

import pytest
from mainsdk_local.launcher_client import ExecSpec, Launcher
from mainsdk_local.programs import Program, resolve_program
from pool_runs import MiB, Ran, run_in_box, stats
from warm_python_runs import run, until_ready, warm_run

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the launcher is Linux only")


@pytest.fixture(scope="module")
def python() -> Program:
    return resolve_program("python", "python3")


def _pooled(size: int) -> Launcher:
    instance = Launcher(pool=size)
    if instance.isolation != "namespace" or instance._hello.get("pool") != size:
        instance.close()
        pytest.skip("the warm pool needs namespaces and memory and pids cgroups (root), which this machine lacks")
    return instance


@pytest.fixture
def launcher() -> Iterator[Launcher]:
    instance = _pooled(2)
    yield instance
    instance.close()


def _server_rss_kib(launcher: Launcher) -> int:
    proc = launcher._proc
    assert proc is not None
    with open(f"/proc/{proc.pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


# Flags the Python stub takes (its kind "python"), and flags it refuses, so that a pre-exec box (kind "exec") takes
# the run: each attack below is tried from both.
SHAPES = {"python": ("-E", "-s", "-c"), "exec": ("-E", "-s", "-X", "utf8", "-c")}


async def _ready(launcher: Launcher, python: Program, kind: str, count: int) -> None:
    """Ask for entries of ``kind`` (a run of its shape), then wait until ``count`` are ready.

    Each asking run's text differs: the same text twice in a row is a streak, and the python kind then warms its
    refills with that text compiled ahead, which serve only a run of that very text (``Kind.fits``). Under load
    this loop asks more than once, and the test's later runs would go cold for that reason alone."""
    deadline = time.monotonic() + 60
    asked = 0
    while (await stats(launcher))[f"{kind}_ready"] < count:
        if not (await stats(launcher))[f"{kind}_warming"]:
            asked += 1
            await run(launcher, python, f"pass  # asking {asked}", flags=SHAPES[kind])
        assert time.monotonic() < deadline, f"the pool never held {count} ready entries of kind {kind}"
        await asyncio.sleep(0.05)


async def _on(launcher: Launcher, python: Program, kind: str, code: str, **options: object) -> Ran:
    """``code`` on a ready entry of ``kind`` (asserted)."""
    await _ready(launcher, python, kind, 1)
    ran = await run(launcher, python, code, flags=SHAPES[kind], **options)  # type: ignore[arg-type]
    assert ran.result.warm_kind == kind, (ran.result, ran.seen())
    return ran


# What a run tries against everything outside itself: every process it can signal, pid 1 (B, which keeps the
# deadline and writes the report), B's descriptors, and SysV IPC objects a later run might find.
ATTACK = r"""
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
print('pids', pids)
for path in ('/proc/1/fd', '/proc/1/environ', '/proc/1/mem', '/proc/1/cmdline'):
    try:
        print(path, 'READ', os.listdir(path) if path.endswith('fd') else len(open(path, 'rb').read(64)))
    except OSError as e:
        print(path, 'refused')
for sig in (signal.SIGALRM, signal.SIGKILL, signal.SIGTERM):
    try:
        os.kill(1, sig)
        print('signal B', sig, 'SENT')
    except OSError as e:
        print('signal B', sig, 'refused')
print('ptrace B', libc.ptrace(16, 1, 0, 0), ctypes.get_errno() != 0)  # PTRACE_ATTACH
"""
IPC = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print('shm', libc.shmget(0x5EC7E7, 1 << 16, 0o1666) >= 0, 'msg', libc.msgget(0x5EC7E7, 0o1666) >= 0,
      'sem', libc.semget(0x5EC7E7, 1, 0o1666) >= 0)
print(sorted(open(f'/proc/sysvipc/{k}').read().count('\n') - 1 for k in ('shm', 'msg', 'sem')))
"""


@pytest.mark.parametrize("kind", sorted(SHAPES))
async def test_a_warm_run_reaches_neither_b_nor_a_warming_interpreter_nor_the_next_run(
    launcher: Launcher, python: Program, kind: str
) -> None:
    """Guarantee that held on main: pid namespace, uid, hidepid and the IPC namespace are the run's own, on a warm
    interpreter and on a pre-exec box alike."""
    await _ready(launcher, python, kind, 2)
    kill_all = "try:\n    os.kill(-1, signal.SIGKILL)\nexcept ProcessLookupError:\n    print('nobody to kill')\n"
    attack = await _on(launcher, python, kind, ATTACK + kill_all, timeout=10.0)
    out = attack.stdout.decode()
    assert "pids [1, 2]" in out or "pids [2]" in out, out  # B (hidden) and itself: no warming entry
    assert "READ" not in out and "SENT" not in out and "ptrace B -1 True" in out, out
    assert "nobody to kill" in out and attack.result.exit_code == 0, (out, attack.stderr)
    # The other ready entry survived kill(-1): the next run takes it.
    assert (await stats(launcher))[f"{kind}_ready"] >= 1
    survivor = await run(launcher, python, "print('alive')", flags=SHAPES[kind])
    assert (survivor.result.warm_kind, survivor.stdout) == (kind, b"alive\n")
    # SysV objects made by one run are gone for the next (each entry has its own IPC namespace).
    made = await _on(launcher, python, kind, IPC)
    assert made.stdout.splitlines() == [b"shm True msg True sem True", b"[1, 1, 1]"], made.stdout
    count = "print(sorted(open(f'/proc/sysvipc/{k}').read().count(chr(10)) - 1 for k in ('shm', 'msg', 'sem')))"
    after = await _on(launcher, python, kind, count)
    assert after.stdout == b"[0, 0, 0]\n"


LEAVE_TMP = r"""
import os
for path in ('/tmp/left', '/tmp/home/.cache/left', '/tmp/.hidden'):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as fh:
        fh.write('secret of an earlier run')
print('left', os.environ['HOME'], os.environ['TMPDIR'])
"""
LOOK_TMP = r"""
import os
print([(top, sorted(dirs), sorted(files)) for top, dirs, files in os.walk('/tmp')], os.stat('/tmp').st_mode)
"""


@pytest.mark.parametrize("kind", sorted(SHAPES))
async def test_what_a_warm_run_leaves_in_tmp_and_home_is_gone_for_the_next_run(
    launcher: Launcher, python: Program, kind: str
) -> None:
    """Guards a new guarantee (there was no /tmp before): a warm entry's /tmp and HOME are its run's box's, made
    empty with it; the next run, warm or cold, finds the same empty /tmp and HOME a cold run finds."""
    left = await _on(launcher, python, kind, LEAVE_TMP)
    assert left.stdout == b"left /tmp/home /tmp\n", (left.stdout, left.stderr)
    warm = await _on(launcher, python, kind, LOOK_TMP)
    cold = await run(launcher, python, LOOK_TMP, flags=SHAPES[kind], warm=False)
    assert warm.seen() == cold.seen()
    assert warm.stdout == b"[('/tmp', ['home'], []), ('/tmp/home', [], [])] 17407\n", warm.stdout  # 0o41777


UID = "print(open('/proc/self/uid_map').read().split()[1]); import time; time.sleep(1.5)"


async def test_concurrent_warm_runs_and_ready_interpreters_never_share_a_host_uid(python: Program) -> None:
    """Guarantee that held on main: each pooled interpreter has a box slot, hence a host uid, of its own."""
    launcher = _pooled(4)
    try:
        # Three at once: the pool keeps as many ready as were in flight at once.
        await asyncio.gather(*(run(launcher, python, UID) for _ in range(3)))
        deadline = time.monotonic() + 60
        while (await stats(launcher))["ready"] < 3:
            assert time.monotonic() < deadline, "the pool never held three ready interpreters"
            await asyncio.sleep(0.05)
        ran = await asyncio.gather(*(run(launcher, python, UID) for _ in range(3)))
        assert sum(r.result.warm for r in ran) >= 2, [r.seen() for r in ran]
        uids = [int(r.stdout) for r in ran]
        assert len(set(uids)) == 3, uids  # warm and cold alike: every concurrent run is its own host user
        assert all(uid != os.getuid() and uid > 0 for uid in uids)
    finally:
        launcher.close()


async def test_a_box_too_big_to_hand_off_runs_cold_with_its_own_files_and_the_pool_serves_on(
    launcher: Launcher, python: Program
) -> None:
    """Guarantee that held on main: a box with more files than the hand-off gives the warm interpreter's uid
    (MAX_REHOMED_ENTRIES, 256) takes a ready interpreter, gives it up and runs cold: its files are all there and its
    own, the result is the cold path's, and the pool serves the next run warm."""
    files = {f"d{i % 7}/f{i}.txt": str(i).encode() for i in range(300)}
    code = (
        "import os\nnames = [os.path.join(d, f) for d, _, fs in os.walk('.') for f in fs]\n"
        "print(len(names), sum(int(open(n).read()) for n in names), all(os.access(n, os.W_OK) for n in names))"
    )
    cold = await run(launcher, python, code, warm=False, files=files)
    assert cold.stdout == b"300 44850 True\n", cold.seen()
    await until_ready(launcher, python)
    big = await run(launcher, python, code, files=files)
    assert not big.result.warm and big.seen() == cold.seen()
    after = await warm_run(launcher, python, "print('ran')")
    assert after.seen() == (0, None, None, b"ran\n", b"")


async def test_runs_with_ever_new_large_start_up_variables_do_not_grow_the_server(
    launcher: Launcher, python: Program
) -> None:
    """Hole found: the server kept every kind (argv up to -c and start-up variables) for 60 s after its last run,
    and forever once its interpreter had printed at start, however large and however many: 100 runs, each with a new
    100 KB LD_PRELOAD, grew it by 11 MB (after 60 runs of one such kind). Now a kind over MAX_KIND_BYTES runs cold
    and is never kept, and at most MAX_KINDS kinds are kept."""

    async def runs(names: list[str]) -> None:
        for name in names:
            ran = await run(launcher, python, "print(1)", env={"LD_PRELOAD": f"/nonexistent-{name}-" + "x" * 100_000})
            assert ran.stdout == b"1\n"

    await runs(["same"] * 60)  # the server's allocator takes what 100 KB requests need once (about 6 MB here)
    before = _server_rss_kib(launcher)
    await runs([str(i) for i in range(100)])
    grown = _server_rss_kib(launcher) - before
    assert grown < 4 * 1024, f"the server grew by {grown} KiB over 100 runs of new kinds"


async def test_the_kinds_the_server_keeps_are_bounded(launcher: Launcher, python: Program) -> None:
    """Hole found (see above), with small values: 80 new kinds were 80 kinds kept; now at most MAX_KINDS (64).
    (Before the fix the stats had no ``kinds``; the RSS test above is the one that shows the growth.)"""
    for i in range(80):
        ran = await run(launcher, python, "print(1)", env={"LC_MAINSDK_PROBE": str(i)})
        assert ran.stdout == b"1\n"
    kinds = (await stats(launcher))["kinds"]
    assert 1 <= kinds <= 64, kinds


async def test_a_disk_size_no_rlimit_can_hold_is_refused_by_name_before_anything_runs(
    launcher: Launcher, python: Program
) -> None:
    """Hole found: a box of 2**63 bytes or more opened, then a cold run failed at C's setrlimit (a setup error),
    and a warm run reported exit code 1 with no output, as if the code had run and failed: the stub's setrlimit
    raised after hand-off. Now the box is refused when it opens, naming disk_bytes, warm or cold."""
    for warm in (False, True):
        if warm:
            await until_ready(launcher, python)
        with pytest.raises(ValueError, match="disk_bytes") as caught:
            await run(launcher, python, "print(1)", warm=warm, disk=1 << 63)
        assert "rlimit" not in str(caught.value)
    ok = await run(launcher, python, "print(1)", disk=(1 << 63) - 1)  # the largest size still takes a run
    assert ok.seen() == (0, None, None, b"1\n", b"")


async def test_a_run_with_tight_limits_never_leaves_the_pool_warming_without_end(
    launcher: Launcher, python: Program
) -> None:
    """Hole found: entries were warmed under the last run's limits. A python run with max_processes=1 started
    while a warm node ran, and every node warmed after it (pids.max 2: no room for node's threads) died, was
    warmed again and died, without end (40% of a CPU here, the pool stuck at one warming) until another run
    came. Now entries warm with no limits of their own; hand-off writes the run's."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    node = resolve_program("node", "node")

    async def node_run(code: str) -> Ran:
        box = await launcher.open_box(disk_bytes=16 * MiB, session=False)
        out: list[bytes] = []
        try:
            result = await box.exec(
                ExecSpec(
                    argv=(node.executable, "-e", code),
                    env={"PATH": "/usr/bin:/bin"},
                    timeout=30.0,
                    memory_bytes=512 * MiB,
                    max_processes=64,
                    readonly_paths=node.readonly_paths,
                    hidden_paths=node.hidden_paths,
                    warm="node",
                ),
                on_stdout=out.append,
                on_stderr=lambda chunk: None,
            )
        finally:
            await box.close()
        return Ran(result, b"".join(out), b"")

    await node_run("0")  # a node run: the pool warms nodes of its kind
    deadline = time.monotonic() + 90
    while (seen := await stats(launcher))["ready"] < 2 or seen["warming"]:
        assert time.monotonic() < deadline, f"the pool never filled with warm nodes: {seen}"
        await asyncio.sleep(0.1)

    async def tight() -> Ran:
        await asyncio.sleep(0.05)  # just after the node run started: the pool refills after this run started
        return await run(launcher, python, "print('tight')", warm=False, max_processes=1)

    slow, small = await asyncio.gather(node_run("setTimeout(() => console.log('slow'), 1500)"), tight())
    assert (slow.result.warm, slow.stdout, small.stdout) == (True, b"slow\n", b"tight\n")
    deadline = time.monotonic() + 30
    while (seen := await stats(launcher))["ready"] < 2 or seen["warming"]:
        assert time.monotonic() < deadline, f"the pool kept warming nodes that died: {seen}"
        await asyncio.sleep(0.1)


def _sleeping(marker: str) -> list[int]:
    """Host pids of `sleep <marker>`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if fh.read() == f"/usr/bin/sleep\0{marker}\0".encode():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def _stopped(pid: int) -> bool:
    """Whether ``pid`` lives, stopped (SIGSTOP): state T, not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


# Each kind's run: start `sleep <marker>` (found on the host by its command line), then spin.
SPINNERS = {
    "python": "import subprocess\nsubprocess.Popen(['/usr/bin/sleep', '{marker}'])\nwhile True: pass",
    "exec": "import subprocess\nsubprocess.Popen(['/usr/bin/sleep', '{marker}'])\nwhile True: pass",
    "node": "require('child_process').spawn('/usr/bin/sleep', ['{marker}'], {{stdio: 'ignore'}}); for (;;) {{}}",
}


@pytest.mark.parametrize("kind", sorted(SPINNERS))
async def test_b_keeps_a_warm_runs_deadline_while_the_launcher_is_stopped(
    launcher: Launcher, python: Program, kind: str
) -> None:
    """Guarantee checked for each kind: the entry tells B the run's timeout at hand-off, so B's own timer kills the
    run at its time limit even when the server is stopped (SIGSTOP). A kind that never sent it (or sent it at warm
    time, or sent forever) would leave the run to the server's deadline, which a stopped server never keeps: the
    run would live on until the app's backstop killed the whole server, 3 s later."""
    marker = f"1000.{secrets.randbelow(10**6)}"
    code = SPINNERS[kind].format(marker=marker)
    if kind == "node":
        if shutil.which("node") is None:
            pytest.skip("node is not installed")
        node = resolve_program("node", "node")

        await node_run_ready(launcher, node)
        task = asyncio.ensure_future(run_in_box(launcher, _node_spec(node, code, timeout=1.5)))
    else:
        await _ready(launcher, python, kind, 1)
        task = asyncio.ensure_future(run(launcher, python, code, flags=SHAPES[kind], timeout=1.5))
    proc = launcher._proc
    assert proc is not None
    server = proc.pid
    deadline = time.monotonic() + 30
    while not _sleeping(marker):
        assert time.monotonic() < deadline and not task.done(), "the run never started its sleep"
        await asyncio.sleep(0.01)
    os.kill(server, signal.SIGSTOP)
    try:
        while _sleeping(marker):
            assert time.monotonic() < deadline, "the run outlived its time limit"
            await asyncio.sleep(0.01)
        assert _stopped(server), "the run died only with the launcher (the app's backstop), not at its time limit"
    finally:
        os.kill(server, signal.SIGCONT)
    ran = await task
    assert (ran.result.stop, ran.result.warm_kind) == ("timeout", kind)


def _node_spec(node: Program, code: str, *, timeout: float) -> ExecSpec:
    """``node -e CODE`` as the spinner's warm node key has it (its PATH, limits and root)."""
    return ExecSpec(
        argv=(node.executable, "-e", code),
        env={"PATH": "/usr/bin:/bin"},
        timeout=timeout,
        memory_bytes=512 * MiB,
        max_processes=64,
        readonly_paths=node.readonly_paths,
        hidden_paths=node.hidden_paths,
        warm="node",
    )


async def node_run_ready(launcher: Launcher, node: Program) -> None:
    """Ask for a warm node of the spinner's shape (a run), then wait until one is ready."""
    deadline = time.monotonic() + 90
    while (await stats(launcher))["node_ready"] < 1:
        if not (await stats(launcher))["node_warming"]:
            await run_in_box(launcher, _node_spec(node, "0", timeout=30.0))
        assert time.monotonic() < deadline, "no warm node became ready"
        await asyncio.sleep(0.05)


async def test_a_python_run_with_the_user_site_on_never_takes_the_stub(launcher: Launcher, python: Program) -> None:
    """Hole found: without -s (or -I, -S) Python puts the user's site-packages, ~/.local/... in the box, on
    sys.path as it starts. The stub's interpreter started in an empty box, so a warm run could not import what the
    run's files put there, where a cold run could. Such a shape now goes to a pre-exec box (the interpreter itself
    starts in the run's box) or runs cold, and looks like the cold run. (The user site is in HOME, a folder of the
    box's /tmp by default; the app's HOME=/work puts it where the run's files are, as before.)"""
    code = "try:\n    import usermod\n    print('imported', usermod.X)\nexcept ImportError:\n    print('missing')"
    files = {f".local/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages/usermod.py": b"X = 42\n"}
    if python.version.split(".")[:2] != [str(v) for v in sys.version_info[:2]]:
        pytest.skip("the box's python is another version than the tests' (its user site folder is named after it)")
    flags = ("-E", "-c")
    env = {"HOME": "/work"}
    cold = await run(launcher, python, code, warm=False, files=files, flags=flags, env=env)
    assert cold.stdout == b"imported 42\n"
    await until_ready(launcher, python, env)  # a python stub is ready: the shape must still not take it
    for _ in range(3):
        pooled = await run(launcher, python, code, files=files, flags=flags, env=env)
        assert pooled.result.warm_kind != "python" and pooled.seen() == cold.seen(), pooled.result


async def test_more_kinds_in_turn_than_the_pool_holds_still_get_warm_runs(python: Program) -> None:
    """Hole found: each run of a kind with no entry evicted an idle entry of a kind asked for less recently, which
    came next: 4 kinds in turn with a pool of 2 got no warm run at all, and every run paid for a warm start nobody
    used (8 kinds, pool 4: twice the launcher side's CPU of no pool). Now a kind's last idle entry goes only for a
    kind asked for twice as often lately, so those warmed first keep serving their runs."""
    launcher = _pooled(2)
    try:
        before = await stats(launcher)
        for i in range(32):
            ran = await run(launcher, python, "print(1)", env={"LC_MAINSDK_TURN": str(i % 4)})
            assert ran.stdout == b"1\n"
            await asyncio.sleep(0.3)  # sporadic: a refill has time to warm
        hits = (await stats(launcher))["python_hits"] - before["python_hits"]
        assert hits >= 4, f"{hits} of 32 runs were warm"
    finally:
        launcher.close()


# Counts a byte string (given in hex, so that only the needle made here holds it) in the process's own memory.
SCAN = r"""
import sys
needle = bytes.fromhex(sys.argv[1])
found = 0
with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:
    for line in maps:
        where, perms = line.split()[:2]
        if 'r' not in perms or '[v' in line:
            continue
        low, high = (int(x, 16) for x in where.split('-'))
        try:
            mem.seek(low)
            found += mem.read(high - low).count(needle)
        except (OSError, ValueError, OverflowError):
            pass
print(found)
"""


async def test_a_run_never_finds_the_code_of_earlier_runs_in_its_interpreters_memory(python: Program) -> None:
    """Hole found: a -c text a key's last two runs both had is compiled ahead by the key's next interpreters (made
    for core's figures wrapper, the same in every run). Through the launcher, that text can be a run's own code:
    a later run with other code took such an interpreter and found the earlier runs' secret in its memory (twice,
    against once cold: its own needle). Now an interpreter given a text ahead serves only runs of that text, and a
    run of another text drops it."""
    launcher = _pooled(1)
    try:
        secret = "sk-" + secrets.token_hex(12)
        earlier = f"api_key = {secret!r}\nprint('done')"
        for _ in range(3):  # the same code, run after run: interpreters warmed next hold it compiled ahead
            assert (await run(launcher, python, earlier)).stdout == b"done\n"
            deadline = time.monotonic() + 60
            while not (await stats(launcher))["python_ready"]:
                assert time.monotonic() < deadline, "no warm interpreter became ready"
                await asyncio.sleep(0.05)
        assert (await stats(launcher))["python_ahead"] == 1
        cold = await run(launcher, python, SCAN, args=(secret.encode().hex(),), warm=False)
        later = await run(launcher, python, SCAN, args=(secret.encode().hex(),))
        assert cold.stdout == later.stdout == b"1\n", (cold.seen(), later.seen(), later.result.warm_kind)
        assert (await stats(launcher))["python_ahead"] == 0  # the streak ended: the one holding it was dropped
    finally:
        launcher.close()
