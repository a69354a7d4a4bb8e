"""The launcher against real processes: isolation, limits, cleanup, files. No mocks.

Needs Linux; the namespace tests need namespaces to work (they do as root and,
on most distributions, unprivileged).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import collect_model
import pytest
from mainsdk_local.launcher_client import ExecResult, ExecSpec, Launcher, LauncherBox, LauncherError
from mainsdk_local.programs import resolve_program

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the launcher is Linux only")

BASH = "/usr/bin/bash"
MiB = 1 << 20


def _probe_python() -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """The real interpreter behind ``python3`` (not a pyenv shim, not a venv link), what to bind, what to hide.

    The driver's own resolution: run from a tox venv, ``sys.prefix`` is the venv, not the standard library.
    """
    program = resolve_program("python", "python3")
    return program.executable, program.readonly_paths, program.hidden_paths


PYTHON, READONLY, SITE = _probe_python()


def py(code: str, **kw: object) -> ExecSpec:
    """An ExecSpec running ``code`` with the real interpreter, its prefix bound and site-packages hidden."""
    args: dict[str, object] = {
        "argv": (PYTHON, "-I", "-c", code),
        "env": {"LC_ALL": "C.UTF-8"},
        "timeout": 20.0,
        "memory_bytes": 256 * MiB,
        "readonly_paths": READONLY,
        "hidden_paths": SITE,
    }
    args.update(kw)
    return ExecSpec(**args)  # type: ignore[arg-type]


def sh(script: str, **kw: object) -> ExecSpec:
    """An ExecSpec running a bash script."""
    return py("", **{"argv": (BASH, "-c", script), **kw})


class Output:
    """Collects what an exec prints."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.err = bytearray()

    def on_out(self, chunk: bytes) -> None:
        self.out += chunk

    def on_err(self, chunk: bytes) -> None:
        self.err += chunk


async def run(box: LauncherBox, spec: ExecSpec) -> tuple[ExecResult, Output]:
    """Exec ``spec`` and return the result and its output."""
    output = Output()
    result = await box.exec(spec, on_stdout=output.on_out, on_stderr=output.on_err)
    return result, output


def host_pids_of_uid(uid: int) -> list[int]:
    """Processes on the host whose real uid is ``uid`` (from /proc/*/status)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as fh:
                for line in fh:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            found.append(int(name))
                        break
        except OSError:
            continue
    return found


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    """One launcher for the module; each test runs on its own event loop, so this also covers several loops."""
    instance = Launcher()
    if instance.isolation != "namespace":
        instance.close()
        pytest.skip("namespaces are not available here")
    yield instance
    instance.close()


@pytest.fixture
async def box(launcher: Launcher) -> AsyncIterator[LauncherBox]:
    """A fresh 64 MiB box, closed after the test."""
    opened = await launcher.open_box(disk_bytes=64 * MiB)
    yield opened
    await opened.close()


# -- basics ------------------------------------------------------------------


async def test_print(box: LauncherBox, launcher: Launcher) -> None:
    result, output = await run(box, py("print(1 + 1)"))
    assert bytes(output.out) == b"2\n"
    assert result.exit_code == 0 and result.signal is None and result.stop is None
    assert 0 < result.duration < 10
    assert launcher.memory_enforcement in ("cgroup-v1", "cgroup-v2", "rlimit")


async def test_identity_without_privileges(box: LauncherBox) -> None:
    code = (
        "import os, json\n"
        "status = dict(l.split(':', 1) for l in open('/proc/self/status'))\n"
        "print(json.dumps({'ids': [os.getuid(), os.geteuid(), os.getgid(), os.getegid()], 'groups': os.getgroups(),"
        " 'cap': [status[k].strip() for k in ('CapEff', 'CapPrm', 'CapBnd', 'CapAmb')],"
        " 'nnp': status['NoNewPrivs'].strip(), 'cwd': os.getcwd(), 'host': os.uname().nodename}))"
    )
    result, output = await run(box, py(code))
    assert result.exit_code == 0, output.err
    info = json.loads(output.out)
    assert info["ids"] == [1000, 1000, 1000, 1000]
    assert info["groups"] in ([], [1000])
    assert info["cap"] == ["0000000000000000"] * 4
    assert info["nnp"] == "1"
    assert info["cwd"] == "/work"
    assert info["host"] == "sandbox"
    assert box.host_uid >= 1_500_000_000 or os.geteuid() != 0


async def test_own_pid_namespace(box: LauncherBox) -> None:
    code = (
        "import os, json; print(json.dumps([os.getpid(), sorted(int(p) for p in os.listdir('/proc') if p.isdigit())]))"
    )
    result, output = await run(box, py(code))
    assert result.exit_code == 0, output.err
    pid, pids = json.loads(output.out)
    assert pid == 2  # 1 is the namespace's init (the launcher's reaper), then the code
    assert pids == [pid]  # init is root on the host: hidden (hidepid=2), like everything outside


async def test_environment_is_exactly_what_was_passed_with_home_and_tmpdir_in_the_box(box: LauncherBox) -> None:
    # Nothing of the host's: the app's variables, and HOME and TMPDIR in the box's own /tmp unless it names them.
    env = {"LC_ALL": "C.UTF-8", "FOO": "bar", "EMPTY": ""}
    result, output = await run(box, py("import os, json; print(json.dumps(dict(os.environ)))", env=env))
    assert result.exit_code == 0, output.err
    assert json.loads(output.out) == {**env, "HOME": "/tmp/home", "TMPDIR": "/tmp"}
    named = {"LC_ALL": "C.UTF-8", "HOME": "/work", "TMPDIR": ""}
    result, output = await run(box, py("import os, json; print(json.dumps(dict(os.environ)))", env=named))
    assert result.exit_code == 0, output.err
    assert json.loads(output.out) == named


async def test_a_program_under_tmp_is_refused_by_name(box: LauncherBox) -> None:
    # The box's own /tmp is bound over the root's /tmp: a read-only path under it would be hidden, not bound.
    with pytest.raises(ValueError, match="readonly path /tmp/python is under /tmp"):
        await run(box, py("pass", readonly_paths=("/tmp/python",)))


async def test_stdin_is_fed_then_closed(box: LauncherBox) -> None:
    data = os.urandom(300_000)  # larger than a pipe buffer
    code = "import sys, hashlib; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())"
    result, output = await run(box, py(code, stdin=data))
    assert result.exit_code == 0, output.err
    import hashlib

    assert output.out.decode().strip() == hashlib.sha256(data).hexdigest()
    result, output = await run(box, py("import sys; print(repr(sys.stdin.read()))"))
    assert output.out == b"''\n"  # None: /dev/null


# -- what the code cannot see or change ---------------------------------------


async def test_host_files_are_not_visible(box: LauncherBox) -> None:
    marker = f"/root/.mainsdk-launcher-test-{uuid.uuid4().hex}"
    with open(marker, "w") as fh:
        fh.write("secret")
    cwd_file = os.path.abspath(__file__)
    try:
        paths = [marker, "/root/.bashrc", "/etc/shadow", cwd_file, os.getcwd(), "/sys/class/net", "/proc/1/mountinfo"]
        code = (
            "import json, os, sys\n"
            "seen = {}\n"
            "for p in sys.argv[1:]:\n"
            "    try:\n"
            "        seen[p] = open(p).read()[:20] if os.path.isfile(p) else os.listdir(p)\n"
            "    except OSError as exc:\n"
            "        seen[p] = type(exc).__name__\n"
            "print(json.dumps([seen, open('/etc/passwd').read(), open('/etc/hostname').read(), os.listdir('/root')]))"
        )
        spec = py(code)
        spec = py(code, argv=(*spec.argv, *paths))
        result, output = await run(box, spec)
        assert result.exit_code == 0, output.err
        seen, passwd, hostname, root_entries = json.loads(output.out)
        for path in paths:
            assert seen[path] in ("FileNotFoundError", "PermissionError"), (path, seen[path])
        assert "sandbox:x:1000:1000" in passwd and "root:x:0:0" in passwd
        assert passwd.count("\n") <= 3  # generated, not the host's
        assert hostname == "sandbox\n"
        assert root_entries in ([".pyenv"], [])  # only the parents of the bound interpreter prefix
    finally:
        os.unlink(marker)


async def test_site_packages_are_hidden(box: LauncherBox) -> None:
    if not SITE:
        pytest.skip("the interpreter has no site-packages")
    code = "import os, sys, json; print(json.dumps([os.listdir(p) for p in sys.argv[1:]]))"
    result, output = await run(box, py(code, argv=(PYTHON, "-I", "-c", code, *SITE)))
    assert result.exit_code == 0, output.err
    assert all(listing == [] for listing in json.loads(output.out))


async def test_only_work_out_and_tmp_are_writable(box: LauncherBox) -> None:
    code = r"""
import json, os
res = {}
for d in ['/', '/usr', '/etc', '/dev', '/proc', '/root', '/bin/', '/usr/lib', '/work', '/out', '/tmp', '/var/tmp']:
    try:
        with open(os.path.join(d, 'probe'), 'w') as fh:
            fh.write('x')
        res[d] = 'ok'
    except OSError as exc:
        res[d] = type(exc).__name__
ro = {}
for line in open('/proc/self/mountinfo'):
    fields = line.split()
    ro[fields[4]] = 'ro' in fields[5].split(',')
st = {p: bool(os.statvfs(p).f_flag & os.ST_RDONLY) for p in ['/', '/usr', '/etc', '/work', '/out', '/tmp']}
print(json.dumps([res, ro, st]))
"""
    result, output = await run(box, py(code))
    assert result.exit_code == 0, output.err
    writes, mounts, statvfs = json.loads(output.out)
    assert writes.pop("/work") == "ok"
    assert writes.pop("/out") == "ok"
    assert writes.pop("/tmp") == "ok"  # the box's own, on its tmpfs (test_guarantee_filesystem.py)
    assert all(outcome != "ok" for outcome in writes.values()), writes
    assert statvfs == {"/": True, "/usr": True, "/etc": True, "/work": False, "/out": False, "/tmp": False}
    writable = {point for point, is_ro in mounts.items() if not is_ro}
    allowed = {"/work", "/out", "/tmp", "/proc"} | {f"/dev/{d}" for d in ("null", "zero", "full", "random", "urandom")}
    assert writable <= allowed, writable - allowed
    assert await box.read_file("probe") == b"x"
    assert await box.read_file("../out/probe") == b"x"


async def test_no_nested_namespaces_and_own_keyring(box: LauncherBox) -> None:
    if os.uname().machine != "x86_64":
        pytest.skip("keyctl syscall number is for x86_64")
    code = (
        "import ctypes, json, subprocess\n"
        "libc = ctypes.CDLL(None, use_errno=True); libc.syscall.restype = ctypes.c_long\n"
        "unshare = subprocess.run(['/usr/bin/unshare', '--user', '--map-root-user', '/usr/bin/true']).returncode\n"
        "print(json.dumps([unshare, libc.syscall(250, 0, -3, 0), ctypes.get_errno()]))"
    )
    result, output = await run(box, py(code))
    assert result.exit_code == 0, output.err
    unshare, keyring, err = json.loads(output.out)
    assert unshare != 0 and b"unshare failed" in output.err  # max_user_namespaces is 0 inside
    # The seccomp filter refuses keyctl outright (EPERM); before it, C joined a new session keyring anyway.
    assert (keyring, err) == (-1, 1)


async def test_no_network(box: LauncherBox) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        code = (
            "import socket, json, sys\n"
            "try:\n"
            "    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=2).close()\n"
            "    outcome = 'connected'\n"
            "except OSError as exc:\n"
            "    outcome = type(exc).__name__\n"
            "print(json.dumps([outcome, [n for _, n in socket.if_nameindex()]]))"
        )
        result, output = await run(box, py(code, argv=(PYTHON, "-I", "-c", code, str(port))))
        assert result.exit_code == 0, output.err
        outcome, interfaces = json.loads(output.out)
        assert outcome == "ConnectionRefusedError"  # its own loopback, with nothing listening
        assert interfaces == ["lo"]
    finally:
        listener.close()


# -- limits ------------------------------------------------------------------


async def test_timeout(box: LauncherBox) -> None:
    result, _ = await run(box, py("while True: pass", timeout=1.0))
    assert result.stop == "timeout"
    assert result.exit_code is None and result.signal == 9
    assert 0.9 <= result.duration < 3.0


async def test_memory_limit(box: LauncherBox, launcher: Launcher) -> None:
    code = "x = b'x' * (200 * 1024 * 1024); print(len(x))"
    result, output = await run(box, py(code, memory_bytes=64 * MiB))
    assert result.stop == "memory", (result, output.err[-500:])
    assert result.exit_code != 0
    assert output.out == b""


async def test_limits_change_between_execs(box: LauncherBox) -> None:
    # Spares are prepared with the last exec's limits; a different limit must still apply.
    code = "x = b'x' * (150 * 1024 * 1024); print('ok')"
    for memory, fits in ((64 * MiB, False), (256 * MiB, True), (64 * MiB, False), (256 * MiB, True)):
        await asyncio.sleep(0.1)  # let a spare be prepared with the previous limits
        result, output = await run(box, py(code, memory_bytes=memory))
        assert (result.stop is None) == fits, (memory, result, output.err[-300:])
        assert (output.out == b"ok\n") == fits


async def test_fork_bomb_is_contained(box: LauncherBox) -> None:
    start = time.monotonic()
    # The shell itself stays, so the bomb runs against pids.max until the deadline.
    result, _ = await run(box, sh(":(){ :|:& };:; sleep 30", max_processes=64, timeout=2.0))
    assert time.monotonic() - start < 15
    assert result.stop == "timeout"
    assert host_pids_of_uid(box.host_uid) == []
    result, output = await run(box, py("print('still fine')"))
    assert output.out == b"still fine\n"


async def test_process_limit(box: LauncherBox) -> None:
    code = r"""
import os, time
n = 0
try:
    while n < 100:
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        n += 1
except OSError as exc:
    print(n, exc.errno)
"""
    result, output = await run(box, py(code, max_processes=8))
    assert result.exit_code == 0, output.err
    forked, err = output.out.split()
    assert int(forked) < 8 and int(err) == 11  # EAGAIN from the pids limit
    assert host_pids_of_uid(box.host_uid) == []


async def test_nothing_survives_a_run(box: LauncherBox) -> None:
    background = "sleep 1000 & setsid sleep 1000 & (sleep 1000 &) ; echo started"
    result, output = await run(box, sh(background))
    assert output.out == b"started\n" and result.exit_code == 0
    assert host_pids_of_uid(box.host_uid) == []
    double_fork = r"""
import os, signal, time
if os.fork() == 0:
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.fork() == 0:
        time.sleep(1000)
    os._exit(0)
time.sleep(0.2)
print('parent done')
"""
    result, output = await run(box, py(double_fork))
    assert output.out == b"parent done\n"
    assert host_pids_of_uid(box.host_uid) == []


async def test_large_output_arrives_complete(box: LauncherBox) -> None:
    size = 10 * MiB
    code = f"import sys; sys.stdout.buffer.write(b'x' * {size}); sys.stderr.write('done')"
    chunks: list[int] = []
    err = bytearray()
    result = await box.exec(py(code), on_stdout=lambda c: chunks.append(len(c)), on_stderr=err.extend)
    assert result.exit_code == 0
    assert sum(chunks) == size
    assert len(chunks) > 1  # streamed, not buffered whole
    assert err == b"done"


async def test_closed_stdout_is_still_waited_for(box: LauncherBox) -> None:
    code = "import os, time; os.close(1); time.sleep(0.5); raise SystemExit(3)"
    result, _ = await run(box, py(code))
    assert result.exit_code == 3
    assert result.duration >= 0.5


async def test_cancel_kills_the_tree(box: LauncherBox) -> None:
    started = asyncio.Event()
    code = (
        "import subprocess, time; subprocess.Popen(['/usr/bin/sleep', '1000']);"
        "print('up', flush=True); time.sleep(1000)"
    )
    task = asyncio.ensure_future(box.exec(py(code), on_stdout=lambda c: started.set(), on_stderr=lambda c: None))
    await asyncio.wait_for(started.wait(), 20)
    assert len(host_pids_of_uid(box.host_uid)) == 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert host_pids_of_uid(box.host_uid) == []
    _, output = await run(box, py("print('again')"))
    assert output.out == b"again\n"


async def test_callback_error_kills_and_propagates(box: LauncherBox) -> None:
    def explode(chunk: bytes) -> None:
        raise RuntimeError("output limit")

    with pytest.raises(RuntimeError, match="output limit"):
        await box.exec(
            py("import time\nwhile True: print('x' * 100, flush=True); time.sleep(0.01)"),
            on_stdout=explode,
            on_stderr=lambda c: None,
        )
    assert host_pids_of_uid(box.host_uid) == []


async def test_setup_failure_is_an_error(box: LauncherBox) -> None:
    with pytest.raises(LauncherError, match="execve"):
        await run(box, py("", argv=("/usr/bin/does-not-exist",)))
    with pytest.raises(ValueError, match="absolute"):
        await run(box, py("", argv=("python3",)))


# -- files -------------------------------------------------------------------


async def test_files_in_and_out(box: LauncherBox) -> None:
    await box.write_file("data/in.txt", b"hello")
    await box.write_file("data/in.txt", b"replaced")
    code = "print(open('data/in.txt').read()); open('../out/result.txt', 'w').write('done')"
    _, output = await run(box, py(code))
    assert output.out == b"replaced\n", output.err
    assert await box.read_file("../out/result.txt") == b"done"
    with pytest.raises(FileNotFoundError):
        await box.read_file("missing.txt")


@pytest.mark.parametrize("path", ["../x", "/abs", "a\0b", "", "a//b", "a/./b", "a/../b", "../out/../x", "../out/"])
async def test_write_file_refuses_bad_paths(box: LauncherBox, path: str) -> None:
    with pytest.raises(ValueError):
        await box.write_file(path, b"x")
    # The server enforces the same rule on its own.
    reply = await box._request({"op": "write", "path": path}, b"x")
    assert reply.header["ok"] is False and reply.header["kind"] == "value"


async def test_files_never_follow_symlinks(box: LauncherBox, tmp_path: object) -> None:
    code = "import os; os.symlink('/etc', 'etc'); os.symlink('/etc/passwd', 'passwd'); os.mkfifo('fifo')"
    result, output = await run(box, py(code))
    assert result.exit_code == 0, output.err
    with pytest.raises(OSError):
        await box.write_file("etc/planted", b"x")
    assert not os.path.exists("/etc/planted")
    with pytest.raises(OSError):
        await box.read_file("passwd")
    with pytest.raises(OSError):
        await box.read_file("fifo")  # not a regular file, and opening it does not block
    await box.write_file("passwd", b"mine")  # replaces the link itself
    assert await box.read_file("passwd") == b"mine"


async def test_collect_out(box: LauncherBox) -> None:
    code = r"""
import os
os.makedirs('../out/sub')
open('../out/a.txt', 'w').write('aaa')
open('../out/sub/b.bin', 'wb').write(b'\0' * 10)
os.symlink('/etc/passwd', '../out/link')
os.mkfifo('../out/fifo')
import stat; os.mknod('../out/sock', stat.S_IFSOCK)  # socket(AF_UNIX) itself is refused by the seccomp filter
"""
    result, output = await run(box, py(code))
    assert result.exit_code == 0, output.err
    found = await box.collect_out(max_bytes=MiB)
    assert [(f.name, f.data) for f in found.files] == [("a.txt", b"aaa"), ("sub/b.bin", b"\0" * 10)]
    assert not found.truncated
    assert dict(found.skipped) == {"link": "symlink", "fifo": "fifo", "sock": "socket"}
    small = await box.collect_out(max_bytes=5)
    assert [f.name for f in small.files] == ["a.txt"] and small.truncated


# -- concurrency and lifecycle -------------------------------------------------


async def test_sixteen_concurrent_execs(launcher: Launcher) -> None:
    async def one(i: int) -> bytes:
        async with await launcher.open_box(disk_bytes=8 * MiB) as b:
            result, output = await run(b, py(f"import time; time.sleep(0.3); print({i})"))
            assert result.exit_code == 0, output.err
            return bytes(output.out)

    start = time.monotonic()
    outs = await asyncio.gather(*(one(i) for i in range(16)))
    assert outs == [f"{i}\n".encode() for i in range(16)]
    assert time.monotonic() - start < 0.3 * 16  # they overlapped


async def test_closing_a_box_kills_its_runs(launcher: Launcher) -> None:
    b = await launcher.open_box(disk_bytes=8 * MiB)
    task = asyncio.ensure_future(run(b, sh("sleep 1000 & sleep 1000")))
    await asyncio.sleep(0.5)
    await b.close()
    with pytest.raises(LauncherError):
        await task
    assert host_pids_of_uid(b.host_uid) == []
    await b.close()  # twice is fine


def test_one_launcher_on_several_loops(launcher: Launcher) -> None:
    results: list[bytes] = []

    def in_thread(i: int) -> None:
        async def go() -> None:
            async with await launcher.open_box(disk_bytes=8 * MiB) as b:
                _, output = await run(b, py(f"print({i})"))
                results.append(bytes(output.out))

        asyncio.run(go())

    threads = [threading.Thread(target=in_thread, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [b"0\n", b"1\n", b"2\n"]


def _server_pids() -> list[int]:
    me = os.getpid()
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmd = fh.read()
            with open(f"/proc/{name}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except OSError:
            continue
        if b"launcher/__main__.py" in cmd and ppid == me:
            pids.append(int(name))
    return pids


async def test_close_leaves_no_server() -> None:
    before = set(_server_pids())
    own = Launcher()
    box = await own.open_box(disk_bytes=MiB)
    await run(box, sh("sleep 1000 &"))
    servers = set(_server_pids()) - before
    assert len(servers) == 1
    uid = box.host_uid
    own.close()
    own.close()
    assert set(_server_pids()) - before == set()
    assert host_pids_of_uid(uid) == []
    with pytest.raises(LauncherError):
        await box.write_file("x", b"")  # its server is gone
    with pytest.raises(LauncherError):
        await own.open_box(disk_bytes=MiB)


# -- weak mode -----------------------------------------------------------------


async def test_weak_mode() -> None:
    weak = Launcher(force_weak=True)
    try:
        assert weak.isolation == "weak"
        async with await weak.open_box(disk_bytes=8 * MiB) as b:
            await b.write_file("in.txt", b"hi")
            spec = ExecSpec(
                argv=(BASH, "-c", "cat in.txt; echo out > ../out/o.txt; sleep 1000 &"),
                env={},
                timeout=5,
                memory_bytes=None,
            )
            result, output = await run(b, spec)
            assert (result.exit_code, bytes(output.out)) == (0, b"hi")
            assert await b.read_file("../out/o.txt") == b"out\n"
            if os.geteuid() == 0:
                assert host_pids_of_uid(b.host_uid) == []
            result, _ = await run(
                b, ExecSpec(argv=(BASH, "-c", "while :; do :; done"), env={}, timeout=1, memory_bytes=None)
            )
            assert result.stop == "timeout"
    finally:
        weak.close()


def _open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


async def test_no_descriptor_leaks(launcher: Launcher) -> None:
    await asyncio.sleep(0.1)
    before = _open_fds()
    for _ in range(3):
        async with await launcher.open_box(disk_bytes=MiB) as b:
            await run(b, py("print(1)", stdin=b"x"))
            await b.write_file("f", b"1")
            await b.read_file("f")
            await b.collect_out(max_bytes=10)
            with pytest.raises(LauncherError):
                await run(b, py("", argv=("/nonexistent",)))
            task = asyncio.ensure_future(run(b, py("import time; time.sleep(100)")))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    assert _open_fds() - before == set()


async def test_server_death_kills_everything_and_restarts() -> None:
    own = Launcher()
    try:
        b = await own.open_box(disk_bytes=MiB)
        started = asyncio.Event()
        task = asyncio.ensure_future(
            b.exec(sh("sleep 1000 & echo up; sleep 1000"), on_stdout=lambda c: started.set(), on_stderr=lambda c: None)
        )
        await asyncio.wait_for(started.wait(), 20)
        assert len(host_pids_of_uid(b.host_uid)) >= 2
        assert own._proc is not None
        os.kill(own._proc.pid, 9)
        with pytest.raises(LauncherError):
            await task
        deadline = time.monotonic() + 5
        while host_pids_of_uid(b.host_uid) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert host_pids_of_uid(b.host_uid) == []  # each run's pid 1 dies with the server
        await b.close()
        async with await own.open_box(disk_bytes=MiB) as again:  # a new server
            _, output = await run(again, py("print('back')"))
            assert output.out == b"back\n"
    finally:
        own.close()


async def test_stale_cgroups_are_removed(launcher: Launcher) -> None:
    if launcher.memory_enforcement != "cgroup-v1":
        pytest.skip("checks the cgroup v1 memory hierarchy")
    with open("/proc/self/cgroup") as fh:
        own = next(line.split(":", 2)[2].strip() for line in fh if line.split(":")[1] == "memory")
    # A server that cannot be alive: no pid is that large.
    stale = f"/sys/fs/cgroup/memory{own.rstrip('/')}/mainsdk-local-999999999-{uuid.uuid4().hex}"
    os.makedirs(f"{stale}/run-1")
    fresh = Launcher()
    try:
        fresh.start()
        assert not os.path.exists(stale)
    finally:
        fresh.close()
        if os.path.exists(stale):
            os.rmdir(f"{stale}/run-1")
            os.rmdir(stale)


async def test_signals_are_default_inside(box: LauncherBox) -> None:
    # The server (Python) ignores SIGPIPE; the code must not inherit that.
    result, output = await run(box, sh("yes | head -c 1 >/dev/null; echo ${PIPESTATUS[0]}"))
    assert result.exit_code == 0
    assert output.out == b"141\n"  # 128 + SIGPIPE


_UNPRIVILEGED_SCRIPT = r"""
import asyncio, json, os, sys
sys.path.insert(0, sys.argv[1])
from mainsdk_local.launcher_client import ExecSpec, Launcher

async def main():
    launcher = Launcher(python=sys.argv[2])
    try:
        async with await launcher.open_box(disk_bytes=1 << 20) as box:
            out = []
            code = "import os, json; print(json.dumps([os.getuid(), os.getpid(), sorted(os.listdir('/'))]))"
            spec = ExecSpec(argv=(sys.argv[2], "-I", "-c", code), env={}, timeout=10, memory_bytes=64 << 20)
            result = await box.exec(spec, on_stdout=out.append, on_stderr=out.append)
            found = [os.getuid(), launcher.isolation, launcher.memory_enforcement, result.exit_code,
                     json.loads(b"".join(out))]
    finally:
        launcher.close()
    # A shared launcher of this user (in its own user namespace too): one server, a kept box reached by tenant.
    folder = os.path.join(sys.argv[1], "shared")
    opener = Launcher(python=sys.argv[2], shared=True, shared_folder=folder)
    other = Launcher(python=sys.argv[2], shared=True, shared_folder=folder)
    try:
        kept = ("ses_" + "1" * 24, "acme", 60.0)
        box = await opener.open_box(disk_bytes=1 << 20, keep=kept)
        await box.write_file("a.txt", b"kept")
        reached = await other.attach_box(kept[0], "acme")
        refused = await other.attach_box(kept[0], "globex")
        found.append([opener.hello["pid"] == other.hello["pid"], (await reached.read_file("a.txt")).decode(), refused])
        await reached.close()
    finally:
        opener.stop_shared()
        opener.close()
        other.close()
    print(json.dumps(found))

asyncio.run(main())
"""


def test_unprivileged_server() -> None:
    """Not root: the server makes its own user namespace and still isolates runs."""
    import pathlib
    import shutil
    import tempfile

    import attr
    import attrs

    import mainsdk_local

    system_python = "/usr/bin/python3.11"
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None or not os.path.exists(system_python):
        pytest.skip("needs root (to switch to an unprivileged uid), setpriv and /usr/bin/python3.11")
    # Not pytest's tmp_path: its parents are private to root, and the unprivileged user must read this.
    base = pathlib.Path(tempfile.mkdtemp(prefix="mainsdk-launcher-test-"))
    try:
        package = base / "mainsdk_local"
        package.mkdir()
        (package / "__init__.py").write_text("")
        source = pathlib.Path(mainsdk_local.__path__[0])
        # The client
        for client in ("launcher_client.py", "launcher_errors.py", "launcher_exec.py", "shared_launcher.py"):
            shutil.copy(source / client, package / client)
        shutil.copytree(source / "launcher", package / "launcher", ignore=shutil.ignore_patterns("__pycache__"))
        for name, location in (("attr", attr.__path__[0]), ("attrs", attrs.__path__[0])):
            shutil.copytree(location, base / name)
        (base / "run.py").write_text(_UNPRIVILEGED_SCRIPT)
        for path in [base, *base.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        (base / "shared").mkdir(mode=0o700)  # the shared launcher's folder: the unprivileged user's own
        os.chown(base / "shared", 65534, 65534)
        argv = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", system_python, "-I"]
        argv += [str(base / "run.py"), str(base), system_python]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/", check=False)
    finally:
        shutil.rmtree(base)
    assert done.returncode == 0, done.stderr
    uid, isolation, memory, exit_code, (inner_uid, inner_pid, root), shared = json.loads(done.stdout)
    assert uid == 65534 and exit_code == 0
    assert shared == [True, "kept", None]
    assert isolation == "namespace"
    assert memory == "rlimit"  # no cgroup of its own to write to
    assert (inner_uid, inner_pid) == (1000, 2)
    assert "root" not in root and "home" not in root


# -- stalls: no box's work delays another box's deadline; every call has a backstop --------

DEEP_TREE = (
    "import os\nos.chdir('../out')\nfor _ in range({depth}):\n    os.mkdir('d'); os.chdir('d')\nopen('bottom', 'w')\n"
)
SPIN = "import subprocess; subprocess.Popen(['/usr/bin/sleep', '1000']); print('up', flush=True)\nwhile True: pass"
OUT_FILES_CAP = 1000  # the documented cap (README, "Out files"); MAX_OUT_FILES in launcher/boxes.py


def _resume(pid: int) -> None:
    """Let a server we stopped go on (a watchdog, so the old code's hang ends and the test can fail)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


async def _spin(box: LauncherBox, timeout: float) -> tuple[asyncio.Future[ExecResult], float]:
    """Start code that spins with a background child; return once it runs, with its start time."""
    up = asyncio.Event()
    started = time.monotonic()
    task = asyncio.ensure_future(
        box.exec(py(SPIN, timeout=timeout), on_stdout=lambda c: up.set(), on_stderr=lambda c: None)
    )
    await asyncio.wait_for(up.wait(), 20)
    return task, started


async def test_a_deep_out_tree_does_not_delay_another_boxs_deadline(launcher: Launcher) -> None:
    # Collecting a depth-3000 tree took the old server ~20 s on its only loop, which also kept deadlines.
    deep = await launcher.open_box(disk_bytes=64 * MiB)
    spinning = await launcher.open_box(disk_bytes=8 * MiB)
    try:
        result, output = await run(deep, py(DEEP_TREE.format(depth=3000)))
        assert result.exit_code == 0, output.err
        task, started = await _spin(spinning, 2.0)
        collect = asyncio.ensure_future(deep.collect_out(max_bytes=MiB))
        result = await task
        elapsed = time.monotonic() - started
        assert result.stop == "timeout"
        assert elapsed < 2.0 + 5, elapsed
        found = await collect
        assert found.truncated and found.files == ()  # cut at the depth cap: the one file is deeper
    finally:
        await deep.close()
        await spinning.close()


async def test_the_deadline_holds_while_the_server_is_stopped() -> None:
    own = Launcher()
    try:
        box = await own.open_box(disk_bytes=MiB)
        assert own._proc is not None
        server = own._proc.pid
        task, started = await _spin(box, 2.0)
        assert len(host_pids_of_uid(box.host_uid)) == 2
        os.kill(server, signal.SIGSTOP)
        watchdog = asyncio.get_running_loop().call_later(20, _resume, server)
        try:
            # B, pid 1 of the run, kills the tree at the deadline by itself, with the server stopped.
            while host_pids_of_uid(box.host_uid) and time.monotonic() < started + 2.0 + 2.5:
                await asyncio.sleep(0.05)
            assert host_pids_of_uid(box.host_uid) == []
            assert _stopped(server)
            # The client's backstop returns the run as stopped at its timeout and drops the stalled server.
            result = await task
            elapsed = time.monotonic() - started
            assert result.stop == "timeout" and result.exit_code is None
            assert elapsed < 2.0 + 5, elapsed
        finally:
            watchdog.cancel()
            _resume(server)
        with pytest.raises(LauncherError):
            await box.write_file("x", b"")  # that box died with its server
        await box.close()
        async with await own.open_box(disk_bytes=MiB) as again:  # a new server
            result, output = await run(again, py("print('back')"))
            assert output.out == b"back\n" and result.exit_code == 0
        assert own._proc is not None and own._proc.pid != server
    finally:
        own.close()


@pytest.mark.parametrize("call", ["write", "collect", "cancel"])
async def test_a_stopped_server_fails_every_call_within_a_grace(call: str) -> None:
    own = Launcher()
    try:
        box = await own.open_box(disk_bytes=MiB)
        assert own._proc is not None
        server = own._proc.pid
        task = None
        if call == "cancel":
            task, _ = await _spin(box, 60.0)
        os.kill(server, signal.SIGSTOP)
        watchdog = asyncio.get_running_loop().call_later(30, _resume, server)
        started = time.monotonic()
        try:
            if call == "write":
                with pytest.raises(LauncherError, match="did not answer"):
                    await box.write_file("x", b"1")
            elif call == "collect":
                with pytest.raises(LauncherError, match="did not answer"):
                    await box.collect_out(max_bytes=MiB)
            else:
                assert task is not None
                task.cancel()  # kill, then wait for the server to confirm the tree is dead: it never does
                with pytest.raises(asyncio.CancelledError):
                    await task
                # The server was killed; each run's B has PDEATHSIG, and the tree dies with B.
                while host_pids_of_uid(box.host_uid) and time.monotonic() < started + 15:
                    await asyncio.sleep(0.02)
                assert host_pids_of_uid(box.host_uid) == []
            assert time.monotonic() - started < 15
        finally:
            watchdog.cancel()
            _resume(server)
        await box.close()
        async with await own.open_box(disk_bytes=MiB) as again:
            _, output = await run(again, py("print('back')"))
            assert output.out == b"back\n"
    finally:
        own.close()


# -- /out collection is bounded: depth, entries, files, header ----------------------------


async def test_collect_stops_at_the_depth_cap(box: LauncherBox) -> None:
    code = DEEP_TREE.format(depth=100) + "os.chdir('/out'); open('top', 'w').write('t')\n"
    result, output = await run(box, py(code))
    assert result.exit_code == 0, output.err
    found = await box.collect_out(max_bytes=MiB)
    assert found.truncated
    assert [(f.name, f.data) for f in found.files] == [("top", b"t")]


async def test_collect_stops_at_the_file_cap_in_name_order(box: LauncherBox) -> None:
    code = "for i in range(5000): open(f'../out/f{i:05d}', 'w').write(str(i))"
    result, output = await run(box, py(code))
    assert result.exit_code == 0, output.err
    found = await box.collect_out(max_bytes=MiB)
    assert found.truncated
    assert len(found.files) == OUT_FILES_CAP
    assert [f.name for f in found.files] == [f"f{i:05d}" for i in range(OUT_FILES_CAP)]
    assert found.files[-1].data == str(OUT_FILES_CAP - 1).encode()


async def test_collect_keeps_its_header_bounded(box: LauncherBox) -> None:
    # 900 names of 250 control characters: each is 1.5 KB of JSON; all of them would pass the 1 MiB frame limit.
    code = (
        "import os\n"
        "for i in range(900): open('../out/%03d' % i + '\\x01' * 250, 'w')\n"
        "for i in range(3000): os.symlink('/etc/passwd', '../out/-link%04d' % i)\n"
    )
    result, output = await run(box, py(code))
    assert result.exit_code == 0, output.err
    found = await box.collect_out(max_bytes=MiB)
    assert found.truncated
    assert 0 < len(found.files) < 900
    assert len(json.dumps([f.name for f in found.files])) <= 600 * 1024
    assert len(found.skipped) <= 101  # at most 100 reasons, then a count of the rest
    _, output = await run(box, py("print('still here')"))
    assert output.out == b"still here\n"


@pytest.mark.parametrize("seed", range(12))
async def test_collect_matches_the_model_on_random_trees(box: LauncherBox, seed: int) -> None:
    # A fixed-seed slice of benchmarks/fuzz_collect.py: names with spaces, tabs, control characters and
    # non-ASCII, 255-byte names, links, FIFOs, chains past the depth bound, byte budgets that cut.
    rng = random.Random(seed)
    tree = collect_model.random_tree(rng)
    max_bytes = rng.choice([MiB, 5000, 200, 0])
    await box.write_file("tree.json", collect_model.tree_json(tree))
    result, output = await run(box, py(collect_model.BUILD))
    assert result.exit_code == 0, output.err
    want = collect_model.expected(tree, max_bytes)
    found = await box.collect_out(max_bytes=max_bytes)
    assert collect_model.disagreement(found, want) is None
