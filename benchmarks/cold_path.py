"""The local cold path (no warm pool): ``sandbox.run`` latency and CPU against bare starts and older code.

One interleaved run measures, per round and in a shuffled order (fixed seed):

- ``sandbox.run`` of a one-line program in python, bash and node, with this checkout's code, and a
  ``python3 -c`` command on a session kept open (commands back to back, every round);
- the same with the code of another checkout (``--base DIR``: a git worktree of the commit to
  compare against), imported from that path in a worker process of its own;
- bare starts of the same interpreters: ``python3 -I -S -c``, ``-I`` from an empty venv (the
  goal's baseline), ``bash -c`` and ``node -e``, each with an empty environment.

Latency is the median of the rounds. CPU per run is user + system time: for a bare start the
child's (``RUSAGE_CHILDREN``); for ``sandbox.run`` the worker process's own plus its launcher
server's and everything the server reaped (``/proc/PID/stat`` utime, stime, cutime, cstime),
summed over the rounds and divided by them (a spare the server prepared counts too).

    python benchmarks/cold_path.py --base /tmp/base-worktree [--rounds 150]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from mainsdk_local.programs import resolve_program

CODE = {"python": "print(1 + 1)", "bash": "echo 2", "node": "console.log(1 + 1)"}
GOAL_VS_EMPTY_VENV = 1.3  # issue 17: pool off, at most 1.3x a bare -I start from an empty venv

# A worker: runs sandbox.run(language) once per line on stdin; answers with milliseconds and CPU seconds.
_WORKER = r"""
import glob, json, os, sys, time
from mainsdk import Sandbox, SandboxDeps
from mainsdk_local import local_sandbox_driver
import mainsdk_local
code = json.loads(sys.argv[1])
sandbox = Sandbox(SandboxDeps(driver=local_sandbox_driver(), load_entrypoints=False))
for _ in range(5):
    for language, source in code.items():
        sandbox.run(source, language=language)
ticks = os.sysconf("SC_CLK_TCK")

def children():
    pids = set()
    for path in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        with open(path) as f:
            pids.update(int(p) for p in f.read().split())
    return pids

servers = children()

def cpu():
    own = os.times()
    total = own.user + own.system
    for pid in servers:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15]) / ticks  # utime stime cutime cstime
    return total

print(json.dumps({"ready": mainsdk_local.__file__, "servers": len(servers)}), flush=True)
session = sandbox.create()  # commands back to back on one session: its box keeps a hot spare
for line in sys.stdin:
    language = line.strip()
    cpu0 = cpu()
    started = time.perf_counter()
    if language == "session":
        result = session.run("python3", ["-c", code["python"]])
    else:
        result = sandbox.run(code[language], language=language)
    elapsed = (time.perf_counter() - started) * 1000
    assert result.stdout == "2\n", result
    print(json.dumps([elapsed, cpu() - cpu0]), flush=True)
session.close()
sandbox.close()
"""


class Worker:
    """A process of its own running sandbox.run with the code found on ``pythonpath`` (None: installed)."""

    def __init__(self, pythonpath: str | None) -> None:
        env = dict(os.environ)
        if pythonpath is not None:
            env["PYTHONPATH"] = pythonpath
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER, json.dumps(CODE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        ready = json.loads(self.stdout.readline())
        self.source = ready["ready"]
        if ready["servers"] != 1:
            raise RuntimeError(f"expected one launcher server under the worker, found {ready['servers']}")

    def run(self, language: str) -> tuple[float, float]:
        self.stdin.write(language + "\n")
        self.stdin.flush()
        elapsed, cpu = json.loads(self.stdout.readline())
        return float(elapsed), float(cpu)

    def close(self) -> None:
        self.stdin.close()
        self.proc.wait()


def bare(argv: list[str]) -> Callable[[], tuple[float, float]]:
    """A bare start of ``argv`` with an empty environment: (milliseconds, CPU seconds of the child)."""

    def call() -> tuple[float, float]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(argv, env={}, capture_output=True, check=True)
        elapsed = (time.perf_counter() - started) * 1000
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert done.stdout == b"2\n", done
        return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--base", metavar="DIR", help="a checkout of the code to compare against (a git worktree)")
    parser.add_argument("--seed", type=int, default=17)
    args = parser.parse_args()

    python = resolve_program("python", "python3").executable
    bash = resolve_program("bash", "bash").executable
    node = resolve_program("node", "node").executable
    with tempfile.TemporaryDirectory(prefix="cold-path-venv-") as venv:
        subprocess.run([python, "-m", "venv", "--without-pip", venv], check=True)
        cases: dict[str, Callable[[], tuple[float, float]]] = {
            "bare python -I -S": bare([python, "-I", "-S", "-c", CODE["python"]]),
            "bare python -I, empty venv": bare([os.path.join(venv, "bin", "python"), "-I", "-c", CODE["python"]]),
            "bare bash -c": bare([bash, "-c", CODE["bash"]]),
            "bare node -e": bare([node, "-e", CODE["node"]]),
        }
        workers = {"new": Worker(None)}
        if args.base:
            base = os.path.abspath(args.base)
            workers["old"] = Worker(f"{base}/core/src:{base}/mainsdk_local/src")
            if not workers["old"].source.startswith(base):
                raise RuntimeError(f"the old worker imported {workers['old'].source}, not the code under {base}")
        try:
            for side, worker in workers.items():
                for language in CODE:
                    cases[f"sandbox.run {language} ({side})"] = functools.partial(worker.run, language)
                cases[f"session.run python3 ({side})"] = functools.partial(worker.run, "session")
            for call in cases.values():  # warm up: page cache, launchers, resolved programs
                for _ in range(5):
                    call()
            shuffle = random.Random(args.seed)
            names = list(cases)
            times: dict[str, list[float]] = {name: [] for name in cases}
            cpu: dict[str, float] = dict.fromkeys(cases, 0.0)
            for _ in range(args.rounds):
                shuffle.shuffle(names)
                for name in names:
                    elapsed, seconds = cases[name]()
                    times[name].append(elapsed)
                    cpu[name] += seconds
        finally:
            for worker in workers.values():
                worker.close()

    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"{args.rounds} rounds, interleaved in a shuffled order (seed {args.seed}); python {python}")
    for side, worker in workers.items():
        print(f"  {side}: {worker.source}")
    print(f"  {'case':<32} {'median ms':>10} {'CPU ms/run':>11}")
    for name in sorted(cases):
        print(f"  {name:<32} {medians[name]:10.2f} {cpu[name] / args.rounds * 1000:11.2f}")

    def ratio(a: str, b: str) -> str:
        return f"{medians[a] / medians[b]:.2f}x"

    print("ratios of the medians:")
    for side in workers:
        py = f"sandbox.run python ({side})"
        print(f"  {side}: python vs bare -I -S {ratio(py, 'bare python -I -S')}", end="")
        goal = medians[py] / medians["bare python -I, empty venv"]
        verdict = "within" if goal <= GOAL_VS_EMPTY_VENV else "ABOVE"
        print(f", vs bare -I empty venv {goal:.2f}x ({verdict} the {GOAL_VS_EMPTY_VENV}x goal)", end="")
        print(f", bash vs bare {ratio(f'sandbox.run bash ({side})', 'bare bash -c')}", end="")
        print(f", node vs bare {ratio(f'sandbox.run node ({side})', 'bare node -e')}")
        py_cpu = cpu[py] / cpu["bare python -I, empty venv"]
        print(f"  {side}: python CPU per run vs bare -I empty venv {py_cpu:.2f}x")
    if "old" in workers:
        for case in [f"sandbox.run {language}" for language in CODE] + ["session.run python3"]:
            new, old = medians[f"{case} (new)"], medians[f"{case} (old)"]
            new_cpu, old_cpu = cpu[f"{case} (new)"], cpu[f"{case} (old)"]
            print(
                f"  new vs old, {case}: {new - old:+.2f} ms ({(new / old - 1) * 100:+.1f}%) at the median,"
                f" {(new_cpu - old_cpu) / args.rounds * 1000:+.2f} CPU-ms per run"
            )


if __name__ == "__main__":
    main()
