"""What the cells' data forms (``mainsdk/kernel/forms.py``) cost a display: with them against without them.

The kernel's IPython shell makes every display output's bundle with ``DisplayFormatter.format``; the forms add
two formatters to it. This measures, interleaved in one process on a real ``InteractiveShell`` so machine
noise hits both alike, the ratio of the medians of ``format(obj)`` with every form against ``format(obj)``
with the two data forms excluded (IPython skips an excluded formatter before calling it):

- ``value``: a plain value (``1``), what almost every cell's final expression is: the two formatters' type
  checks alone (goal: ratio at most ``TARGET_PLAIN``);
- ``figure``: the tutorial's bar chart (its PNG, text and chart forms against its PNG and text);
- ``frame``: a 1,000 x 10 DataFrame (its HTML, text and data forms against its HTML and text).

    python benchmarks/cell_forms.py [--rounds 300]

Needs IPython, matplotlib and pandas in the venv (the core tox env's pins). Exits 1 when the ``value`` ratio
is over ``TARGET_PLAIN``.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("MPLBACKEND", "Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd  # type: ignore[import-untyped]
from IPython.core.interactiveshell import InteractiveShell
from mainsdk.kernel import forms

TARGET_PLAIN = 1.10  # the forms may cost a plain value's bundle at most 10% at the median
FORMS = ("application/vnd.mainsdk.chart+json", "application/vnd.mainsdk.dataframe+json")


def _timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args(argv)
    shell = InteractiveShell.instance(colors="nocolor")
    forms.register_forms(shell)
    formatter: Any = shell.display_formatter

    figure, ax = plt.subplots()
    ax.bar(["a", "b", "c"], [1, 2, 3], label="count")
    ax.set_title("Counts")
    frame = pd.DataFrame(np.random.default_rng(1).random((1000, 10)), columns=[f"c{i}" for i in range(10)])
    cases = {"value": 1, "figure": figure, "frame": frame}
    rounds = {name: max(args.rounds // (10 if name != "value" else 1), 20) for name in cases}
    print(f"{'case':8} {'with ms':>9} {'without ms':>11} {'ratio':>7}")
    plain_ratio = 0.0
    for name, obj in cases.items():
        formatter.format(obj)  # warm: imports, caches
        with_forms: list[float] = []
        without: list[float] = []
        for i in range(rounds[name]):
            pair = [
                (with_forms, functools.partial(formatter.format, obj)),
                (without, functools.partial(formatter.format, obj, exclude=FORMS)),
            ]
            for times, run in pair if i % 2 == 0 else reversed(pair):
                times.append(_timed(run))
        a, b = statistics.median(with_forms), statistics.median(without)
        ratio = a / b
        if name == "value":
            plain_ratio = ratio
        print(f"{name:8} {a:9.3f} {b:11.3f} {ratio:7.2f}")
    met = plain_ratio <= TARGET_PLAIN
    print(f"plain value ratio {plain_ratio:.2f} (goal <= {TARGET_PLAIN}): {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
