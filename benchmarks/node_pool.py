"""The warm pool's node kind: ``sandbox.run`` node with the pool on and off, against a bare ``node -e``.

One interleaved run, rounds in a shuffled order (fixed seed), each case in a worker process and a
cpuacct cgroup of its own (``_cost.py``). Before every timed call of every case the benchmark pauses
(``--pause``, untimed), so the pool has refilled, as between the calls of an app that runs code now
and then. Cases: bare ``node -e 'console.log(1 + 1)'`` (the box's own command line, outside any box),
``sandbox.run`` node with ``sandbox.local.pool`` at ``--pool`` and at 0. Then back to back:
``--batch`` runs one after another, each case, in runs per second.

It prints the medians, CPU per run, how many timed runs were warm, an idle warm node's resident
memory, and the ratio against the issue's goal (node with a warm pool: at most 0.5x a bare
``node -e``).

    python benchmarks/node_pool.py [--rounds 60] [--pool 4] [--pause 0.3] [--batch 20]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from _cost import Worker, bare_argv

GOAL = 0.5  # issue 17: node with a warm pool, at most 0.5x a bare node -e


def idle_nodes_rss_kb() -> list[tuple[int, int]]:
    """(VmRSS, RssFile) of every warm node waiting for a run (its command line holds the stub)."""
    found: list[tuple[int, int]] = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"__mainsdk_probe" not in f.read():
                    continue
            with open(f"/proc/{pid}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
            found.append((int(fields["VmRSS"].split()[0]), int(fields["RssFile"].split()[0])))
        except (OSError, KeyError, ValueError):
            continue
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--pool", type=int, default=4)
    parser.add_argument("--pause", type=float, default=0.3, help="untimed seconds before each sporadic call")
    parser.add_argument("--batch", type=int, default=20, help="runs per back-to-back measurement")
    parser.add_argument("--seed", type=int, default=17)
    args = parser.parse_args()

    workers = {
        "bare node -e": Worker("bare node -e", {"kind": "bare", "argv": bare_argv("node")}),
        "sandbox.run node, pool on": Worker("node pool on", {"kind": "sandbox", "pool": args.pool}),
        "sandbox.run node, pool off": Worker("node pool off", {"kind": "sandbox", "pool": 0}),
    }
    pooled = workers["sandbox.run node, pool on"]
    try:
        for worker in workers.values():  # warm up: page cache, launchers, resolved programs, the key's probe
            for _ in range(5):
                worker.run("node")
                time.sleep(args.pause)
        before = pooled.call({"op": "pool"})
        shuffle = random.Random(args.seed)
        names = list(workers)
        times: dict[str, list[float]] = {name: [] for name in workers}
        cpu_before = {name: worker.meter.seconds() for name, worker in workers.items()}
        for _ in range(args.rounds):
            shuffle.shuffle(names)
            for name in names:
                time.sleep(args.pause)
                times[name].append(workers[name].run("node"))
        cpu = {name: worker.meter.seconds() - cpu_before[name] for name, worker in workers.items()}
        after = pooled.call({"op": "pool"})
        time.sleep(args.pause)
        idle = idle_nodes_rss_kb()
        rates: dict[str, list[float]] = {}
        for _ in range(3):
            for name in shuffle.sample(names, len(names)):
                time.sleep(args.pause)
                seconds = workers[name].call({"op": "batch", "runs": args.batch, "concurrency": 1, "language": "node"})
                rates.setdefault(name, []).append(args.batch / seconds)
    finally:
        for worker in workers.values():
            worker.close()

    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"{args.rounds} rounds, sporadic (a {args.pause}s pause before each call), shuffled (seed {args.seed});")
    print(f"pool on = sandbox.local.pool {args.pool}; load average {os.getloadavg()[0]:.1f} at the end")
    print(f"  {'case':<28} {'median ms':>10} {'CPU ms/run':>11}")
    for name in workers:
        print(f"  {name:<28} {medians[name]:10.2f} {cpu[name] / args.rounds * 1000:11.2f}")
    hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
    print(f"pool on: {hits} warm and {misses} cold of the timed runs")
    bare = medians["bare node -e"]
    on, off = medians["sandbox.run node, pool on"], medians["sandbox.run node, pool off"]
    verdict = "within" if on / bare <= GOAL else "ABOVE"
    print(f"sporadic: pool on {on / bare:.2f}x bare node -e ({verdict} the {GOAL}x goal), pool off {off / bare:.2f}x")
    if idle:
        rss = statistics.median(v for v, _ in idle) / 1024
        shared = statistics.median(f for _, f in idle) / 1024
        print(f"idle warm nodes: {len(idle)}, VmRSS {rss:.1f} MiB each (median), of which file pages {shared:.1f} MiB")
    rate = {name: statistics.median(values) for name, values in rates.items()}
    cells = ", ".join(f"{name} {value:.1f}" for name, value in rate.items())
    print(f"back to back, {args.batch} runs, runs per second (median of 3): {cells}")


if __name__ == "__main__":
    main()
