"""What the figures wrapper costs a Python run that never imports matplotlib: with it against without it.

Every Python ``sandbox.run`` goes through ``mainsdk.figures.WRAPPER`` (``python3 -E -s -c WRAPPER CODE``).
This measures, interleaved in one process so machine noise hits both alike, the ratio of the medians:

- ``box``: ``sandbox.run(CODE)`` on the local driver, as sent (wrapped), against the same run sent the old
  way (``python3 -E -s -c CODE``, by swapping ``engine.code_command`` for this benchmark only);
- ``bare``: the interpreter alone, ``python3 -E -s -c CODE`` against ``python3 -E -s -c WRAPPER CODE``, in
  wall time and in the child's CPU time (``getrusage``), which machine load disturbs less.

    python benchmarks/figures_hook.py [--rounds 200] [--pool N]

It exits 1 when the box ratio is over ``TARGET_RATIO``.
"""

from __future__ import annotations

import argparse
import functools
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping

from mainsdk import Sandbox, SandboxDeps, engine
from mainsdk.driver import Command
from mainsdk.figures import wrapper

from mainsdk_local import local_sandbox_driver

WRAPPER = wrapper()  # the in-box wrapper's text (mainsdk/kernel/run.py)

CODE = "import json\nprint(json.dumps([1 + 1]))"
TARGET_RATIO = 1.03  # the wrapper may cost a run at most 3% at the median


def _plain(language: str, code: str, timeout: float, env: Mapping[str, str]) -> Command:
    """The command a Python run was before the wrapper."""
    return Command("python3", ("-E", "-s", "-c", code), timeout=timeout, env=env)


def _timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--pool", type=int, default=None, help="the warm pool's size (default: the driver's)")
    args = parser.parse_args(argv)
    driver = local_sandbox_driver() if args.pool is None else local_sandbox_driver(pool=args.pool)
    sandbox = Sandbox(SandboxDeps(driver=driver, load_entrypoints=False))
    wrapped_command = engine.code_command

    def run_box(wrapped: bool) -> None:
        engine.code_command = wrapped_command if wrapped else _plain
        try:
            result = sandbox.run(CODE)
        finally:
            engine.code_command = wrapped_command
        assert result.stdout == "[2]\n", result

    cpu: dict[bool, list[float]] = {False: [], True: []}

    def run_bare(wrapped: bool) -> None:
        args = ["-c", WRAPPER, CODE] if wrapped else ["-c", CODE]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([sys.executable, "-E", "-s", *args], capture_output=True, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu[wrapped].append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)
        assert done.stdout == b"[2]\n"

    times: dict[tuple[str, bool], list[float]] = {(kind, w): [] for kind in ("box", "bare") for w in (False, True)}
    for _ in range(10):  # warm up both paths
        run_box(True)
        run_box(False)
    for index in range(args.rounds):
        order = (True, False) if index % 2 else (False, True)  # which goes first alternates
        for wrapped in order:
            times[("box", wrapped)].append(_timed(functools.partial(run_box, wrapped)))
        for wrapped in order:
            times[("bare", wrapped)].append(_timed(functools.partial(run_bare, wrapped)))
    sandbox.close()
    ratios = {}
    for kind in ("box", "bare"):
        without = statistics.median(times[(kind, False)])
        with_ = statistics.median(times[(kind, True)])
        ratios[kind] = with_ / without
        print(f"{kind}: without {without:.2f} ms, with the wrapper {with_:.2f} ms, ratio {ratios[kind]:.3f}")
    plain_cpu, wrapped_cpu = statistics.median(cpu[False]), statistics.median(cpu[True])
    extra = wrapped_cpu - plain_cpu
    print(f"bare CPU: without {plain_cpu:.2f} ms, with the wrapper {wrapped_cpu:.2f} ms (+{extra:.2f})")
    return 0 if ratios["box"] <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
