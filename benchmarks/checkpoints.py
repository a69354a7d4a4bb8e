"""Checkpoints on the local driver: forks of a session holding 100 MB of files, and pause/resume cycles.

- **fork**: with ``--megabytes`` (100) of files in the source session, ``session.fork(1)`` and the fork's first
  command (``python3 -c pass``), against a fresh session's ``create()`` and first command, interleaved round by
  round. Goal: the fork's first command (fork plus command) at most 150 ms median.
- **ten forks**: ``session.fork(10)`` at once, against ten fresh ``create()`` calls, interleaved. Goal: at most 1 s.
- **pause/resume**: ``--cycles`` (1,000) ``session.pause()`` / ``sandbox.resume(id)`` cycles of a session holding
  files, the workspace's SHA-256 (computed in the box) compared with the first after each one (E2B#884's
  failure class: files lost after a later resume). Prints the cycles whose hash differed (goal: 0).

Run from the repository root as root (overlayfs, the freezer): ``.venv/bin/python benchmarks/checkpoints.py``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from mainsdk import Sandbox, SandboxDeps, Session
from mainsdk.config import load_config_text

from mainsdk_local import local_sandbox_driver

CONFIG = """
sandbox:
  driver: local
  local: { python: python3 }
  limits: { timeout: 60s, memory: 1GB, output: 1MB }
permissions:
  processes: [python3]
  disk: { temp: { max: 1GB } }
"""
FILL = (
    "import os, sys\nos.mkdir('data')\n"
    "for i in range(int(sys.argv[1])):\n    open(f'data/{i}.bin', 'wb').write(os.urandom(1 << 20))"
)
HASH = (
    "import hashlib, os\nh = hashlib.sha256()\n"
    "for folder, dirs, names in sorted(os.walk('.')):\n"
    "    dirs.sort()\n"
    "    for name in sorted(names):\n"
    "        path = os.path.join(folder, name)\n"
    "        h.update(path.encode()); h.update(open(path, 'rb').read())\n"
    "print(h.hexdigest())"
)
FIRST = ["-c", "pass"]


def _ms(values: list[float]) -> str:
    return (
        f"median {statistics.median(values) * 1000:.1f} ms, p90 {sorted(values)[int(len(values) * 0.9)] * 1000:.1f} ms"
    )


def _timed(call: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    value = call()
    return time.perf_counter() - start, value


def _session(value: object) -> Session:
    assert isinstance(value, Session), value
    return value


def bench_forks(sandbox: Sandbox, source: Session, rounds: int) -> None:
    fork_total, fork_only, fresh_total, fresh_only = [], [], [], []
    for _ in range(rounds):
        start = time.perf_counter()
        fork = _session(source.fork(1)[0])
        forked = time.perf_counter()
        assert fork.run("python3", FIRST).ok
        fork_total.append(time.perf_counter() - start)
        fork_only.append(forked - start)
        fork.close()
        start = time.perf_counter()
        fresh = sandbox.create()
        created = time.perf_counter()
        assert fresh.run("python3", FIRST).ok
        fresh_total.append(time.perf_counter() - start)
        fresh_only.append(created - start)
        fresh.close()
    ratio = statistics.median(fork_total) / statistics.median(fresh_total)
    print(f"fork + first command:   {_ms(fork_total)}  (fork alone {_ms(fork_only)})")
    print(f"create + first command: {_ms(fresh_total)}  (create alone {_ms(fresh_only)})")
    goal = "met" if statistics.median(fork_total) <= 0.150 else "NOT met"
    print(f"  fork / fresh: {ratio:.2f}x; goal (fork's first command <= 150 ms median): {goal}")


def bench_ten(sandbox: Sandbox, source: Session, rounds: int) -> None:
    ten, fresh = [], []
    for _ in range(rounds):
        seconds, forks = _timed(lambda: source.fork(10))
        ten.append(seconds)
        firsts = [_session(f) for f in forks]  # type: ignore[attr-defined]
        for fork in firsts:
            fork.close()
        seconds, made = _timed(lambda: [sandbox.create() for _ in range(10)])
        fresh.append(seconds)
        for session in made:  # type: ignore[attr-defined]
            session.close()
    goal = "met" if statistics.median(ten) <= 1.0 else "NOT met"
    print(f"fork(10):          {_ms(ten)}")
    print(f"10 x create():     {_ms(fresh)}")
    print(f"  ratio {statistics.median(ten) / statistics.median(fresh):.2f}x; goal (10 forks <= 1 s): {goal}")


def bench_pause(sandbox: Sandbox, cycles: int) -> None:
    with sandbox.create() as session:
        session.run("python3", ["-c", FILL, "4"])
        session.write("notes/a.txt", "kept across every resume")
        first = session.run("python3", ["-c", HASH]).stdout
        pauses, resumes, differed = [], [], 0
        for _ in range(cycles):
            seconds, _ = _timed(session.pause)
            pauses.append(seconds)
            seconds, _ = _timed(lambda: sandbox.resume(session.id))
            resumes.append(seconds)
            if session.run("python3", ["-c", HASH]).stdout != first:
                differed += 1
        print(f"pause:  {_ms(pauses)}; resume: {_ms(resumes)}")
        print(f"  {cycles} pause/resume cycles: the workspace's hash differed after {differed} (goal: 0)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=100, help="files in the source session (MB)")
    parser.add_argument("--rounds", type=int, default=30, help="fork rounds (and fresh sessions) interleaved")
    parser.add_argument("--ten-rounds", type=int, default=5, help="rounds of fork(10) against 10 creates")
    parser.add_argument("--cycles", type=int, default=1000, help="pause/resume cycles")
    args = parser.parse_args()
    config = load_config_text(CONFIG)
    sandbox = Sandbox(
        SandboxDeps(config=config, driver=local_sandbox_driver(permissions=config.permissions), load_entrypoints=False)
    )
    caps = sandbox.capabilities()
    if "filesystem" not in caps.checkpoint_kinds or not caps.pause:
        raise SystemExit("the local launcher declares no filesystem checkpoints or pause here (it needs root)")
    try:
        with sandbox.create() as source:
            source.run("python3", ["-c", FILL, str(args.megabytes)])
            print(f"source session: {args.megabytes} MB in {args.megabytes} files")
            source.fork(1)[0].close()  # type: ignore[union-attr]  # the first snapshot renames; later ones unmount
            bench_forks(sandbox, source, args.rounds)
            bench_ten(sandbox, source, args.ten_rounds)
        bench_pause(sandbox, args.cycles)
    finally:
        sandbox.close()


if __name__ == "__main__":
    main()
