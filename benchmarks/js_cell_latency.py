"""Latency of a JavaScript cell round trip (``session.run_code("x += 1", language="javascript")``) in a warm
interpreter on the local driver.

Against baselines measured in the same run, interleaved: a Python cell ``x += 1`` in the same session (the
same supervisor and transport, another executor; a statement, so no result), a bash cell ``((x += 1))``, and a
session command ``session.run("node", ["-e", "0"])`` (a fresh node per call, what a JS cell replaces; timed in
rounds of its own after the cells', since the warm pool's refill after each would weigh on the next row). In JS
``x += 1`` is an expression whose value comes back as two results (text/plain and application/json): the
``x += 1; undefined`` row is the like-for-like one against Python's. And a bare node REPL over pipes on the host
(``node -i``, one line in, its answer and prompt out: no box, no supervisor, no transport), issue 32's floor: the
goal is a warm JS cell at most 2x that.

    python benchmarks/js_cell_latency.py [--rounds 300]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from typing import Any

from mainsdk import AsyncSandbox, Sandbox, SandboxDeps
from mainsdk.config import load_config_text

from mainsdk_local import local_sandbox_driver

CONFIG = """
sandbox:
  driver: local
  local: { python: python3, node: node, bash: bash }
  limits: { timeout: 30s, memory: 512MB }
permissions:
  processes: [python3, node, bash]
"""


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def summary(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"{name:<48} median {statistics.median(ordered):7.2f} ms   p95 {p95:7.2f} ms   (n={len(ordered)})"


class NodeRepl:
    """``node -i`` over pipes on the host: a line in, the REPL's answer and its next prompt out."""

    def __init__(self) -> None:
        node = shutil.which("node")
        assert node is not None, "the JS benchmark needs node"
        env = {**os.environ, "NODE_NO_READLINE": "1"}
        self.proc = subprocess.Popen([node, "-i"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.line("")

    def line(self, code: str) -> bytes:
        """Send one line (nothing for the first prompt); what came back up to the prompt."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if code:
            self.proc.stdin.write(code.encode() + b"\n")
            self.proc.stdin.flush()
        out = b""
        while not out.endswith(b"> "):
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            assert chunk, "node's REPL ended"
            out += chunk
        return out

    def close(self) -> None:
        """End the REPL."""
        self.proc.kill()
        self.proc.wait()


def main() -> None:
    """Measure and print the medians, 95th percentiles and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    options = parser.parse_args()
    config = load_config_text(CONFIG)
    sandbox = Sandbox(
        SandboxDeps(config=config, driver=local_sandbox_driver(permissions=config.permissions), load_entrypoints=False)
    )
    js: list[float] = []
    js_bare: list[float] = []
    python: list[float] = []
    bash: list[float] = []
    commands: list[float] = []
    repl_samples: list[float] = []
    repl = NodeRepl()
    repl.line("let x = 0")
    with sandbox.create() as session:
        first = timed(lambda: session.run_code("let x = 0", language="javascript"))
        session.run_code("x = 0")
        session.run_code("x=0", language="bash")
        for _ in range(20):  # warm: the interpreters' first cells, the launcher's spares
            session.run_code("x += 1", language="javascript")
            session.run_code("x += 1")
            session.run_code("((x += 1))", language="bash")
            session.run("node", ["-e", "0"])
        time.sleep(0.5)  # the pool's refill after the last command, before any row is timed
        for _ in range(options.rounds):
            js.append(timed(lambda: session.run_code("x += 1", language="javascript")))
            js_bare.append(timed(lambda: session.run_code("x += 1; undefined", language="javascript")))
            python.append(timed(lambda: session.run_code("x += 1")))
            bash.append(timed(lambda: session.run_code("((x += 1))", language="bash")))
            repl_samples.append(timed(lambda: repl.line("x += 1")))
        # The commands in rounds of their own: each run("node") has the launcher's warm pool start a node in its
        # place at once, tens of ms of CPU that would land on whichever row came next (once, the JS cell's).
        for _ in range(options.rounds):
            commands.append(timed(lambda: session.run("node", ["-e", "0"])))
        final = session.run_code("x", language="javascript").text
        counted = session.run_code('echo "$x"', language="bash").stdout.strip()
    sandbox.close()
    repl.close()
    assert final == str(20 + 2 * options.rounds) and counted == str(20 + options.rounds), (final, counted)
    print(f"{'first JS cell (node and the executor start)':<48} {first:7.2f} ms")
    print(summary('JS cell: run_code("x += 1", language="javascript")', js))
    print(summary('JS cell, no value: "x += 1; undefined"', js_bare))
    print(summary('Python cell: run_code("x += 1")', python))
    print(summary('bash cell: run_code("((x += 1))", language="bash")', bash))
    print(summary('command: run("node", ["-e", "0"])', commands))
    print(summary("bare node REPL over pipes on the host: x += 1", repl_samples))
    median = statistics.median(js)
    print(
        f"JS cell / Python cell: {median / statistics.median(python):.3f} "
        f"(no value: {statistics.median(js_bare) / statistics.median(python):.3f}); "
        f"JS cell / node command: {median / statistics.median(commands):.3f}; "
        f"bash cell / Python cell: {statistics.median(bash) / statistics.median(python):.3f}"
    )
    ratio = median / statistics.median(repl_samples)
    print(f"JS cell / bare node REPL: {ratio:.2f} (goal at most 2): {'met' if ratio <= 2 else 'missed'}")
    # The same on the async API (no hop to the synchronous Sandbox's own loop thread), against the REPL again.
    async_js, async_repl = asyncio.run(_async_rounds(config, options.rounds))
    print(summary('async JS cell: await run_code("x += 1", ...)', async_js))
    print(summary("bare node REPL over pipes on the host: x += 1", async_repl))
    ratio = statistics.median(async_js) / statistics.median(async_repl)
    print(f"async JS cell / bare node REPL: {ratio:.2f} (goal at most 2): {'met' if ratio <= 2 else 'missed'}")


async def _async_rounds(config: Any, rounds: int) -> tuple[list[float], list[float]]:
    sandbox = AsyncSandbox(
        SandboxDeps(config=config, driver=local_sandbox_driver(permissions=config.permissions), load_entrypoints=False)
    )
    cells: list[float] = []
    repl_samples: list[float] = []
    repl = NodeRepl()
    repl.line("let x = 0")
    async with sandbox.create() as session:
        await session.run_code("let x = 0", language="javascript")
        for _ in range(20):
            await session.run_code("x += 1", language="javascript")
        for _ in range(rounds):
            started = time.perf_counter()
            await session.run_code("x += 1", language="javascript")
            cells.append((time.perf_counter() - started) * 1000)
            repl_samples.append(timed(lambda: repl.line("x += 1")))
    sandbox.hooks.shutdown()
    repl.close()
    return cells, repl_samples


if __name__ == "__main__":
    main()
