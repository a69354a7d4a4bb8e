"""The kubernetes driver over the stand-in cluster (mainsdk_kubernetes/tests/standin_*.py): a stand-in figure.

No Kubernetes API server runs here, so this measures the driver's own side against the stand-in on loopback:

- the requests a run and a session cost: to the API server (counted by the stand-in's API server) and to the pods'
  sandboxd (gRPC ``Start``, ``WriteStdin``, ``SendSignal``; REST), once the warm pool's template was read;
- claim-to-first-output over a warm pool: from ``sandbox.run`` to the first stdout byte at ``on_output``, against a
  bare start of the same ``python3 -c`` in the same run, interleaved (the stand-in's pods are host processes, so
  the ratio is the driver's and the protocol's cost, not a cluster's: a real claim adds the controller's
  adoption and the network).

    python benchmarks/kubernetes_claims.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # a pod deleted under an idle channel is logged otherwise
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mainsdk_kubernetes" / "tests"))

from standin_cluster import make_sandbox, start_cluster

CODE = "print(1 + 1)"
# The python3 the stand-in's pods run (their PATH): the same interpreter for the baseline.
PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or "python3"


def _named(request: str) -> str:
    """``POST sandboxclaims``, ``GET pods/NAME``: a request as its verb and resource."""
    method, path = request.split()
    parts = path.split("/")
    return f"{method} {parts[-1]}" if parts[-1] == "sandboxclaims" else f"{method} {parts[-2]}/{parts[-1]}"


def bare() -> float:
    """Seconds to a bare ``python3 -c`` start's first output."""
    began = time.perf_counter()
    with subprocess.Popen([PYTHON, "-c", CODE], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        proc.stdout.read(1)
        first = time.perf_counter() - began
        proc.wait()
    return first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        cluster = start_cluster(Path(folder), 0)
        try:
            sandbox = make_sandbox(cluster, Path(folder))
            sandbox.run(CODE)  # the template read once, and the interpreter's files in the page cache
            api, pods = cluster.api, cluster.pods
            a, s, w, r = len(api.requests), len(pods.starts), pods.stdin_writes, len(pods.rest_requests)
            sandbox.run(CODE)
            print(
                f"requests per run: {len(api.requests) - a} to the API server "
                f"({', '.join(_named(x) for x in api.requests[a:])}), "
                f"{len(pods.starts) - s} gRPC Start, {pods.stdin_writes - w} WriteStdin, "
                f"{len(pods.rest_requests) - r} REST"
            )
            a, s, w, r = len(api.requests), len(pods.starts), pods.stdin_writes, len(pods.rest_requests)
            with sandbox.create() as session:
                session.write("data.txt", b"x")
                for _ in range(3):
                    session.run(CODE)
                session.read("data.txt")
            print(
                f"requests per session (write, 3 commands, read, close): {len(api.requests) - a} to the API server, "
                f"{len(pods.starts) - s} gRPC Start, {pods.stdin_writes - w} WriteStdin, "
                f"{len(pods.rest_requests) - r} REST"
            )
            ours: list[float] = []
            base: list[float] = []
            for _ in range(options.rounds):
                first: list[float] = []
                began = time.perf_counter()

                def seen(stream: str, data: bytes, first: list[float] = first, began: float = began) -> None:
                    first.append(time.perf_counter() - began)

                sandbox.run(CODE, on_output=seen)
                ours.append(first[0])
                base.append(bare())
            mine, theirs = statistics.median(ours), statistics.median(base)
            print(
                f"claim-to-first-output (stand-in, {options.rounds} rounds): median {mine * 1000:.1f} ms "
                f"(p90 {sorted(ours)[int(len(ours) * 0.9) - 1] * 1000:.1f} ms) against a bare python3 start's "
                f"{theirs * 1000:.1f} ms: {mine / theirs:.1f}x"
            )
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
