"""Author the conformance cassettes: record the suite against the stand-in cluster (``standin/``).

    python mainsdk_kubernetes/tests/conformance/author.py [PYTEST-ARGS]   # e.g. -k TestRun

The recorder forwards the driver's API requests to the stand-in's API server on loopback, so it labels what it
writes ``made: authored`` (``how: recorded against a stand-in on this machine``); the pods' sandboxd is the same
stand-in, in this process, as in replay.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

import pytest  # noqa: E402

import standin  # noqa: E402
from standin.apiserver import ApiServer  # noqa: E402
from standin.pods import Pods  # noqa: E402

MEMORY = 64 * 1024 * 1024


def main() -> int:
    """Record every test (or those PYTEST-ARGS select) against a fresh stand-in."""
    pods = Pods(memory=MEMORY)
    api = ApiServer(pods, namespace="mainsdk", pool="python-pool", memory="64Mi")
    api.start()
    standin.ACTIVE = api
    try:
        return int(
            pytest.main(
                [
                    str(HERE),
                    "--conformance-record",
                    "--conformance-upstream",
                    f"api={api.url}",
                    "-p",
                    "no:cacheprovider",
                    "-q",
                    *sys.argv[1:],
                ]
            )
        )
    finally:
        standin.ACTIVE = None
        api.stop()
        pods.close()


if __name__ == "__main__":
    sys.exit(main())
