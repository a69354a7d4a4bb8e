"""Delay from a flush in the box to ``on_output`` in the app, on the local driver (goal: median and p95 <= 50 ms).

The code in the box writes one line at a time, each the wall-clock time
(``time.time()``) at which it is written, flushes, and sleeps a little. The app's
``on_output`` notes ``time.time()`` when the line arrives; the delay is the
difference. Both read the same clock: the box is a namespace on this machine's
kernel, and CLOCK_REALTIME is shared by every namespace (a Linux time namespace
only offsets the monotonic and boot clocks), so no skew enters the figure.

The baseline, in the same run and interleaved with it, is the same code run
by a bare interpreter under ``asyncio.create_subprocess_exec`` with its stdout
read as it comes: the pipe and the event loop alone. The sandbox is measured
twice: with no secret (key formats are still redacted) and with a secret
configured, so the redactor has values to hold back for.

    python benchmarks/output_latency.py [--rounds 5] [--lines 40]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from mainsdk import AsyncSandbox, SandboxDeps, secret
from mainsdk.config import load_config_text

from mainsdk_local import local_sandbox_driver

GOAL_MS = 50.0
CONFIG = """
sandbox:
  driver: local
  limits: { timeout: 60s, memory: 256MB, output: 1MB }
  secrets: [BENCH_SECRET]
"""
SECRET_VALUE = "bench-secret-9f8e7d6c5b4a3210"


def box_code(lines: int) -> str:
    """Python that writes ``lines`` time stamps, one per flush, 20 ms apart."""
    return (
        "import sys, time\n"
        f"for _ in range({lines}):\n"
        "    sys.stdout.write('%.6f\\n' % time.time()); sys.stdout.flush(); time.sleep(0.02)\n"
    )


class Arrivals:
    """Turns streamed chunks into one delay per complete line."""

    def __init__(self) -> None:
        self.delays_ms: list[float] = []
        self._partial = b""

    def take(self, stream: str, data: bytes) -> None:
        now = time.time()
        if stream != "stdout":
            return
        self._partial += data
        *lines, self._partial = self._partial.split(b"\n")
        for line in lines:
            self.delays_ms.append((now - float(line)) * 1000)


async def through_sandbox(sandbox: AsyncSandbox, code: str, with_secret: bool) -> list[float]:
    arrivals = Arrivals()
    env = {"K": secret("BENCH_SECRET")} if with_secret else None
    result = await sandbox.run(code, env=env, on_output=arrivals.take)
    assert result.exit_code == 0, result
    return arrivals.delays_ms


async def through_bare_pipe(code: str) -> list[float]:
    arrivals = Arrivals()
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    while chunk := await proc.stdout.read(65536):
        arrivals.take("stdout", chunk)
    await proc.wait()
    return arrivals.delays_ms


def summary(name: str, delays: list[float]) -> tuple[float, float]:
    ordered = sorted(delays)
    median = statistics.median(ordered)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    print(f"{name:<28} lines {len(ordered):>5}  median {median:7.2f} ms  p95 {p95:7.2f} ms  max {ordered[-1]:7.2f} ms")
    return median, p95


async def main_async(rounds: int, lines: int) -> int:
    config = load_config_text(CONFIG)
    driver = local_sandbox_driver()
    sandbox = AsyncSandbox(
        SandboxDeps(
            config=config,
            driver=driver,
            secret=lambda name: SECRET_VALUE if name == "BENCH_SECRET" else None,
            load_entrypoints=False,
        )
    )
    code = box_code(lines)
    await through_sandbox(sandbox, box_code(2), False)  # warm up the launcher
    bare: list[float] = []
    plain: list[float] = []
    secret_run: list[float] = []
    for _ in range(rounds):
        bare += await through_bare_pipe(code)
        plain += await through_sandbox(sandbox, code, False)
        secret_run += await through_sandbox(sandbox, code, True)
    await sandbox.aclose()
    base_median, _ = summary("baseline: bare pipe", bare)
    results = [summary("sandbox: no secret", plain), summary("sandbox: a secret to redact", secret_run)]
    for median, _p95 in results:
        print(f"  median over baseline: {median - base_median:+.2f} ms ({median / base_median:.1f}x)")
    ok = all(median <= GOAL_MS and p95 <= GOAL_MS for median, p95 in results)
    print(f"goal (median and p95 <= {GOAL_MS:.0f} ms): {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


def main() -> int:
    """Measure and print; exit 1 if the goal is not met."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lines", type=int, default=40)
    args = parser.parse_args()
    return asyncio.run(main_async(args.rounds, args.lines))


if __name__ == "__main__":
    sys.exit(main())
