"""The local driver's pre-exec warm boxes (the pool's kind "exec"): ``sandbox.run`` bash and node, against bare starts.

One interleaved run, rounds in a shuffled order (fixed seed), each case in a worker process and
a cpuacct cgroup of its own (``_cost.py``). Sporadic calls: before every timed call of every case
the benchmark pauses (``--pause``, untimed), so the pool has refilled, as it has between calls an
app makes now and then. For bash and for node:

- ``sandbox.run`` with ``sandbox.local.pool`` at ``--pool`` (its runs take a box entered ahead
  whose C waits just before ``execve``) and at 0 (the cold path);
- the bare start with the box's own command line (``bash -c``, ``node -e``), the floor;
- the same under ``bwrap --unshare-all`` where bubblewrap is installed.

It prints the median and CPU per run of each, the ratios against the bare start and bubblewrap,
and how many of the pool-on runs were warm (the pool's ``exec_hits``).

    python benchmarks/exec_pool.py [--rounds 100] [--pool 4] [--pause 0.3] [--languages bash,node]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from _cost import Worker, bare_argv, bwrap_argv

GOAL = {"bash": 2.0, "node": 0.5}  # issue 17: bash at most 2x bare bash -c; node with a warm pool at most 0.5x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--pool", type=int, default=4)
    parser.add_argument("--pause", type=float, default=0.3, help="untimed seconds before each call")
    parser.add_argument("--languages", default="bash,node")
    parser.add_argument("--seed", type=int, default=17)
    args = parser.parse_args()
    languages = [language for language in args.languages.split(",") if language]

    workers: dict[tuple[str, str], Worker] = {}
    try:
        for language in languages:
            argv = bare_argv(language)
            workers[(language, "bare")] = Worker(f"bare {language}", {"kind": "bare", "argv": argv})
            wrapped = bwrap_argv(argv)
            if wrapped is not None:
                workers[(language, "bwrap")] = Worker(f"bwrap {language}", {"kind": "bare", "argv": wrapped})
            workers[(language, "pool on")] = Worker(f"{language} on", {"kind": "sandbox", "pool": args.pool})
            workers[(language, "pool off")] = Worker(f"{language} off", {"kind": "sandbox", "pool": 0})
        for (language, _), worker in workers.items():  # warm up: page cache, launchers, resolved programs
            for _ in range(5):
                worker.run(language)
                time.sleep(args.pause)
        before = {language: workers[(language, "pool on")].call({"op": "pool"}) for language in languages}
        shuffle = random.Random(args.seed)
        cases = list(workers)
        times: dict[tuple[str, str], list[float]] = {case: [] for case in cases}
        cpu_before = {case: worker.meter.seconds() for case, worker in workers.items()}
        for _ in range(args.rounds):
            shuffle.shuffle(cases)
            for case in cases:
                time.sleep(args.pause)
                times[case].append(workers[case].run(case[0]))
        cpu = {case: worker.meter.seconds() - cpu_before[case] for case, worker in workers.items()}
        after = {language: workers[(language, "pool on")].call({"op": "pool"}) for language in languages}
    finally:
        for worker in workers.values():
            worker.close()

    print(f"{args.rounds} rounds, sporadic (a {args.pause}s pause before each call), shuffled (seed {args.seed});")
    print(f"pool on = sandbox.local.pool {args.pool}")
    print(f"  {'case':<28} {'median ms':>10} {'CPU ms/run':>11}")
    for language in languages:
        medians = {how: statistics.median(times[(lang, how)]) for lang, how in times if lang == language}
        for how, median in medians.items():
            per_run = cpu[(language, how)] / args.rounds * 1000
            print(f"  {language + ' ' + how:<28} {median:10.2f} {per_run:11.2f}")
        warm = after[language].get("exec_hits", 0) - before[language].get("exec_hits", 0)
        on, off, bare = medians["pool on"], medians["pool off"], medians["bare"]
        verdict = "within" if on / bare <= GOAL[language] else "ABOVE"
        line = f"  {language}: pool on {on / bare:.2f}x bare ({verdict} the {GOAL[language]}x goal)"
        line += f", pool off {off / bare:.2f}x"
        if "bwrap" in medians:
            line += f"; vs bwrap: pool on {on / medians['bwrap']:.2f}x, pool off {off / medians['bwrap']:.2f}x"
        print(line)
        print(f"    pool on: {warm} of {args.rounds} timed runs on a pre-exec box; pool on vs off {on / off:.2f}x")


if __name__ == "__main__":
    main()
