"""Plots from one-shot runs: every matplotlib figure a Python run shows or leaves open comes back as a PNG.

A run whose code names matplotlib (or calls ``.plot(``, as pandas does) runs under a small wrapper:
``python3 -E -s -c <wrapper> <code>``. The wrapper sets ``MPLBACKEND=agg`` (no display in a box), runs the
code as ``__main__`` exactly as ``-c`` would (same globals, ``sys.argv == ['-c']``, tracebacks without the
wrapper's frame), and at exit saves each open figure to the out folder as ``figure-<n>.png``, so it comes
back with the run's files as a FileRef. Other runs are sent as they always were (and the providers' replay
cassettes, which hold the command, stay valid).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from mainsdk.driver import Command

_DRAWS = re.compile(r"matplotlib|\.plot\(|\bplt\b")

# Standard library only; runs in the box. Every name it needs lives in a function, so the code's globals are
# the ones ``python -c`` gives.
WRAPPER = """\
def _mainsdk_wrapper():
    import atexit, os, sys, traceback
    code = sys.argv.pop(1) if len(sys.argv) > 1 else sys.stdin.read()
    os.environ.setdefault("MPLBACKEND", "agg")
    out = os.path.abspath(os.path.join(os.getcwd(), "..", "out"))

    def save_figures():
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return
        try:
            numbers = list(pyplot.get_fignums())
        except Exception:
            return
        index = 0
        for number in numbers:
            index += 1
            while os.path.lexists(os.path.join(out, "figure-%d.png" % index)):
                index += 1
            try:
                pyplot.figure(number).savefig(os.path.join(out, "figure-%d.png" % index), format="png")
            except Exception as exc:
                sys.stderr.write("mainsdk: figure %d not saved: %s\\n" % (number, type(exc).__name__))

    def hook(kind, value, tb):
        for _ in range(2):  # the wrapper's two frames (its module, its function) are not the code's
            if tb is not None and tb.tb_frame.f_code.co_filename == "<string>" and tb.tb_next is not None:
                tb = tb.tb_next
        traceback.print_exception(kind, value, tb)

    atexit.register(save_figures)
    sys.excepthook = hook
    main = sys.modules["__main__"].__dict__
    del main["_mainsdk_wrapper"]
    exec(compile(code, "<string>", "exec"), main)


_mainsdk_wrapper()
"""


def draws(language: str, code: str) -> bool:
    """Whether a run of ``code`` may draw with matplotlib, so its figures are saved at exit."""
    return language == "python" and _DRAWS.search(code) is not None


def figure_command(code: str, *, on_stdin: bool, timeout: float, env: Mapping[str, str]) -> Command:
    """The command that runs Python ``code`` under the wrapper (the code in argv, or on stdin when long)."""
    if on_stdin:
        return Command("python3", ("-E", "-s", "-c", WRAPPER), stdin=code.encode(), timeout=timeout, env=env)
    return Command("python3", ("-E", "-s", "-c", WRAPPER, code), timeout=timeout, env=env)
