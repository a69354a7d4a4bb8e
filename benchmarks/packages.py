"""Packages in the box on the local driver: the first build, a cached build, and what packages add to a run.

Measured in this one process and run, against baselines measured alongside:

- the first build of the set into an empty cache (a fresh ``XDG_CACHE_HOME``), then the same set asked again
  by a new builder (what every later process pays: a lookup, no install);
- ``sandbox.run("print(1 + 1)")`` with the packages against the same run with ``packages=[]``, in blocks that
  alternate (ABAB...), so machine noise hits both alike; the figure is the ratio of the medians, with a goal of
  at most 1.10 once the set is built. A run that imports a package is also shown, against the bare run, for
  scale (importing costs what the package's import costs; it is not the overhead of having packages).

    python benchmarks/packages.py [--pins six==1.16.0] [--rounds 100] [--block 10] [--cache DIR]

``--pins pandas==2.2.3 matplotlib==3.9.2`` measures the tutorial's chart set (about 60 MB of wheels).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

TARGET_RATIO = 1.10


def timed(call: Callable[[], object]) -> float:
    """Milliseconds ``call`` took."""
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pins", nargs="+", default=["six==1.16.0"])
    parser.add_argument("--rounds", type=int, default=100, help="runs of each kind")
    parser.add_argument("--block", type=int, default=10, help="runs of one kind before switching")
    parser.add_argument("--cache", help="the cache home to use (default: a fresh temporary one)")
    args = parser.parse_args()
    cache_home = args.cache or tempfile.mkdtemp(prefix="mainsdk-bench-cache-")
    os.environ["XDG_CACHE_HOME"] = cache_home  # before the driver reads it

    from mainsdk import Sandbox, SandboxDeps
    from mainsdk.config import load_config_text
    from mainsdk_local.packages import EnvBuilder
    from mainsdk_local.programs import resolve_program

    from mainsdk_local import local_sandbox_driver

    program = resolve_program("python", "python3")
    first = EnvBuilder()
    first_ms = timed(lambda: first.ensure(program, args.pins))
    again = EnvBuilder()
    cached_ms = timed(lambda: again.ensure(program, args.pins))
    print(f"pins: {' '.join(args.pins)}  interpreter: {program.executable}  cache: {cache_home}")
    print(f"first build:  {first_ms / 1000:8.2f} s   ({'built' if first.builds else 'already in the cache'})")
    print(f"cached build: {cached_ms:8.3f} ms  (a new builder, same set: {again.builds} installs)")

    listed = ", ".join(args.pins)
    config = load_config_text(
        f"sandbox:\n  limits: {{ timeout: 60s, memory: 1GB }}\n  packages:\n    python: [{listed}]\n"
    )
    sandbox = Sandbox(SandboxDeps(config=config, driver=local_sandbox_driver(), load_entrypoints=False))
    code = "print(1 + 1)"
    first_module = args.pins[0].split("==")[0].split("[")[0].replace("-", "_")
    importing = f"import {first_module}"
    kinds: dict[str, Callable[[], object]] = {
        "without": lambda: sandbox.run(code, packages=[]),
        "with": lambda: sandbox.run(code),
    }
    for call in kinds.values():  # warm: templates, spares, the interpreter's pages
        for _ in range(3):
            call()
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    while len(times["without"]) < args.rounds:
        for kind, call in kinds.items():
            for _ in range(args.block):
                times[kind].append(timed(call))
    # Apart, after: a heavy import (pandas takes a second) would slow the block that follows it.
    times["import"] = [timed(lambda: sandbox.run(importing)) for _ in range(max(3, args.rounds // 10))]
    sandbox.close()
    medians = {kind: statistics.median(values) for kind, values in times.items()}
    ratio = medians["with"] / medians["without"]
    print(f"run without packages: median {medians['without']:7.2f} ms  ({len(times['without'])} runs)")
    print(f"run with packages:    median {medians['with']:7.2f} ms  ratio {ratio:.3f}x (goal <= {TARGET_RATIO}x)")
    print(f"run importing {first_module}: median {medians['import']:7.2f} ms  (the import's own cost included)")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
