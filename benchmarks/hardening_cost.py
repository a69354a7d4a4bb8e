"""What the seccomp filter and Landlock cost, measured on their own in forked children (one process, one run).

For each of: no hardening, the seccomp filter, Landlock (weak mode's rules), both:
- the time to install it (after no_new_privs, as C does);
- a syscall-heavy loop (``os.getppid()``, ``os.stat('/')``) in the child under it, ns per call;
- the wall time of exec'ing ``python3 -S -c pass``, ``node -e 0`` and ``bash -c :`` under it.

Must run as root or where no_new_privs and Landlock are allowed (they are for anyone).

    python benchmarks/hardening_cost.py [--rounds 40]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

from mainsdk_local.launcher import landlock, linux, seccomp
from mainsdk_local.programs import resolve_program

LOOP = 200_000


def _harden(kind: str, box: str) -> None:
    linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)
    if kind in ("landlock", "both"):
        rules = landlock.weak_rules(box, [], "/nonexistent", None)
        landlock.restrict(rules["readable"] + ["/root", "/tmp"], rules["writable"], rules["connect"])
    if kind in ("seccomp", "both"):
        assert seccomp.FILTER is not None
        seccomp.FILTER.install()


def _in_child(kind: str, box: str, body: Callable[[], float]) -> float:
    """Fork, harden the child with ``kind``, run ``body`` there; its result in microseconds (or ns) comes back."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.write(w, repr(body_after(kind, box, body)).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = os.read(r, 100)
    os.close(r)
    os.waitpid(pid, 0)
    return float(data)


def body_after(kind: str, box: str, body: Callable[[], float]) -> float:
    started = time.perf_counter()
    _harden(kind, box)
    installed = time.perf_counter() - started
    result = body()
    return installed * 1e6 if result < 0 else result


def _install_only() -> float:
    return -1.0


def _loop(call: Callable[[], object]) -> Callable[[], float]:
    def run() -> float:
        started = time.perf_counter()
        for _ in range(LOOP):
            call()
        return (time.perf_counter() - started) / LOOP * 1e9

    return run


def _exec(argv: list[str]) -> Callable[[], float]:
    def run() -> float:
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.execve(argv[0], argv, {})
        os.waitpid(pid, 0)
        return (time.perf_counter() - started) * 1000

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    python = resolve_program("python", "python3").executable
    node = shutil.which("node")
    bash = shutil.which("bash") or "/bin/bash"
    kinds = ["none", "seccomp", "landlock", "both"]
    cases: dict[str, Callable[[], float]] = {
        "install (us)": _install_only,
        "getppid (ns/call)": _loop(os.getppid),
        "stat / (ns/call)": _loop(lambda: os.stat("/")),
        "python3 -S -c pass (ms)": _exec([python, "-S", "-c", "pass"]),
        "bash -c : (ms)": _exec([bash, "-c", ":"]),
    }
    if node:
        cases["node -e 0 (ms)"] = _exec([node, "-e", "0"])
    program = seccomp.build(os.uname().machine) or b""
    print(f"seccomp filter: {len(program) // 8} instructions; Landlock ABI {landlock.abi()}")
    with tempfile.TemporaryDirectory() as box:
        os.makedirs(os.path.join(box, "work"))
        os.makedirs(os.path.join(box, "out"))
        for name, body in cases.items():
            rounds = args.rounds if "ms" in name or "us" in name else max(3, args.rounds // 8)
            results: dict[str, list[float]] = {kind: [] for kind in kinds}
            for _ in range(rounds):
                for kind in kinds:  # interleaved, so noise hits them alike
                    results[kind].append(_in_child(kind, box, body))
            medians = {kind: statistics.median(values) for kind, values in results.items()}
            cells = "  ".join(f"{kind} {medians[kind]:8.2f}" for kind in kinds)
            extra = medians["both"] - medians["none"]
            print(f"  {name:<24} {cells}   (both - none: {extra:+.2f})")


if __name__ == "__main__":
    main()
