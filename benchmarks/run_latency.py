"""Latency of ``sandbox.run(code="print(1 + 1)")`` on the local driver against a bare interpreter start.

Both are measured in this one process and run, interleaved, so machine noise
hits them alike; the figure that matters is the ratio of the medians. Two
baselines: the same interpreter with the same flags the sandbox uses
(``-E -s``), and the cheapest start it has (``-E -s -S``, no site module at
all), which is a lower bound for any run. Then the parent's memory growth over
many runs.

    python benchmarks/run_latency.py [--rounds 200] [--memory-runs 1000]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import time
from collections.abc import Callable

from mainsdk import Sandbox, SandboxDeps
from mainsdk_local.programs import resolve_program

from mainsdk_local import local_sandbox_driver

CODE = "print(1 + 1)"
TARGET_RATIO = 1.6
TARGET_GROWTH_MB = 10


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--memory-runs", type=int, default=1000)
    args = parser.parse_args()

    python = resolve_program("python", "python3").executable
    sandbox = Sandbox(SandboxDeps(driver=local_sandbox_driver(), load_entrypoints=False))

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
