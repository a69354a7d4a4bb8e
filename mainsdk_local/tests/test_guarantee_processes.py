"""Code cannot see or touch the host's processes or memory, and nothing it starts outlives its run.

The code runs as an unprivileged user in its own pid namespace; the app's and the launcher's memory are out of
reach (/proc/<pid>/mem, ptrace, process_vm_readv); a background child, a setsid grandchild, a child that
ignores SIGTERM and a run whose launcher is stopped all end with the run.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import errno
import json
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from escape_probes import NUMBERS, SECRET, launcher_server_pids
from mainsdk import AsyncSandbox, Sandbox, SandboxDeps
from mainsdk.config import load_config_text
from mainsdk.hookspecs import hookimpl
from mainsdk_local.driver import LocalDriver
from requires import NAMESPACES


def processes_with(marker: str) -> list[int]:
    """Host pids whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_the_apps_memory_cannot_be_read(sandbox: Sandbox) -> None:
    # Must hold: the code cannot read another process's memory: not the app's, not the launcher's, not the
    # box's init: /proc/<pid>/mem is out of sight, ptrace and process_vm_readv are refused.
    held = SECRET.encode()  # in this process's memory, at a known address
    address = id(held)
    sandbox.run("print(1)")  # the launcher server is up
    pids = (1, os.getpid(), *launcher_server_pids())
    code = f"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True); libc.syscall.restype = ctypes.c_long
def call(name, *args):
    return libc.syscall({NUMBERS}[name], *args), ctypes.get_errno()
out = {{}}
for pid in {pids!r}:
    try:
        with open(f'/proc/{{pid}}/mem', 'rb') as fh:
            fh.seek({address}); out[f'mem {{pid}}'] = fh.read(64).hex()
    except OSError as exc:
        out[f'mem {{pid}}'] = type(exc).__name__
    buf = ctypes.create_string_buffer(64)
    local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 64)
    remote = (ctypes.c_void_p * 2)({address}, 64)
    out[f'process_vm_readv {{pid}}'] = call('process_vm_readv', pid, local, 1, remote, 1, 0)
    out[f'ptrace attach {{pid}}'] = call('ptrace', 16, pid, 0, 0)
out['ptrace traceme'] = call('ptrace', 0, 0, 0, 0)
out['pidfd_getfd'] = call('pidfd_getfd', 0, 0, 0)
for path in ('/dev/mem', '/dev/kmem', '/proc/kcore', '/dev/port'):
    try:
        open(path, 'rb').read(16); out[path] = 'read'
    except OSError as exc:
        out[path] = type(exc).__name__
print(json.dumps(out))
"""
    result = sandbox.run(code)
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert SECRET not in result.stdout and held.hex() not in result.stdout
    for pid in pids:
        assert out[f"mem {pid}"] in ("FileNotFoundError", "PermissionError")
        assert out[f"process_vm_readv {pid}"] == [-1, errno.EPERM]  # the seccomp filter, before any pid lookup
        assert out[f"ptrace attach {pid}"] == [-1, errno.EPERM]
    assert out["ptrace traceme"] == [-1, errno.EPERM]
    assert out["pidfd_getfd"] == [-1, errno.EPERM]
    assert "read" not in (out["/dev/mem"], out["/dev/kmem"], out["/proc/kcore"], out["/dev/port"])


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_host_processes_can_be_neither_seen_nor_signalled(sandbox: Sandbox) -> None:
    # Must hold: the code sees only its own processes, and kill, even kill -9 -1, reaches none of the host's.
    marker = f"1000.{secrets.randbelow(10**6)}"
    victim = subprocess.Popen(["sleep", marker])
    try:
        code = (
            "import os, signal\n"
            "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), flush=True)\n"
            f"for pid in ({victim.pid}, {os.getpid()}):\n"
            "    try:\n        os.kill(pid, signal.SIGKILL); print('killed', flush=True)\n"
            "    except OSError as exc:\n        print(type(exc).__name__, flush=True)\n"
            "os.system('kill -9 -1 2>/dev/null')  # every process it can signal: its own, this one included\n"
        )
        result = sandbox.run(code)
        lines = result.stdout.splitlines()
        assert set(ast.literal_eval(lines[0])) <= {1, 2, 3}
        assert lines[1:3] == ["ProcessLookupError", "ProcessLookupError"]
        assert victim.poll() is None and processes_with(f"sleep\0{marker}") == [victim.pid]
    finally:
        victim.kill()
        victim.wait()


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_a_child_that_ignores_sigterm_dies_at_the_time_limit(sandbox: Sandbox) -> None:
    # Must hold: at the time limit the whole tree dies, including a child that ignores SIGTERM.
    marker = f"1000.{secrets.randbelow(10**6)}"
    code = (
        "import signal, subprocess, time\n"
        "ignore = lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"subprocess.Popen(['/usr/bin/sleep', '{marker}'], preexec_fn=ignore)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(1000)\n"
    )
    started = time.monotonic()
    result = sandbox.run(code, limits={"timeout": "1s"})
    assert result.stop == "timeout" and result.stdout == "up\n" and time.monotonic() - started < 5
    assert processes_with(f"sleep\0{marker}") == []


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_a_setsid_grandchild_does_not_outlive_the_run(sandbox: Sandbox) -> None:
    # Must hold: a grandchild that leaves its parent's session (double fork + setsid) dies when the run ends;
    # the run ends when its own process exits, not when the grandchild would.
    marker = f"1000.{secrets.randbelow(10**6)}"
    code = (
        "import os\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv('/usr/bin/sleep', ['sleep', '{marker}'])\n"
        "    os._exit(0)\n"
        "os.wait()\nprint('parent done')\n"
    )
    started = time.monotonic()
    result = sandbox.run(code)
    assert (result.stdout, result.exit_code, result.stop) == ("parent done\n", 0, None)
    assert time.monotonic() - started < 5
    assert processes_with(f"sleep\0{marker}") == []


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_a_run_that_closes_its_output_and_keeps_running_still_stops(sandbox: Sandbox) -> None:
    # Must hold: closing stdout and stderr does not end the run early nor make it hang: it stops at its
    # time limit, or returns its exit code when it exits.
    started = time.monotonic()
    result = sandbox.run("import os\nos.close(1); os.close(2)\nwhile True: pass", limits={"timeout": "1s"})
    assert result.stop == "timeout" and time.monotonic() - started < 5
    result = sandbox.run("import os, time\nos.close(1); os.close(2)\ntime.sleep(0.3)\nraise SystemExit(7)")
    assert (result.exit_code, result.stop) == (7, None) and result.duration >= 0.3


def processes_matching(marker: str) -> list[int]:
    """Host pids whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(int(entry))
    return found


class _StopsItsLauncherBeforeCollecting(LocalDriver):
    """The real local driver, whose launcher server is stopped (SIGSTOP) just before /out is collected, once."""

    armed = False

    @hookimpl
    async def mainsdk_driver_collect(self, box: Any, max_bytes: int) -> Any:
        if self.armed and self._launcher._proc is not None:
            self.armed = False
            os.kill(self._launcher._proc.pid, signal.SIGSTOP)
        return await super().mainsdk_driver_collect(box, max_bytes)


def test_the_code_runs_in_another_process_as_an_unprivileged_user(sandbox: Sandbox) -> None:
    code = (
        "import os\n"
        "status = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)\n"
        "print(os.getpid() != int(os.environ.get('X', 0)), os.getuid(), status['CapEff'].strip(),"
        " status['NoNewPrivs'].strip())"
    )
    assert sandbox.run(code, env={"X": str(os.getpid())}).stdout == "True 1000 0000000000000000 1\n"


def test_a_background_process_is_gone_after_the_run(sandbox: Sandbox) -> None:
    marker = f"1000.{secrets.randbelow(10**6)}"
    code = f"sleep {marker} & setsid sleep {marker} & ( ( sleep {marker} & ) & ) ; echo started"
    result = sandbox.run(code, "bash")
    assert result.stdout == "started\n" and result.exit_code == 0
    assert processes_matching(f"sleep\0{marker}") == []


def test_the_code_sees_only_its_own_processes(sandbox: Sandbox) -> None:
    out = sandbox.run("import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))").stdout
    assert set(ast.literal_eval(out)) <= {1, 2, 3}  # the box's init, the interpreter, and nothing of the host


async def test_the_async_twin_runs_and_a_cancelled_run_leaves_nothing(async_sandbox: AsyncSandbox) -> None:
    assert (await async_sandbox.run("print(40 + 2)")).stdout == "42\n"
    marker = f"1000.{secrets.randbelow(10**6)}"
    task = asyncio.ensure_future(async_sandbox.run(f"sleep {marker}", "bash"))
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert processes_matching(f"sleep\0{marker}") == []


@pytest.mark.parametrize("phase", ["exec", "collect"])
async def test_a_stopped_launcher_holds_no_run_past_its_timeout(phase: str, local_config: str, tmp_path: Path) -> None:
    config = load_config_text(local_config, source=tmp_path / "main.yaml")
    driver = _StopsItsLauncherBeforeCollecting(permissions=config.permissions, restrict_processes=True)
    sandbox = AsyncSandbox(SandboxDeps(config=config, driver=driver, load_entrypoints=False))
    try:
        assert (await sandbox.run("print(1)")).exit_code == 0
        assert driver._launcher._proc is not None
        server = driver._launcher._proc.pid

        def resume() -> None:  # a watchdog, so that the old code's hang ends and the test can fail
            with contextlib.suppress(ProcessLookupError):
                os.kill(server, signal.SIGCONT)

        watchdog = asyncio.get_running_loop().call_later(20, resume)
        # The code starts a `sleep <marker>` to be found by: a warm interpreter's command line is the pool's stub,
        # never the code (a marker in the code's text would never be seen, and the launcher never stopped).
        marker = f"1000.{secrets.randbelow(10**6)}"
        code = (
            f"import subprocess\nsubprocess.Popen(['/usr/bin/sleep', '{marker}'])\n"
            f"print('up', flush=True)\nwhile {phase == 'exec'}: pass\nprint('done')"
        )
        if phase == "collect":
            # The server collects a one-shot run's /out unasked, right after the run: 40 MB of out files keep it
            # at that (reading and sending them) when the driver's collect hook stops it.
            code += "\nfor i in range(40): open(f'../out/{i:02d}.bin', 'wb').write(bytes(1 << 20))"
        started = time.monotonic()
        try:
            driver.armed = phase == "collect"
            task = asyncio.ensure_future(sandbox.run(code, limits={"timeout": "2s"}))
            if phase == "exec":
                while not processes_matching(f"sleep\0{marker}") and not task.done():
                    await asyncio.sleep(0.02)
                os.kill(server, signal.SIGSTOP)  # the code runs: stop the launcher under it
            result = await task
        finally:
            watchdog.cancel()
            resume()
        elapsed = time.monotonic() - started
        if phase == "exec":
            assert (result.stop, result.stdout, result.exit_code) == ("timeout", "up\n", None)
        else:  # the run ended; its /out was lost with the stalled launcher, which is a cut
            assert (result.stop, result.stdout, result.exit_code) == ("output", "up\ndone\n", 0)
        assert elapsed < 2 + 5, elapsed
        assert processes_matching(f"sleep\0{marker}") == []
        again = await sandbox.run("print('again')")  # the stalled launcher was replaced
        assert (again.stdout, again.stop) == ("again\n", None)
        assert driver._launcher._proc is not None and driver._launcher._proc.pid != server
    finally:
        sandbox.hooks.shutdown()
