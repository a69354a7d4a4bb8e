"""The figures wrapper runs code exactly as ``python -c`` and ``python -`` do, on every interpreter found here.

Each case runs in a real interpreter twice, plainly and under the wrapper, and must give the same stdout,
stderr and exit status (tracebacks, ``sys.argv``, ``__main__``, line numbers, ``SystemExit``, a syntax error,
the code's own ``sys.excepthook``). The local suite checks the same through the box and with real matplotlib.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mainsdk.driver import Collected, OutFile
from mainsdk.engine import ARGV_CODE_LIMIT, code_command
from mainsdk.figures import FOLDER, MAX_FIGURES, PNG_SIGNATURE, take_figures, wrapper

WRAPPER = wrapper()  # the in-box wrapper's text (mainsdk/kernel/run.py)

# Every CPython 3.10 or later this machine has (pyenv's, Debian's, the one running the tests). Before 3.10 the
# old parser places an unexpected end of file read from stdin one line further than compile() does.
_FOUND = [sys.executable, "/usr/bin/python3", *glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3"))]
INTERPRETERS = sorted(
    {
        os.path.realpath(path)
        for path in _FOUND
        if os.path.exists(path) and not any(old in path for old in ("/3.6.", "/3.7.", "/3.8.", "/3.9."))
    }
)


CASES = (
    "import sys\nprint(sys.argv, __name__, list(globals()))",
    "x = 1\ndef f():\n    return 1 / 0\n\nf()",
    "def f():\n    raise ValueError('x')\n\ntry:\n    f()\nexcept ValueError as e:\n    raise KeyError('k') from e",
    "x = (",
    "def f(:\n    pass",
    "import sys; print('out'); sys.exit(3)",
    "import sys; sys.exit('bye')",
    "exit(4)",
    "raise KeyboardInterrupt",
    "import sys\ndef hook(t, v, tb):\n    import traceback; print(''.join(traceback.format_tb(tb)))\n"
    "sys.excepthook = hook\n1/0",
    "import traceback\ntry:\n    1/0\nexcept Exception:\n    traceback.print_exc()",
    "import atexit\natexit.register(print, 'bye')\nprint('hi')",
    "from __future__ import annotations\nx: int = 1\nprint(__annotations__)",
    "import __main__\nprint(__main__.__dict__ is globals(), __spec__, __loader__.__name__, __doc__)",
    "import os; print('a', flush=True); os._exit(5)",
)


def _run(interpreter: str, args: list[str], stdin: bytes, cwd: Path) -> tuple[bytes, bytes, int]:
    done = subprocess.run(
        [interpreter, "-E", "-s", *args], input=stdin, capture_output=True, check=False, cwd=cwd, timeout=60
    )
    return done.stdout, done.stderr, done.returncode


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A work folder beside an out folder, as a box has them."""
    (tmp_path / "out").mkdir()
    (tmp_path / "work").mkdir()
    return tmp_path / "work"


@pytest.mark.parametrize("interpreter", INTERPRETERS)
def test_code_in_argv_runs_as_python_c_runs_it(interpreter: str, work: Path) -> None:
    for code in CASES:
        plain = _run(interpreter, ["-c", code], b"", work)
        wrapped = _run(interpreter, ["-c", WRAPPER, code], b"", work)
        assert wrapped == plain, (interpreter, code)
    assert os.listdir(work.parent / "out") == []  # nothing drew: no figures folder


@pytest.mark.parametrize("interpreter", INTERPRETERS)
def test_code_on_stdin_runs_as_python_dash_runs_it(interpreter: str, work: Path) -> None:
    for code in CASES:
        plain = _run(interpreter, ["-"], code.encode(), work)
        wrapped = _run(interpreter, ["-c", WRAPPER], code.encode(), work)
        assert wrapped == plain, (interpreter, code)


def test_every_python_run_goes_through_the_wrapper_whatever_its_text() -> None:
    short = code_command("python", "print(1)", 5.0, {})
    assert (short.program, short.args) == ("python3", ("-E", "-s", "-c", WRAPPER, "print(1)"))
    long = code_command("python", "#" * (ARGV_CODE_LIMIT + 1), 5.0, {})
    assert long.args == ("-E", "-s", "-c", WRAPPER) and long.stdin == b"#" * (ARGV_CODE_LIMIT + 1)
    assert code_command("bash", "echo 1", 5.0, {}).args == ("-c", "echo 1")  # only python is wrapped


def test_the_figures_folder_is_split_from_the_codes_files_in_drawing_order() -> None:
    png = PNG_SIGNATURE + b"x"
    collected = Collected(
        files=(
            OutFile("chart.png", png),
            OutFile(f"{FOLDER}/10.png", png + b"10"),
            OutFile(f"{FOLDER}/2.png", png + b"2"),
            OutFile(f"{FOLDER}/02.png", png),  # a name the wrapper never writes
            OutFile(f"{FOLDER}/3.png", b"GIF89a"),  # not a PNG
            OutFile(f"{FOLDER}/sub/4.png", png),
        ),
        skipped=((f"{FOLDER}/11.png", "past limits.files"), ("big.bin", "past limits.files")),
    )
    figures = take_figures(collected)
    assert figures.pngs == (png + b"2", png + b"10")
    assert figures.dropped == 4  # 02.png, 3.png, sub/4.png, and 11.png the driver left out
    assert figures.collected.files == (OutFile("chart.png", png),)
    assert figures.collected.skipped == (("big.bin", "past limits.files"),)
    many = Collected(files=tuple(OutFile(f"{FOLDER}/{n}.png", png) for n in range(1, MAX_FIGURES + 6)))
    assert (len(take_figures(many).pngs), take_figures(many).dropped) == (MAX_FIGURES, 5)


def test_the_hook_is_set_up_only_when_matplotlib_is_imported(work: Path) -> None:
    # A run that never imports matplotlib pays for a name check per import, not for compiling the hook: the
    # finder at the head of sys.meta_path only becomes a loader (exec_module) once a matplotlib name is asked.
    code = (
        "import sys, json\nfinder = sys.meta_path[0]\nprint(hasattr(finder, 'exec_module'))\n"
        "try:\n    import matplotlib\nexcept ImportError:\n    pass\nprint(hasattr(finder, 'exec_module'))"
    )
    out, err, status = _run(sys.executable, ["-c", WRAPPER, code], b"", work)
    assert (out, err, status) == (b"False\nTrue\n", b"", 0)
