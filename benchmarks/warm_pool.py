"""The local driver's warm pool: ``sandbox.run`` python with the pool on and off, against bare starts.

One interleaved run, rounds in a shuffled order (fixed seed), each case in a worker process and
a cpuacct cgroup of its own (``_cost.py``):

- sporadic calls: before every timed call of every case the benchmark pauses (``--pause``,
  untimed), so the pool has refilled, as it has between calls an app makes now and then;
  ``sandbox.run`` python with ``sandbox.local.pool`` at ``--pool`` and at 0, against bare
  ``python3 -I -S -c`` (the floor) and a bare ``-I`` start from an empty venv;
- back to back: ``--batch`` runs one after another (concurrency 1) and 4 at a time, pool on
  and off, against the same bare starts, in runs per second.

It also prints the pool's hits and misses over the whole run, and the resident memory of an idle
warm interpreter (its VmRSS, from /proc). Ratios are of medians measured in this same run.

    python benchmarks/warm_pool.py [--rounds 100] [--pool 4] [--pause 0.3] [--batch 40]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time

from _cost import CODE, Worker, empty_venv, python_program

GOAL_SPORADIC = 0.75  # issue 17: python with a warm pool, sporadic calls: at most 0.75x a bare -I -S start
GOAL_BACK_TO_BACK = 1.0  # back to back: at most 1.0x bare starts


def idle_interpreters_rss_kb() -> list[int]:
    """VmRSS of every warm interpreter waiting for a run (its command line holds the pool's stub)."""
    found: list[int] = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"_mainsdk_pool" not in f.read():
                    continue
            with open(f"/proc/{pid}/status") as status:
                found += [int(line.split()[1]) for line in status if line.startswith("VmRSS:")]
        except OSError:
            continue
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--pool", type=int, default=4)
    parser.add_argument("--pause", type=float, default=0.3, help="untimed seconds before each sporadic call")
    parser.add_argument("--batch", type=int, default=40, help="runs per back-to-back measurement")
    parser.add_argument("--seed", type=int, default=17)
    args = parser.parse_args()

    python = python_program()
    with tempfile.TemporaryDirectory(prefix="warm-pool-venv-") as venv:
        workers = {
            "bare python -I -S": Worker(
                "bare python -I -S", {"kind": "bare", "argv": [python, "-I", "-S", "-c", CODE["python"]]}
            ),
            "bare python -I, empty venv": Worker(
                "bare python -I, empty venv", {"kind": "bare", "argv": [empty_venv(venv), "-I", "-c", CODE["python"]]}
            ),
            "sandbox.run python, pool on": Worker("pool on", {"kind": "sandbox", "pool": args.pool}),
            "sandbox.run python, pool off": Worker("pool off", {"kind": "sandbox", "pool": 0}),
        }
        try:
            for worker in workers.values():  # warm up: page cache, launchers, resolved programs
                for _ in range(5):
                    worker.run("python")
                    time.sleep(args.pause)
            before = workers["sandbox.run python, pool on"].call({"op": "pool"})
            shuffle = random.Random(args.seed)
            names = list(workers)
            times: dict[str, list[float]] = {name: [] for name in workers}
            cpu_before = {name: worker.meter.seconds() for name, worker in workers.items()}
            for _ in range(args.rounds):
                shuffle.shuffle(names)
                for name in names:
                    time.sleep(args.pause)
                    times[name].append(workers[name].run("python"))
            cpu = {name: worker.meter.seconds() - cpu_before[name] for name, worker in workers.items()}
            after = workers["sandbox.run python, pool on"].call({"op": "pool"})
            time.sleep(args.pause)
            idle = idle_interpreters_rss_kb()
            rates: dict[tuple[str, int], list[float]] = {}
            warm_back_to_back = {1: [0, 0], 4: [0, 0]}  # concurrency: [warm, cold] runs with the pool on
            for _ in range(3):
                for concurrency in (1, 4):
                    for name in shuffle.sample(names, len(names)):
                        time.sleep(args.pause)
                        pooled = name == "sandbox.run python, pool on"
                        start = workers[name].call({"op": "pool"}) if pooled else None
                        seconds = workers[name].call(
                            {"op": "batch", "runs": args.batch, "concurrency": concurrency, "language": "python"}
                        )
                        rates.setdefault((name, concurrency), []).append(args.batch / seconds)
                        if start is not None:
                            end = workers[name].call({"op": "pool"})
                            warm_back_to_back[concurrency][0] += end["hits"] - start["hits"]
                            warm_back_to_back[concurrency][1] += end["misses"] - start["misses"]
        finally:
            for worker in workers.values():
                worker.close()

    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"{args.rounds} rounds, sporadic (a {args.pause}s pause before each call), shuffled (seed {args.seed});")
    print(f"python {python}; pool on = sandbox.local.pool {args.pool}")
    print(f"  {'case':<32} {'median ms':>10} {'CPU ms/run':>11}")
    for name in workers:
        print(f"  {name:<32} {medians[name]:10.2f} {cpu[name] / args.rounds * 1000:11.2f}")
    hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
    print(f"pool on: {hits} warm and {misses} cold of the timed runs")
    floor = medians["bare python -I -S"]
    on, off = medians["sandbox.run python, pool on"], medians["sandbox.run python, pool off"]
    verdict = "within" if on / floor <= GOAL_SPORADIC else "ABOVE"
    print(
        f"sporadic: pool on {on / floor:.2f}x bare -I -S ({verdict} the {GOAL_SPORADIC}x goal),"
        f" pool off {off / floor:.2f}x;"
    )
    venv_start = medians["bare python -I, empty venv"]
    print(f"  vs bare -I from an empty venv: pool on {on / venv_start:.2f}x, pool off {off / venv_start:.2f}x")
    if idle:
        print(f"idle warm interpreters: {len(idle)}, VmRSS {statistics.median(idle) / 1024:.1f} MiB each (median)")
    print(f"back to back, {args.batch} runs, runs per second (median of 3):")
    for concurrency in (1, 4):
        rate = {name: statistics.median(rates[(name, concurrency)]) for name in workers}
        bare = rate["bare python -I -S"]
        cells = ", ".join(f"{name} {value:.1f}" for name, value in rate.items())
        ratio_on = bare / rate["sandbox.run python, pool on"]
        verdict = "within" if ratio_on <= GOAL_BACK_TO_BACK else "ABOVE"
        warm, cold = warm_back_to_back[concurrency]
        print(f"  concurrency {concurrency}: {cells}; pool on: {warm} warm, {cold} cold")
        print(f"    time per run, pool on vs bare -I -S: {ratio_on:.2f}x ({verdict} the {GOAL_BACK_TO_BACK}x goal)")


if __name__ == "__main__":
    main()
