"""The local cold path (no warm pool): ``sandbox.run`` latency and CPU against bare starts and older code.

One interleaved run measures, per round and in a shuffled order (fixed seed), each case in a
worker process and a cpuacct cgroup of its own (``_cost.py``):

- ``sandbox.run`` of a one-line program in python, bash and node, with this checkout's code, and a
  ``python3 -c`` command on a session kept open (commands back to back, every round);
- the same with the code of another checkout (``--base DIR``: a git worktree of the commit to
  compare against), imported from that path;
- bare starts: ``python3 -I -S -c`` (the floor), ``-I`` from an empty venv (the goal's baseline),
  ``bash -c`` and ``node -e``, each with an empty environment, and bubblewrap (``bwrap
  --unshare-all``, ``apt-get install bubblewrap``) around the box's own python and bash command lines.

Latency is the median of the rounds. CPU per run is the case's cgroup CPU (``cpuacct.usage``) over
the rounds, divided by them: the app, its launcher server, the spares it prepared and the boxes'
processes, or the bare start and the worker that started it.

    python benchmarks/cold_path.py [--base /tmp/base-worktree] [--rounds 150]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile

from _cost import CODE, Worker, bare_argv, bwrap_argv, empty_venv, python_program

GOAL_VS_EMPTY_VENV = 1.3  # issue 17: pool off, at most 1.3x a bare -I start from an empty venv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--base", metavar="DIR", help="a checkout of the code to compare against (a git worktree)")
    parser.add_argument("--seed", type=int, default=17)
    args = parser.parse_args()

    python = python_program()
    workers: dict[str, Worker] = {}
    sides: dict[str, str | None] = {}
    # case name -> (its worker, what it runs)
    cases: dict[str, tuple[Worker, str]] = {}
    with tempfile.TemporaryDirectory(prefix="cold-path-venv-") as venv:
        bare = {
            "bare python -I -S": [python, "-I", "-S", "-c", CODE["python"]],
            "bare python -I, empty venv": [empty_venv(venv), "-I", "-c", CODE["python"]],
            "bare bash -c": bare_argv("bash"),
            "bare node -e": bare_argv("node"),
        }
        for language in ("python", "bash"):
            wrapped = bwrap_argv(bare_argv(language))
            if wrapped is None:
                print("bubblewrap is not installed (apt-get install bubblewrap): its baselines are left out")
                break
            bare[f"bwrap {language}"] = wrapped
        try:
            for name, argv in bare.items():
                workers[name] = Worker(name, {"kind": "bare", "argv": argv})
                cases[name] = (workers[name], "python")
            base = os.path.abspath(args.base) if args.base else ""
            sides["new"] = None
            if base:
                sides["old"] = f"{base}/core/src:{base}/mainsdk_local/src"
            for side, pythonpath in sides.items():
                # One worker per case, so each case's CPU is its own cgroup's.
                for what in (*CODE, "session"):
                    name = f"sandbox.run {what} ({side})" if what != "session" else f"session.run python3 ({side})"
                    # Both sides with the warm pool off, where they have one (benchmarks/warm_pool.py measures it on).
                    worker_case = {"kind": "sandbox", "pool": 0}
                    worker = Worker(name, worker_case, pythonpath)
                    if pythonpath is not None and not worker.ready["source"].startswith(base):
                        source = worker.ready["source"]
                        raise RuntimeError(f"the old worker imported {source}, not the code under {base}")
                    if worker.ready["servers"] != 1:
                        found = worker.ready["servers"]
                        raise RuntimeError(f"expected one launcher server under {name}, found {found}")
                    workers[name] = worker
                    cases[name] = (worker, what)
            for worker, what in cases.values():  # warm up: page cache, launchers, resolved programs
                for _ in range(5):
                    worker.run(what)
            shuffle = random.Random(args.seed)
            names = list(cases)
            times: dict[str, list[float]] = {name: [] for name in cases}
            cpu_before = {name: worker.meter.seconds() for name, (worker, _) in cases.items()}
            for _ in range(args.rounds):
                shuffle.shuffle(names)
                for name in names:
                    worker, what = cases[name]
                    times[name].append(worker.run(what))
            cpu = {name: worker.meter.seconds() - cpu_before[name] for name, (worker, _) in cases.items()}
        finally:
            for worker in workers.values():
                worker.close()

    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"{args.rounds} rounds, interleaved in a shuffled order (seed {args.seed}); python {python}")
    for name, worker in workers.items():
        if name.startswith("sandbox.run python"):
            print(f"  {name}: {worker.ready['source']}")
    print(f"  {'case':<32} {'median ms':>10} {'CPU ms/run':>11}")
    for name in sorted(cases):
        print(f"  {name:<32} {medians[name]:10.2f} {cpu[name] / args.rounds * 1000:11.2f}")

    def ratio(a: str, b: str) -> str:
        return f"{medians[a] / medians[b]:.2f}x" if b in medians else "n/a"

    print("ratios of the medians:")
    for side in sides:
        py = f"sandbox.run python ({side})"
        print(f"  {side}: python vs bare -I -S {ratio(py, 'bare python -I -S')}", end="")
        goal = medians[py] / medians["bare python -I, empty venv"]
        verdict = "within" if goal <= GOAL_VS_EMPTY_VENV else "ABOVE"
        print(f", vs bare -I empty venv {goal:.2f}x ({verdict} the {GOAL_VS_EMPTY_VENV}x goal)", end="")
        print(f", vs bwrap {ratio(py, 'bwrap python')}", end="")
        print(f"; bash vs bare {ratio(f'sandbox.run bash ({side})', 'bare bash -c')}", end="")
        print(f", vs bwrap {ratio(f'sandbox.run bash ({side})', 'bwrap bash')}", end="")
        print(f"; node vs bare {ratio(f'sandbox.run node ({side})', 'bare node -e')}")
        py_cpu = cpu[py] / cpu["bare python -I, empty venv"]
        print(f"  {side}: python CPU per run vs bare -I empty venv {py_cpu:.2f}x", end="")
        if "bwrap python" in cpu:
            print(f", vs bwrap {cpu[py] / cpu['bwrap python']:.2f}x", end="")
        print()
    if "old" in sides:
        for case in [f"sandbox.run {language}" for language in CODE] + ["session.run python3"]:
            new, old = medians[f"{case} (new)"], medians[f"{case} (old)"]
            new_cpu, old_cpu = cpu[f"{case} (new)"], cpu[f"{case} (old)"]
            print(
                f"  new vs old, {case}: {new - old:+.2f} ms ({(new / old - 1) * 100:+.1f}%) at the median,"
                f" {(new_cpu - old_cpu) / args.rounds * 1000:+.2f} CPU-ms per run"
            )


if __name__ == "__main__":
    main()
