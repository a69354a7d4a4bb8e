"""Latency of a cell round trip (``session.run_code("x += 1")``) in a warm session on the local driver, and of a
session's first cell (the kernel's start: IPython's import and shell, from the kernel's package set).

Warm cells against two baselines measured in the same run: a session command in the same session
(``session.run("python3", ["-c", "pass"])``, a fresh interpreter per call, what a cell replaces; in rounds of its own
after the cells', since the warm pool's refill after each would weigh on the next row) and, interleaved, a
``session.write`` (one launcher round trip, the floor under any cell, which needs one write). The goal
is a cell under 5 ms at the median, with IPython in the loop.

First cells (``--sessions``, 0 to skip): a new session's first ``run_code("1")`` against, in the same fresh session
and interleaved, a session command that imports IPython and makes its shell (``python3 -c`` with the kernel's
folder on ``sys.path``: what the kernel's start costs at the least) and one that runs ``pass``.

    python benchmarks/cell_latency.py [--rounds 300] [--sessions 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from mainsdk import Sandbox, SandboxDeps
from mainsdk.config import load_config_text

from mainsdk_local import local_sandbox_driver

CONFIG = """
sandbox:
  driver: local
  local: { python: python3 }
  limits: { timeout: 30s, memory: 256MB }
permissions:
  processes: [python3]
"""
GOAL_MS = 5.0


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def summary(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"{name:<42} median {statistics.median(ordered):7.2f} ms   p95 {p95:7.2f} ms   (n={len(ordered)})"


def main() -> None:
    """Measure and print the medians and 95th percentiles."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--sessions", type=int, default=20)
    options = parser.parse_args()
    config = load_config_text(CONFIG)
    sandbox = Sandbox(
        SandboxDeps(config=config, driver=local_sandbox_driver(permissions=config.permissions), load_entrypoints=False)
    )
    cells: list[float] = []
    commands: list[float] = []
    writes: list[float] = []
    with sandbox.create() as session:
        session.run_code("x = 0")
        for _ in range(20):  # warm: the interpreter's first cells, the launcher's spares
            session.run_code("x += 1")
            session.run("python3", ["-c", "pass"])
        time.sleep(0.5)  # the pool's refill after the last command, before any row is timed
        for _ in range(options.rounds):
            cells.append(timed(lambda: session.run_code("x += 1")))
            writes.append(timed(lambda: session.write("w.txt", "x")))
        # The commands in rounds of their own: each has the launcher's warm pool start a python in its place at
        # once, tens of ms of CPU that would land on the next rows (the write, the next cell).
        for _ in range(options.rounds):
            commands.append(timed(lambda: session.run("python3", ["-c", "pass"])))
        final = session.run_code("x").text
    first: list[float] = []
    shells: list[float] = []
    bare: list[float] = []
    shell = (
        "import sys; sys.path.append('/opt/mainsdk/kernel')\n"
        "from IPython.core.interactiveshell import InteractiveShell\nInteractiveShell.instance(colors='nocolor')"
    )
    for _ in range(options.sessions):
        with sandbox.create() as fresh:
            first.append(timed(lambda: fresh.run_code("1")))
            shells.append(timed(lambda: fresh.run("python3", ["-c", shell])))
            bare.append(timed(lambda: fresh.run("python3", ["-c", "pass"])))
    sandbox.close()
    assert final == str(20 + options.rounds), final
    print(summary('cell: run_code("x += 1")', cells))
    print(summary('command: run("python3", ["-c", "pass"])', commands))
    print(summary("write: one launcher round trip", writes))
    median = statistics.median(cells)
    print(
        f"cell / command: {median / statistics.median(commands):.3f}; "
        f"goal {GOAL_MS} ms: {'met' if median < GOAL_MS else 'NOT met'}"
    )
    if first:
        print(summary("first cell: a new session's run_code('1')", first))
        print(summary("command: python3 -c <import IPython, shell>", shells))
        print(summary('command: run("python3", ["-c", "pass"])', bare))
        print(f"first cell / IPython shell command: {statistics.median(first) / statistics.median(shells):.3f}")


if __name__ == "__main__":
    main()
