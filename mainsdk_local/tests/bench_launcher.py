"""Benchmark: median latency of a ``print(1 + 1)`` run through the launcher against a bare start.

Not a test. Run: ``/work/venv/bin/python mainsdk_local/tests/bench_launcher.py [runs]``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import time

from mainsdk_local.launcher_client import ExecSpec, Launcher

PAUSE = 0.1


async def back_to_back(spec: ExecSpec, runs: int, launcher: Launcher) -> float:
    """Median seconds of sandboxed runs started one right after the other, with no pause."""
    times = []
    async with await launcher.open_box(disk_bytes=16 << 20) as box:
        for i in range(runs + 3):
            start = time.perf_counter()
            await box.exec(spec, on_stdout=lambda b: None, on_stderr=lambda b: None)
            if i >= 3:
                times.append(time.perf_counter() - start)
    return statistics.median(times)


def real_python() -> str:
    """The real interpreter behind ``python3`` on PATH (not the pyenv shim)."""
    found = shutil.which("python3")
    if found is None:
        return os.path.realpath(sys.executable)
    out = subprocess.run(
        [found, "-c", "import os, sys; print(os.path.realpath(sys.executable))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def spec_for(python: str, flags: list[str]) -> ExecSpec:
    """``print(1 + 1)`` with ``python`` and its prefix (``<prefix>/bin/python``) bound read-only."""
    prefix = os.path.dirname(os.path.dirname(python))
    return ExecSpec(
        argv=(python, *flags, "-c", "print(1 + 1)"),
        env={},
        timeout=10,
        memory_bytes=256 << 20,
        readonly_paths=(os.path.realpath(prefix),) if not prefix.startswith("/usr") else (),
    )


async def measure(python: str, flags: list[str], runs: int, launcher: Launcher) -> tuple[float, float, float]:
    """Medians (seconds) of a bare start, a sandboxed run seen by the client, and as the server timed it.

    Bare and sandboxed runs alternate, so a machine that gets busier or quieter
    during the measurement affects both alike, with a pause before each so that
    neither is measured while the other's background work (the server preparing
    its next spare worker, the kernel freeing the last run's namespaces) still runs.
    """
    spec = spec_for(python, flags)
    argv = spec.argv
    bare, client, server = [], [], []
    async with await launcher.open_box(disk_bytes=16 << 20) as box:
        for i in range(runs + 3):
            await asyncio.sleep(PAUSE)
            start = time.perf_counter()
            subprocess.run(argv, stdout=subprocess.DEVNULL, env={}, check=True)
            plain = time.perf_counter() - start
            await asyncio.sleep(PAUSE)
            out: list[bytes] = []
            start = time.perf_counter()
            result = await box.exec(spec, on_stdout=out.append, on_stderr=lambda b: None)
            elapsed = time.perf_counter() - start
            assert result.exit_code == 0 and b"".join(out) == b"2\n", (result, out)
            if i >= 3:  # the first runs build the root template and warm caches
                bare.append(plain)
                client.append(elapsed)
                server.append(result.duration)
    return statistics.median(bare), statistics.median(client), statistics.median(server)


def main() -> None:
    """Print medians for bare and sandboxed starts."""
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    python = real_python()
    launcher = Launcher()
    launcher.start()
    print(f"python {python}; isolation {launcher.isolation}; memory {launcher.memory_enforcement}; runs {runs}")
    for flags in (["-E", "-s", "-S"], ["-I", "-S"]):
        plain, client, server = asyncio.run(measure(python, flags, runs, launcher))
        print(
            f"{' '.join(flags):10} bare {plain * 1000:6.2f} ms | sandboxed {client * 1000:6.2f} ms "
            f"(server-measured {server * 1000:6.2f} ms) | ratio {client / plain:4.2f}x"
        )
    spec = spec_for(python, ["-I", "-S"])
    tight = asyncio.run(back_to_back(spec, runs, launcher))
    tight_bare = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(spec.argv, stdout=subprocess.DEVNULL, env={}, check=True)
        tight_bare.append(time.perf_counter() - start)
    plain = statistics.median(tight_bare)
    print(
        f"-I -S      back to back, no pauses: bare {plain * 1000:6.2f} ms | sandboxed {tight * 1000:6.2f} ms "
        f"| ratio {tight / plain:4.2f}x"
    )
    launcher.close()


if __name__ == "__main__":
    main()
