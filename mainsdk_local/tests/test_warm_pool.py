"""The warm pool: Python interpreters exec'd ahead in fresh boxes, each handed one run. Real launcher, no mocks.

Each pitfall of a warm start has a test here: what a run sees is what the cold path shows it
(compared byte for byte against the same exec run cold in the same server), nothing of one run
reaches another, the code cannot reach the control channel, the warm start imports nothing from
/work, the run's own limits hold, and its time limit counts from hand-off.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mainsdk.config import load_config_text
from mainsdk.errors import INVALID_OPTION, ConfigError, SandboxError
from mainsdk.figures import wrapper
from mainsdk_local.config import DEFAULT_POOL, LocalPrograms
from mainsdk_local.launcher_client import ExecResult, ExecSpec, Launcher, LauncherBox
from mainsdk_local.packages import EnvBuilder
from mainsdk_local.programs import Program, resolve_program
from pool_runs import MiB, Ran, pooled_launcher, stats
from warm_python_runs import FLAGS, run, until_ready, warm_run

from mainsdk_local import local_sandbox_driver

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the launcher is Linux only")


@pytest.fixture(scope="module")
def python() -> Program:
    return resolve_program("python", "python3")


@pytest.fixture
def launcher() -> Iterator[Launcher]:
    yield from pooled_launcher(2)


# What a run sees of Python itself. Each is run cold and warm in the same server and must match byte for byte.
LOOKS = {
    "print": "print(1 + 1)",
    "traceback": "def f():\n    raise ValueError('boom')\nf()",
    "syntax error": "print('unclosed'",
    "exit code": "import sys; sys.exit(3)",
    "exit message": "import sys; sys.exit('bye')",
    "keyboard interrupt": "raise KeyboardInterrupt",
    "excepthook": "import sys\nsys.excepthook = lambda *a: print('hooked', a[0].__name__)\n1/0",
    "atexit and threads": (
        "import atexit, threading, time\natexit.register(print, 'atexit')\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()"
    ),
    "argv": "import sys; print(sys.argv, sys.orig_argv[1:])",
    "flags": "import sys; print(sys.flags)",
    "main": (
        "'''doc'''\nx: int = 1\nimport sys\n"
        "print(sorted(globals()), __name__, __doc__, __spec__, __loader__, __package__, __annotations__)"
    ),
    "modules": "import sys; print(sorted(sys.modules))",
    "path": "import sys; print(sys.path)",
    "encoding": (
        "import sys, locale; print(sys.stdout.encoding, sys.stdout.errors, sys.stdin.encoding, "
        "sys.getfilesystemencoding(), locale.getlocale(), locale.setlocale(locale.LC_ALL))"
    ),
    "stdio": (
        "import sys; print([(s.isatty(), s.seekable(), s.line_buffering, s.write_through, s.buffer.raw.mode) "
        "for s in (sys.stdin, sys.stdout, sys.stderr)], sys.stdin.read())"
    ),
    "environ": (
        "import os, subprocess; print(dict(os.environ)); print(subprocess.run(['env'], capture_output=True).stdout)"
    ),
    "cwd and ids": (
        "import os; print(os.getcwd(), os.getuid(), os.getgid(), os.getpid(), os.getppid(), os.listdir('.'))"
    ),
    "signals": "import signal; print([signal.getsignal(s) for s in signal.valid_signals()])",
    "rlimits": (
        "import resource\n"
        "print([resource.getrlimit(getattr(resource, n)) for n in dir(resource) if n.startswith('RLIMIT_')])"
    ),
    "coding cookie": "# -*- coding: latin-1 -*-\nprint('\u00e9')",
    "unicode": "print('\u00e9\u4e2d\U0001f600')",
    "descriptors": "import os; print(sorted(os.listdir('/proc/self/fd')))",
}


@pytest.mark.parametrize("name", sorted(LOOKS))
async def test_a_warm_run_looks_exactly_like_a_cold_one(launcher: Launcher, python: Program, name: str) -> None:
    code = LOOKS[name]
    env = {"FOO": "bar", "PATH": "/usr/bin:/bin"}
    files = {"data.txt": b"some data"}
    cold = await run(launcher, python, code, warm=False, args=("a", "b c"), env=env, files=files)
    assert not cold.result.warm
    warm = await warm_run(launcher, python, code, args=("a", "b c"), env=env, files=files)
    assert warm.seen() == cold.seen()


async def test_a_raising_run_prints_the_same_traceback_bytes(launcher: Launcher, python: Program) -> None:
    code = "import json\ndef inner():\n    json.loads('{')\ninner()"
    cold = await run(launcher, python, code, warm=False)
    warm = await warm_run(launcher, python, code)
    assert cold.result.exit_code == warm.result.exit_code == 1
    assert warm.stderr == cold.stderr
    assert warm.stderr.startswith(b'Traceback (most recent call last):\n  File "<string>", line 4, in <module>\n')
    assert b"_mainsdk" not in warm.stderr


# Core's way to run Python (python3 -E -s -c WRAPPER CODE): warm interpreters compile the wrapper ahead (a -c text a
# key's last two runs both had) and evaluate that code object at hand-off as PyRun_SimpleStringFlags would.
WRAPPED = (*FLAGS, wrapper())
WRAPPED_LOOKS = {
    **LOOKS,
    "wrapped syntax error": "print('unclosed'",
    "syntax warning": "x = 1\nprint(x is 1)",
    "hook that raises": "import sys\nsys.excepthook = None\ndef f():\n    raise ValueError('boom')\nf()",
    "hook missing": "import sys\ndel sys.excepthook\n1/0",
    "last traceback at exit": (
        "import atexit, sys, traceback\n"
        "atexit.register(lambda: (traceback.print_tb(sys.last_traceback), print(sys.last_type, sys.last_value)))\n"
        "def f():\n    raise KeyError('k')\nf()"
    ),
    "frames": (
        "import sys\nf = sys._getframe()\nfor _ in range(3):\n"
        "    c = f.f_code\n"
        "    print(c.co_name, c.co_filename, f.f_lineno, c.co_firstlineno, c.co_flags, len(c.co_code), c.co_names,\n"
        "          c.co_varnames, list(c.co_positions())[:3], c.co_filename is sys._getframe().f_code.co_filename)\n"
        "    f = f.f_back"
    ),
    "system exit in a hook": "import sys\nsys.excepthook = lambda *a: sys.exit(7)\n1/0",
}


async def until_ahead(launcher: Launcher, python: Program) -> None:
    """Until every ready interpreter holds the wrapper compiled ahead (runs of it drain the others)."""
    deadline = time.monotonic() + 90
    while True:
        found = await stats(launcher)
        if found["python_ready"] and found["python_ahead"] == found["python_ready"]:
            return
        assert time.monotonic() < deadline, f"no interpreter held the wrapper compiled ahead in 90 s: {found}"
        if found["python_ready"] or not found["python_warming"]:
            await run(launcher, python, "pass", flags=WRAPPED)
        else:
            await asyncio.sleep(0.05)


async def ready_run(launcher: Launcher, python: Program, code: str) -> Ran:
    """``code`` on a warm interpreter of the plain flags' key, waiting for one without a run of anything else."""
    deadline = time.monotonic() + 60
    while (await stats(launcher))["python_ready"] == 0:
        assert time.monotonic() < deadline, "no warm interpreter became ready in 60 s"
        await asyncio.sleep(0.05)
    ran = await run(launcher, python, code)
    assert ran.result.warm_kind == "python"
    return ran


@pytest.mark.parametrize("name", sorted(WRAPPED_LOOKS))
async def test_a_warm_run_of_the_wrapper_compiled_ahead_looks_exactly_like_a_cold_one(
    launcher: Launcher, python: Program, name: str
) -> None:
    code = WRAPPED_LOOKS[name]
    env = {"FOO": "bar", "PATH": "/usr/bin:/bin"}
    files = {"data.txt": b"some data"}
    cold = await run(launcher, python, code, warm=False, args=("a", "b c"), env=env, files=files, flags=WRAPPED)
    assert not cold.result.warm
    await until_ahead(launcher, python)
    warm = await run(launcher, python, code, args=("a", "b c"), env=env, files=files, flags=WRAPPED)
    assert warm.result.warm_kind == "python"
    assert warm.seen() == cold.seen()


async def test_a_text_whose_compile_prints_is_never_used_ahead(launcher: Launcher, python: Program) -> None:
    # A SyntaxWarning printed while compiling ahead would be missing from the run's stderr: that entry runs the
    # text as PyRun_SimpleStringFlags, which prints it there, as cold.
    code = "x = 1\nprint(x is 1)"
    cold = await run(launcher, python, code, warm=False)
    assert b"SyntaxWarning" in cold.stderr
    for _ in range(2):
        await run(launcher, python, code)  # the key's last two runs had it: entries warmed next compile it ahead
    for _ in range(4):  # each warm run is refilled by an entry that compiles it ahead; the older ones are used up
        await ready_run(launcher, python, code)
    deadline = time.monotonic() + 60
    while (found := await stats(launcher))["python_ready"] < 2 or found["python_warming"]:
        assert time.monotonic() < deadline, found
        await asyncio.sleep(0.05)
    assert found["python_ahead"] == 0
    warm = await run(launcher, python, code)
    assert warm.result.warm_kind == "python"
    assert warm.seen() == cold.seen()


SNOOP = """\
import glob, os, random, sys
print(hash("abc"), random.random(), os.getpid(), id(object()))
print(sorted(glob.glob('/work/*') + glob.glob('/out/*') + glob.glob('/tmp/*') + glob.glob('/tmp/home/*')))
print(os.environ.get('SECRET'))
print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))
print(open('/proc/self/stat').read().split()[21])
open('/work/left-by-' + sys.argv[1], 'w').write('x')
open('/out/out-by-' + sys.argv[1], 'w').write('x')
open('/tmp/tmp-by-' + sys.argv[1], 'w').write('x')
open('/tmp/home/home-by-' + sys.argv[1], 'w').write('x')
"""


async def test_warm_runs_share_nothing(launcher: Launcher, python: Program) -> None:
    first = await warm_run(launcher, python, SNOOP, args=("first",), env={"SECRET": "s3cr3t"})
    second = await warm_run(launcher, python, SNOOP, args=("second",))
    assert first.result.exit_code == second.result.exit_code == 0, (first.stderr, second.stderr)
    lines1, lines2 = first.stdout.decode().splitlines(), second.stdout.decode().splitlines()
    hash1, random1, _, _ = lines1[0].split()
    hash2, random2, _, _ = lines2[0].split()
    assert hash1 != hash2  # a fresh hash secret: each interpreter is its own execve
    assert random1 != random2  # a fresh random state
    assert lines1[1] == lines2[1] == "['/tmp/home']"  # no file of another run, in /work, /out, /tmp or HOME
    assert lines2[2] == "None"  # nor its environment
    assert lines1[3] == lines2[3]  # only its own processes (the same pids in a fresh pid namespace each)
    assert lines1[4] != lines2[4] or first.stdout != second.stdout  # a different process


async def test_the_code_cannot_reach_the_control_channel(launcher: Launcher, python: Program) -> None:
    # Descriptors 3 and up are what the stub had before hand-off (control socket, deadline pipe, start-up pipe).
    code = (
        "import os, socket\n"
        "fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))\n"
        "open_ = []\n"
        "for fd in range(3, 64):\n"
        "    try:\n"
        "        os.fstat(fd)\n"
        "        open_.append(fd)\n"
        "    except OSError:\n"
        "        pass\n"
        "print(fds, open_, flush=True)\n"
        "for fd in range(3, 64):\n"
        "    try:\n"
        "        os.write(fd, b'R' + b'\\0' * 64)\n"
        "    except OSError:\n"
        "        pass\n"
        "os._exit(7)\n"
    )
    cold = await run(launcher, python, code, warm=False)
    warm = await warm_run(launcher, python, code)
    assert warm.stdout == cold.stdout == b"[0, 1, 2, 3] []\n"  # 3: the listing's own descriptor
    assert warm.result.exit_code == 7  # its own exit status, nothing forged


PLANTED = b"import sys; sys.stdout.write('PLANTED ' + __name__ + '\\n'); sys.stdout.flush()\n"
# Everything the stub imports, and what Python would look for at start-up.
PLANTS = ("_socket", "ctypes", "functools", "marshal", "resource", "socket", "os", "sitecustomize", "usercustomize")


async def test_the_warm_start_imports_nothing_from_work(launcher: Launcher, python: Program) -> None:
    files = {f"{name}.py": PLANTED for name in PLANTS}
    files["ctypes/__init__.py"] = PLANTED
    warm = await warm_run(launcher, python, "print('clean')", files=files)
    assert (warm.result.exit_code, warm.stdout, warm.stderr) == (0, b"clean\n", b"")
    # The code itself imports from /work as python -c does: the stub's own imports are forgotten.
    code = "import resource, ctypes, functools\nprint('done')"
    cold = await run(launcher, python, code, warm=False, files=files)
    warm = await warm_run(launcher, python, code, files=files)
    assert warm.seen() == cold.seen()
    assert b"PLANTED" in warm.stdout


async def test_memory_and_process_limits_are_the_runs_own(launcher: Launcher, python: Program) -> None:
    hog = "b = bytearray(160 * 1024 * 1024)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\nprint('held')"
    small = await warm_run(launcher, python, hog, memory=96 * MiB)
    assert small.result.stop == "memory"
    large = await warm_run(launcher, python, hog, memory=512 * MiB)
    assert (large.result.stop, large.stdout) == (None, b"held\n")
    forks = (
        "import os, time\nn = 0\ntry:\n    for _ in range(20):\n        if os.fork() == 0:\n"
        "            time.sleep(2)\n            os._exit(0)\n        n += 1\nexcept OSError as e:\n"
        "    print('refused', e.errno)\nprint(n)"
    )
    cold = await run(launcher, python, forks, warm=False, max_processes=4)
    warm = await warm_run(launcher, python, forks, max_processes=4)
    assert warm.stdout == cold.stdout
    assert warm.stdout.startswith(b"refused")


async def test_the_disk_limit_is_the_runs_own(launcher: Launcher, python: Program) -> None:
    code = (
        "import resource\nprint(resource.getrlimit(resource.RLIMIT_FSIZE))\n"
        "try:\n    open('big', 'wb').write(b'x' * (3 << 20))\nexcept OSError as e:\n    print('refused', e.errno)"
    )
    cold = await run(launcher, python, code, warm=False, disk=2 * MiB)
    warm = await warm_run(launcher, python, code, disk=2 * MiB)
    assert warm.seen() == cold.seen()
    assert warm.stdout.startswith(b"(2097152, 2097152)\nrefused")


async def test_the_time_limit_counts_from_hand_off(launcher: Launcher, python: Program) -> None:
    await until_ready(launcher, python)
    await asyncio.sleep(3)  # the interpreter has waited longer than the run's whole time limit
    ran = await run(launcher, python, "import time; time.sleep(1); print('finished')", timeout=2.5)
    assert ran.result.warm_kind == "python"
    assert (ran.result.stop, ran.stdout) == (None, b"finished\n")
    late = await warm_run(launcher, python, "import time; time.sleep(30)", timeout=1.0)
    assert late.result.stop == "timeout"
    assert late.result.duration < 10


async def test_start_up_variables_that_differ_run_cold(launcher: Launcher, python: Program) -> None:
    await until_ready(launcher, python)
    code = "import sys, os; print(sys.getfilesystemencoding(), sys.flags.utf8_mode, os.environ.get('LC_ALL'))"
    for env in ({"LC_ALL": "C"}, {"LANG": "C.UTF-8"}, {"PYTHONUTF8": "0"}, {"LD_PRELOAD": "/nonexistent.so"}):
        cold = await run(launcher, python, code, warm=False, env=env)
        other = await run(launcher, python, code, env=env)
        assert other.result.warm_kind != "python", env  # no interpreter was started with these
        assert other.seen() == cold.seen()
    # Other variables are the run's own, set at hand-off.
    ran = await warm_run(launcher, python, "import os; print(os.environ['FOO'])", env={"FOO": "bar"})
    assert ran.stdout == b"bar\n"


async def test_only_the_first_exec_of_a_one_shot_box_runs_warm(launcher: Launcher, python: Program) -> None:
    await until_ready(launcher, python)
    session = await run(launcher, python, "print(1)", session=True)
    assert not session.result.warm  # a session's box is never warmed: its files and commands carry on
    box = await launcher.open_box(disk_bytes=MiB, session=False)
    results: list[ExecResult] = []
    try:
        for _ in range(2):
            await until_ready(launcher, python)
            results.append(await _exec(box, python, "print(1)"))
    finally:
        await box.close()
    assert [r.warm_kind for r in results] == ["python", None]
    shapes = (
        (python.executable, "-E", "-s", "-"),
        (python.executable, "-m", "this"),
        (python.executable, "-X", "importtime", "-c", "1"),
    )
    for shape in shapes:
        box = await launcher.open_box(disk_bytes=MiB, session=False)
        try:
            result = await _exec(box, python, "", argv=shape)
        finally:
            await box.close()
        assert result.warm_kind != "python", shape  # the stub refuses it (a pre-exec box may take it)


async def _exec(box: LauncherBox, python: Program, code: str, argv: tuple[str, ...] | None = None) -> ExecResult:
    return await box.exec(
        ExecSpec(
            argv=argv or (python.executable, *FLAGS, code),
            env={},
            timeout=20.0,
            memory_bytes=256 * MiB,
            readonly_paths=python.readonly_paths,
            hidden_paths=python.hidden_paths,
            warm="python",
        ),
        on_stdout=lambda chunk: None,
        on_stderr=lambda chunk: None,
    )


async def test_the_pool_is_bounded_by_its_size(launcher: Launcher, python: Program) -> None:
    await asyncio.gather(*(run(launcher, python, "import time; time.sleep(0.5)") for _ in range(6)))
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        seen = await stats(launcher)
        assert seen["ready"] + seen["warming"] <= 2
        await asyncio.sleep(0.1)


async def test_pool_zero_turns_it_off(python: Program) -> None:
    launcher = Launcher(pool=0)
    try:
        for _ in range(3):
            ran = await run(launcher, python, "print(1)")
            assert (ran.result.warm, ran.stdout) == (False, b"1\n")
            await asyncio.sleep(0.3)
        assert (await stats(launcher))["ready"] == 0
    finally:
        launcher.close()


def test_a_bad_pool_size_is_refused_by_name() -> None:
    with pytest.raises(SandboxError) as caught:
        local_sandbox_driver(pool=-1)
    assert caught.value.code == "MAIN-SANDBOX-0001"
    assert "pool" in str(caught.value)
    with pytest.raises(ValueError, match="pool"):
        Launcher(pool=1000)


def test_sandbox_local_pool_is_read_and_checked_with_its_line() -> None:
    config = load_config_text("sandbox:\n  driver: local\n  local: { pool: 0 }\n")
    assert config.sandbox.section("local", LocalPrograms).pool == 0
    assert load_config_text("sandbox:\n  driver: local\n").sandbox.section("local", LocalPrograms).pool == DEFAULT_POOL
    for bad in ("-1", "65", "yes", "'2'"):
        with pytest.raises(ConfigError) as caught:
            load_config_text(f"sandbox:\n  driver: local\n  local: {{ pool: {bad} }}\n")
        [problem] = caught.value.problems
        assert (problem.code, problem.line) == (INVALID_OPTION, 3)
        assert "sandbox.local.pool" in f"{problem.key}: {problem.message}"


async def test_an_interpreter_that_prints_as_it_starts_is_never_handed_a_run(
    launcher: Launcher, python: Program
) -> None:
    # Without -E, PYTHONCOERCECLOCALE=warn under LC_ALL=C makes Python print a warning as it starts: a warm
    # interpreter would have printed it before any run, so this kind must always start cold, warning included.
    env = {"LC_ALL": "C", "PYTHONCOERCECLOCALE": "warn"}
    for _ in range(4):
        ran = await run(launcher, python, "print(1)", env=env, flags=("-s", "-c"))
        assert ran.result.warm_kind != "python"  # a pre-exec box may take it: its interpreter starts at hand-off
        assert ran.stdout == b"1\n"
        assert ran.stderr.startswith(b"Python runtime initialized with LC_CTYPE=C")
        await asyncio.sleep(0.5)
    assert (await stats(launcher))["python_ready"] == 0


async def test_the_pool_shrinks_when_idle(python: Program) -> None:
    launcher = Launcher(pool=2, pool_idle=1.0)
    try:
        await until_ready(launcher, python)
        deadline = time.monotonic() + 20
        while (seen := await stats(launcher))["ready"] + seen["warming"]:
            assert time.monotonic() < deadline, f"idle warm interpreters were kept: {seen}"
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.5)  # nobody asks: none is warmed again
        seen = await stats(launcher)
        assert seen["ready"] + seen["warming"] == 0
    finally:
        launcher.close()


async def test_a_package_set_gets_warm_interpreters_of_its_own(
    launcher: Launcher, python: Program, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not python.hidden_paths:
        pytest.skip("this python has no site-packages folder to put packages in")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    site = EnvBuilder().ensure(python, ["six==1.16.0"])
    overlays = ((site, python.hidden_paths[0]),)
    code = "import importlib.util\nprint(importlib.util.find_spec('six') is not None)"
    with_six = await warm_run(launcher, python, code, overlays=overlays)
    assert with_six.stdout == b"True\n"
    # The pool keys on the root: interpreters warmed for the package set are never handed a run without it,
    # warm or cold, and the runs without it get warm interpreters of their own.
    warm = 0
    deadline = time.monotonic() + 60
    while warm < 2:
        assert time.monotonic() < deadline, "runs without the package set never ran warm"
        without = await run(launcher, python, code)
        assert without.stdout == b"False\n"
        warm += without.result.warm_kind == "python"
        await asyncio.sleep(0.3)
