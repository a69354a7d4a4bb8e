"""Plots from one-shot runs: each figure a run leaves open comes back as a PNG FileRef, with no change to the code."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# matplotlib is not installed in the box here. This stand-in package, given as the run's files, has the calls
# user code makes and the ones the wrapper makes (get_fignums, figure(n).savefig(path, format="png")).
PYPLOT = """
import os
_figures = {}
def figure(number=None):
    number = number or len(_figures) + 1
    _figures.setdefault(number, Figure(number))
    return _figures[number]
class Figure:
    def __init__(self, number): self.number, self.lines = number, []
    def savefig(self, path, format):
        assert format == "png" and os.environ["MPLBACKEND"] == "agg"
        open(path, "wb").write(b"\\x89PNG figure %d %r" % (self.number, self.lines))
def plot(*values): figure(max(_figures) if _figures else None).lines.append(values)
def get_fignums(): return sorted(_figures)
def show(): pass
"""
STANDIN = {"matplotlib/__init__.py": "", "matplotlib/pyplot.py": PYPLOT}


def test_each_open_figure_comes_back_as_a_png(make_sandbox: Callable[..., Any]) -> None:
    sandbox = make_sandbox().sandbox
    code = "import matplotlib.pyplot as plt\nplt.plot(1, 2)\nplt.show()\nplt.figure()\nplt.plot(3)\nprint(__name__)"
    result = sandbox.run(code, files=STANDIN)
    assert result.ok and result.stdout == "__main__\n"
    pngs = {f.name: sandbox.files.read(f) for f in result.files}
    assert pngs == {"figure-1.png": b"\x89PNG figure 1 [(1, 2)]", "figure-2.png": b"\x89PNG figure 2 [(3,)]"}


def test_the_wrapper_changes_nothing_else_the_code_sees(make_sandbox: Callable[..., Any]) -> None:
    sandbox = make_sandbox().sandbox
    code = (
        "import sys\nimport matplotlib.pyplot as plt\n"
        "print(sys.argv, sorted(k for k in globals() if not k.startswith('__')))\n"
        "open('../out/figure-1.png', 'w').write('mine')\nplt.figure()\n1/0"
    )
    result = sandbox.run(code, files=STANDIN)
    assert result.stdout == "['-c'] ['plt', 'sys']\n" and result.exit_code == 1
    assert result.stderr.startswith('Traceback (most recent call last):\n  File "<string>", line 6, in <module>\n')
    assert "_mainsdk" not in result.stderr and result.stderr.endswith("ZeroDivisionError: division by zero\n")
    names = {f.name: sandbox.files.read(f) for f in result.files}
    assert names["figure-1.png"] == b"mine" and names["figure-2.png"].startswith(b"\x89PNG")  # the code's own stays


def test_code_that_does_not_draw_runs_as_it_always_did(make_sandbox: Callable[..., Any]) -> None:
    built = make_sandbox()
    result = built.sandbox.run("import sys; print(sys.argv); 1/0")
    assert result.stdout == "['-c']\n"
    assert result.stderr == (
        "Traceback (most recent call last):\n"
        '  File "<string>", line 1, in <module>\n'
        "ZeroDivisionError: division by zero\n"
    )


def test_long_code_on_stdin_draws_too(make_sandbox: Callable[..., Any]) -> None:
    sandbox = make_sandbox().sandbox
    code = "import matplotlib.pyplot as plt\n" + "#" * 120_000 + "\nplt.figure()\nprint('long')"
    result = sandbox.run(code, files=STANDIN)
    assert result.stdout == "long\n" and [f.name for f in result.files] == ["figure-1.png"]
