"""What the network allowlist and concurrency cost on the local driver, measured in one process and one run.

1. The extra latency of a run given one host against the same run given none
   (``print(1 + 1)``, interleaved rounds; target: under 5 ms at the median).
2. What one HTTP request through the run's proxy costs, from inside the box,
   against the same request made by this process straight to the server.
3. Throughput: 16 runs at once (``asyncio.gather`` on ``AsyncSandbox``)
   against 16 bare interpreter starts at once (the same interpreter, ``-E -s``).

The only server is one this script starts on 127.0.0.1; the driver's
``resolve`` mapping lets a run be given it by name.

    python benchmarks/network_and_concurrency.py [--rounds 100] [--batches 20]
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import json
import statistics
import subprocess
import threading
import time
import urllib.request
from typing import Any

from mainsdk import AsyncSandbox, SandboxDeps
from mainsdk.config import load_config_text
from mainsdk_local.programs import resolve_program

from mainsdk_local import local_sandbox_driver

HOST = "api.example.test"
CONFIG = f"""
sandbox:
  driver: local
  network: [{HOST}]
network:
  allow: [{HOST}]
"""
CODE = "print(1 + 1)"
TARGET_EXTRA_MS = 5.0
CONCURRENCY = 16
REQUESTS = 50


class _Quiet(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


def _per_request_code(url: str) -> str:
    return (
        "import time, urllib.request\n"
        f"urllib.request.urlopen('{url}').read()\n"  # warm: imports, first connection
        "times = []\n"
        f"for _ in range({REQUESTS}):\n"
        "    started = time.perf_counter()\n"
        f"    urllib.request.urlopen('{url}').read()\n"
        "    times.append((time.perf_counter() - started) * 1000)\n"
        "times.sort(); print(times[len(times) // 2])\n"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    python = resolve_program("python", "python3").executable
    driver = local_sandbox_driver(resolve={HOST: "127.0.0.1"})
    sandbox = AsyncSandbox(SandboxDeps(config=load_config_text(CONFIG), driver=driver, load_entrypoints=False))
    try:
        # 1. One host against none.
        async def timed_run(hosts: list[str]) -> float:
            started = time.perf_counter()
            result = await sandbox.run(CODE, network=hosts)
            assert result.stdout == "2\n", result
            return (time.perf_counter() - started) * 1000

        for _ in range(10):  # warm up: the launcher, its spares, the resolved interpreter
            await timed_run([])
            await timed_run([HOST])
        none: list[float] = []
        one: list[float] = []
        for _ in range(args.rounds):
            none.append(await timed_run([]))
            one.append(await timed_run([HOST]))
        isolation = (await sandbox.run(CODE)).isolation
        extra = statistics.median(one) - statistics.median(none)
        verdict = "within" if extra < TARGET_EXTRA_MS else "ABOVE"
        print(f"interpreter: {python}; isolation: {isolation}; {args.rounds} rounds, interleaved")
        print(f"  run, no host         median {statistics.median(none):7.2f} ms")
        print(f"  run, one host        median {statistics.median(one):7.2f} ms")
        print(f"  extra for one host          {extra:7.2f} ms ({verdict} the {TARGET_EXTRA_MS:.0f} ms target)")

        # 2. One request through the proxy, from inside, against the same request straight from here.
        url = f"http://{HOST}:{port}/"
        result = await sandbox.run(_per_request_code(url), network=[HOST])
        inside = float(result.stdout)
        direct = []
        for _ in range(REQUESTS):
            started = time.perf_counter()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/") as answer:
                answer.read()
            direct.append((time.perf_counter() - started) * 1000)
        print(f"  one GET through the proxy, from inside the box  median {inside:6.2f} ms")
        print(f"  one GET straight to the server, from the app    median {statistics.median(direct):6.2f} ms")

        # 3. Sixteen at once.
        async def sandbox_batch() -> float:
            started = time.perf_counter()
            results = await asyncio.gather(*(sandbox.run(CODE) for _ in range(CONCURRENCY)))
            assert all(r.stdout == "2\n" for r in results)
            return (time.perf_counter() - started) * 1000

        def bare_batch(*flags: str) -> float:
            started = time.perf_counter()
            procs = [
                subprocess.Popen([python, *flags, "-c", CODE], env={}, stdout=subprocess.PIPE)
                for _ in range(CONCURRENCY)
            ]
            for proc in procs:
                out, _ = proc.communicate()
                assert out == b"2\n"
            return (time.perf_counter() - started) * 1000

        # Two baselines: the sandbox's own flags (-E -s), whose site module still reads the host's
        # site-packages (.pth files), which the sandbox hides; and -S, no site module at all.
        baselines = {"bare -E -s": ("-E", "-s"), "bare -E -s -S": ("-E", "-s", "-S")}
        await sandbox_batch()
        for flags in baselines.values():
            bare_batch(*flags)
        times: dict[str, list[float]] = {"sandbox.run": [], **{name: [] for name in baselines}}
        for _ in range(args.batches):
            times["sandbox.run"].append(await sandbox_batch())
            for name, flags in baselines.items():
                times[name].append(await asyncio.to_thread(bare_batch, *flags))
        medians = {name: statistics.median(values) for name, values in times.items()}
        print(f"{CONCURRENCY} at once, {args.batches} batches, interleaved")
        for name, median in medians.items():
            print(
                f"  {CONCURRENCY} x {name:<14} median {median:7.1f} ms ({CONCURRENCY / median * 1000:6.1f} per second)"
            )
        for name in baselines:
            print(f"  ratio sandbox.run / {name:<14} {medians['sandbox.run'] / medians[name]:5.2f}x")
        ratio = medians["sandbox.run"] / medians["bare -E -s -S"]
        print(json.dumps({"extra_one_host_ms": round(extra, 2), "ratio_16_at_once_vs_bare_S": round(ratio, 2)}))
    finally:
        await sandbox.aclose()
        server.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
