"""Fuzz the local driver's proxy: one unambiguous request per connection, for the allowed host only.

Mutated requests (sound ones and known smuggling forms, edited at random from a
fixed seed) are written raw from inside a real box to the proxy; every byte
that reaches the upstream, a server this script starts on 127.0.0.1, is
checked (``mainsdk_local/tests/_proxy_fuzz.py``; the test suite runs a
240-case slice). Prints the answers' tally and any finding; exits 1 on one.

    python benchmarks/proxy_fuzz.py [--seed 1] [--rounds 20] [--cases 240]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from mainsdk import Sandbox, SandboxDeps
from mainsdk.config import load_config_text

from mainsdk_local import local_sandbox_driver

TESTS = Path(__file__).resolve().parent.parent / "mainsdk_local" / "tests"
CONFIG = """
sandbox:
  driver: local
  network: [api.example.test]
  limits: { timeout: 20s, memory: 256MB }
network:
  allow: [api.example.test]
permissions:
  processes: [python3]
"""


def main() -> int:
    """Run the rounds; print each round's tally and findings; return 1 if any."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=20, help="runs, each with its own seed (seed, seed+1, ...)")
    parser.add_argument("--cases", type=int, default=240, help="requests per run")
    args = parser.parse_args()
    logging.getLogger("mainsdk").setLevel(logging.ERROR)  # the refusals the fuzz provokes on purpose
    sys.path.insert(0, str(TESTS))  # the fuzzer lives with the test that runs a slice of it
    from _proxy_fuzz import API, fuzz_in_box

    driver = local_sandbox_driver(resolve={API: "127.0.0.1"})
    sandbox = Sandbox(SandboxDeps(config=load_config_text(CONFIG), driver=driver, load_entrypoints=False))
    findings = 0
    try:
        for seed in range(args.seed, args.seed + args.rounds):
            _, tally, found = fuzz_in_box(sandbox, seed, args.cases)
            findings += len(found)
            print(f"seed {seed}: {dict(sorted(tally.items()))}; findings: {len(found)}")
            for data, why in found[:3]:
                print(f"  {why}: {data[:300]!r}")
    finally:
        sandbox.close()
    print(f"{args.rounds * args.cases} requests, {findings} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
