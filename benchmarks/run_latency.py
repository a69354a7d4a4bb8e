"""Latency of ``sandbox.run(code="print(1 + 1)")`` on the local driver against a bare interpreter start.

Both are measured in this one process and run, interleaved, so machine noise
hits them alike; the figure that matters is the ratio of the medians. Two
baselines: the same interpreter with the same flags the sandbox uses
(``-E -s``), and the cheapest start it has (``-E -s -S``, no site module at
all), which is a lower bound for any run. Then the parent's memory growth over
many runs.

    python benchmarks/run_latency.py [--rounds 200] [--memory-runs 1000]

``--compare-with PYTHON`` measures this code against another checkout instead: PYTHON
is the interpreter of a venv where that checkout is installed (for example a git
worktree of the base commit with its own venv). Each side runs ``sandbox.run`` in a
worker process of its own; the rounds alternate between them (and which goes first),
and each worker times its own runs, so both see the same machine:

    python benchmarks/run_latency.py --compare-with /work/wt/base/.venv/bin/python --rounds 400

A bare ``python3 -I -S`` start is timed in the same rounds too, and each side's ratio to it printed.

``--pool N`` gives this code's driver ``local_sandbox_driver(pool=N)`` (the warm pool's size; 0 turns it off),
on both sides of a comparison only where the other code has the option (the old side always runs its default).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from mainsdk import Sandbox, SandboxDeps
from mainsdk_local.programs import resolve_program

from mainsdk_local import local_sandbox_driver

CODE = "print(1 + 1)"
TARGET_RATIO = 1.6
TARGET_GROWTH_MB = 10
TARGET_EXTRA_MS = 0.5  # a change may cost at most this at the median, against the code before it

# A worker for --compare-with: runs sandbox.run once per line on stdin, answers with the milliseconds it took.
_WORKER = """
import json, sys, time
from mainsdk import Sandbox, SandboxDeps
from mainsdk_local import local_sandbox_driver
import mainsdk_local
sandbox = Sandbox(SandboxDeps(driver=local_sandbox_driver(**json.loads(sys.argv[2])), load_entrypoints=False))
code = sys.argv[1]
for _ in range(10):
    sandbox.run(code)
print(json.dumps({"ready": mainsdk_local.__file__}), flush=True)
for line in sys.stdin:
    started = time.perf_counter()
    result = sandbox.run(code)
    elapsed = (time.perf_counter() - started) * 1000
    assert result.stdout == "2\\n", result
    print(json.dumps(elapsed), flush=True)
sandbox.close()
"""


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


class Worker:
    """A process of its own running sandbox.run with the code installed for ``python``."""

    def __init__(self, python: str, options: dict[str, object]) -> None:
        self.proc = subprocess.Popen(
            [python, "-c", _WORKER, CODE, json.dumps(options)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.source = json.loads(self.stdout.readline())["ready"]

    def run(self) -> float:
        self.stdin.write("run\n")
        self.stdin.flush()
        return float(json.loads(self.stdout.readline()))

    def close(self) -> None:
        self.stdin.close()
        self.proc.wait()


def compare(old_python: str, rounds: int, new_options: dict[str, object]) -> None:
    """Median sandbox.run latency of this code against the code installed for ``old_python``, interleaved."""
    workers = {"new": Worker(sys.executable, new_options), "old": Worker(old_python, {})}
    # The floor, in the same rounds: a bare start of the box's interpreter with no site module, timed here.
    bare = [resolve_program("python", "python3").executable, "-I", "-S", "-c", CODE]
    times: dict[str, list[float]] = {name: [] for name in (*workers, "bare -I -S")}
    try:
        for i in range(rounds):
            order = ("new", "old") if i % 2 == 0 else ("old", "new")
            for name in order:
                times[name].append(workers[name].run())
            times["bare -I -S"].append(timed(lambda: subprocess.run(bare, env={}, capture_output=True, check=True)))
    finally:
        for worker in workers.values():
            worker.close()
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"{rounds} rounds, interleaved, each side in its own worker process; new driver options {new_options}")
    for name, worker in workers.items():
        ratio = medians[name] / medians["bare -I -S"]
        print(f"  {name}: median {medians[name]:7.2f} ms, {ratio:.2f}x bare -I -S  ({worker.source})")
    print(f"  bare -I -S: median {medians['bare -I -S']:7.2f} ms")
    extra = medians["new"] - medians["old"]
    verdict = "within" if extra <= TARGET_EXTRA_MS else "ABOVE"
    print(f"  new - old: {extra:+.2f} ms at the median ({verdict} the {TARGET_EXTRA_MS} ms budget)")
    # The same round's two runs saw the same machine: their difference is less noisy than two medians.
    paired = [n - o for n, o in zip(times["new"], times["old"], strict=True)]
    rng = random.Random(0)
    boot = sorted(statistics.median(rng.choices(paired, k=len(paired))) for _ in range(2000))
    low, high = boot[len(boot) // 40], boot[-(len(boot) // 40) - 1]
    print(f"  paired (new - old per round): median {statistics.median(paired):+.2f} ms, 95% [{low:+.2f}, {high:+.2f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--memory-runs", type=int, default=1000)
    parser.add_argument("--compare-with", metavar="PYTHON", help="an interpreter with the old code installed")
    parser.add_argument("--pool", type=int, help="this code's warm pool size (0: off); default: the driver's")
    args = parser.parse_args()
    options: dict[str, object] = {} if args.pool is None else {"pool": args.pool}
    if args.compare_with:
        compare(args.compare_with, args.rounds, options)
        return

    python = resolve_program("python", "python3").executable
    sandbox = Sandbox(SandboxDeps(driver=local_sandbox_driver(**options), load_entrypoints=False))  # type: ignore[arg-type]

    def bare(*flags: str) -> Callable[[], object]:
        argv = [python, *flags, "-c", CODE]
        return lambda: subprocess.run(argv, env={}, capture_output=True, check=True)

    def in_sandbox() -> None:
        result = sandbox.run(CODE)
        assert result.stdout == "2\n", result

    cases = {"sandbox.run": in_sandbox, "bare -E -s": bare("-E", "-s"), "bare -E -s -S": bare("-E", "-s", "-S")}
    for call in cases.values():  # warm up: page cache, the launcher, the resolved interpreter
        for _ in range(10):
            call()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, call in cases.items():
            times[name].append(timed(call))
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"interpreter: {python}; isolation: {sandbox.run(CODE).isolation}; {args.rounds} rounds, interleaved")
    for name, median in medians.items():
        print(f"  {name:<14} median {median:7.2f} ms")
    for baseline in ("bare -E -s", "bare -E -s -S"):
        ratio = medians["sandbox.run"] / medians[baseline]
        verdict = "within" if ratio <= TARGET_RATIO else "ABOVE"
        print(f"  ratio sandbox.run / {baseline}: {ratio:.2f}x ({verdict} the {TARGET_RATIO}x target)")

    gc.collect()
    before = rss_mb()
    for _ in range(args.memory_runs):
        sandbox.run(CODE)
    gc.collect()
    growth = rss_mb() - before
    verdict = "within" if growth <= TARGET_GROWTH_MB else "ABOVE"
    limit = f"{TARGET_GROWTH_MB} MB"
    print(f"  parent RSS growth over {args.memory_runs} runs: {growth:+.1f} MB ({verdict} the {limit} target)")
    sandbox.close()


if __name__ == "__main__":
    main()
