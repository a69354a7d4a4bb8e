"""Runs per second and CPU per run of ``sandbox.run`` on the local driver, against bare starts, in one run.

For each concurrency (1, 2, 4 and 16 by default) every case does ``--runs`` runs of a
one-line python program, that many at a time, in batches interleaved with the other
cases (shuffled, fixed seed), each case in a worker process and a cpuacct cgroup of its
own (``_cost.py``). Cases: ``sandbox.run`` with this checkout's code, with its warm pool off (the
cold path) and at the driver's default, and bare starts of
the same interpreter: ``-I -S`` (the floor), ``-I`` from an empty venv, and bubblewrap
(``bwrap --unshare-all``) around the box's own command line. Throughput is runs over the
median batch's seconds; CPU per run is the cgroup's CPU over all of a case's runs at that
concurrency (launcher, spares, boxes, the app itself).

Then the memory of a long-lived app: the worker's RSS (the "parent", the app) and its
launcher server's, before and after ``--memory-runs`` more runs.

    python benchmarks/throughput.py [--runs 32] [--batches 5] [--concurrency 1,2,4,16] [--memory-runs 1000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile

from _cost import CODE, Worker, bare_argv, bwrap_argv, empty_venv, python_program

TARGET_CPU = 1.5  # issue 17: CPU per run at most 1.5x a bare start's
TARGET_RSS_MB = 10  # issue 17: parent RSS growth over 1,000 runs under 10 MB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=32, help="runs per batch")
    parser.add_argument("--batches", type=int, default=5, help="batches per case and concurrency")
    parser.add_argument("--concurrency", default="1,2,4,16")
    parser.add_argument("--memory-runs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=17)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]

    python = python_program()
    with tempfile.TemporaryDirectory(prefix="throughput-venv-") as venv:
        cases: dict[str, dict[str, object]] = {
            "sandbox.run": {"kind": "sandbox", "pool": 0},
            "sandbox.run, warm pool": {"kind": "sandbox"},
            "bare -I -S": {"kind": "bare", "argv": [python, "-I", "-S", "-c", CODE["python"]]},
            "bare -I, empty venv": {"kind": "bare", "argv": [empty_venv(venv), "-I", "-c", CODE["python"]]},
        }
        wrapped = bwrap_argv(bare_argv("python"))
        if wrapped is not None:
            cases["bwrap --unshare-all"] = {"kind": "bare", "argv": wrapped}
        else:
            print("bubblewrap is not installed (apt-get install bubblewrap): its baseline is left out")
        workers = {name: Worker(name, case) for name, case in cases.items()}
        try:
            rates: dict[tuple[str, int], float] = {}
            cpu: dict[tuple[str, int], float] = {}
            shuffle = random.Random(args.seed)
            for level in levels:
                for worker in workers.values():  # warm up at this concurrency
                    worker.call({"op": "batch", "language": "python", "concurrency": level, "runs": level})
                seconds: dict[str, list[float]] = {name: [] for name in workers}
                cpu_before = {name: worker.meter.seconds() for name, worker in workers.items()}
                for _ in range(args.batches):
                    order = list(workers)
                    shuffle.shuffle(order)
                    for name in order:
                        request = {"op": "batch", "language": "python", "concurrency": level, "runs": args.runs}
                        seconds[name].append(float(workers[name].call(request)))
                for name, worker in workers.items():
                    rates[(name, level)] = args.runs / statistics.median(seconds[name])
                    spent = worker.meter.seconds() - cpu_before[name]
                    cpu[(name, level)] = spent / (args.runs * args.batches)
            rss: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
            for name in ("sandbox.run", "sandbox.run, warm pool"):
                before = workers[name].call({"op": "rss"})
                if args.memory_runs:
                    request = {"op": "batch", "language": "python", "concurrency": 1, "runs": args.memory_runs}
                    workers[name].call(request)
                rss[name] = (before, workers[name].call({"op": "rss"}))
        finally:
            for worker in workers.values():
                worker.close()

    print(f"python {python}; {args.batches} batches of {args.runs} runs per case and concurrency, interleaved")
    header = "".join(f"{f'x{level} runs/s':>12}{'CPU-ms':>8}" for level in levels)
    print(f"  {'case':<22}{header}")
    for name in workers:
        row = "".join(f"{rates[(name, level)]:12.1f}{cpu[(name, level)] * 1000:8.2f}" for level in levels)
        print(f"  {name:<22}{row}")
    for case in ("sandbox.run", "sandbox.run, warm pool"):
        print(f"ratios ({case} against each bare start): throughput, CPU per run")
        for name in workers:
            if name.startswith("sandbox.run"):
                continue
            parts = []
            for level in levels:
                rate = rates[(case, level)] / rates[(name, level)]
                spent = cpu[(case, level)] / cpu[(name, level)]
                parts.append(f"x{level}: {rate:.2f}x, CPU {spent:.2f}x")
            print(f"  vs {name:<20} " + "; ".join(parts))
        floor = cpu[(case, levels[0])] / cpu[("bare -I, empty venv", levels[0])]
        verdict = "within" if floor <= TARGET_CPU else "ABOVE"
        print(f"  CPU per run at x{levels[0]} vs bare -I from an empty venv: {floor:.2f}x", end="")
        print(f" ({verdict} the {TARGET_CPU}x goal)")
    for case, (before, after) in rss.items():
        growth = {key: (after[key] - before[key]) / 1024 for key in ("self", "children")}
        verdict = "within" if growth["self"] < TARGET_RSS_MB else "ABOVE"
        print(
            f"{case}: RSS growth over {args.memory_runs} more runs: app {growth['self']:+.1f} MB ({verdict} the"
            f" {TARGET_RSS_MB} MB goal; {after['self'] / 1024:.1f} MB now), its launcher server"
            f" {growth['children']:+.1f} MB ({after['children'] / 1024:.1f} MB now)"
        )


if __name__ == "__main__":
    main()
