"""Fuzz the local driver's proxy, differentially: what reaches the origin is read alike by h11 and llhttp.

Two paths, each from inside a real box, each to a server this script starts on 127.0.0.1 that records
every byte it receives:

- ``plain``: mutated plain-HTTP requests (sound ones and known smuggling forms, edited at random) to the
  proxy; one unambiguous request per connection, for the allowed host only
  (``mainsdk_local/tests/_proxy_fuzz.py``; the suite runs a 240-case slice);
- ``egress``: requests generated from the HTTP grammar (framing headers, Host forms, chunk sizes, line
  ends, pipelining) inside tunnels to a host with an egress header, which the proxy intercepts; every
  request the origin received is read alike by h11 and llhttp (``httptools``), is for that host, and
  carries the key once and nowhere else (``mainsdk_local/tests/_egress_fuzz.py``; the suite runs 160).

Prints each round's tally and findings (a disagreement is one); exits 1 on any.

    python benchmarks/proxy_fuzz.py [--path both] [--seed 1] [--rounds 20] [--cases 240]
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
  network: [api.example.test, other.example.test]
  secrets: [TEST_API_KEY]
  limits: { timeout: 120s, memory: 256MB }
network:
  allow: [api.example.test, other.example.test]
permissions:
  processes: [python3]
"""


def main() -> int:
    """Run the rounds; print each round's tally and findings; return 1 if any."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", choices=["plain", "egress", "both"], default="both")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=20, help="runs per path, each with its own seed")
    parser.add_argument("--cases", type=int, default=240, help="requests per run")
    args = parser.parse_args()
    logging.getLogger("mainsdk").setLevel(logging.ERROR)  # the refusals the fuzz provokes on purpose
    sys.path.insert(0, str(TESTS))  # the fuzzers live with the tests that run a slice of them
    import _egress_fuzz
    import _proxy_fuzz

    test_ca = (TESTS / "data" / "test-ca.crt").read_text()
    resolve = {_proxy_fuzz.API: "127.0.0.1", _egress_fuzz.OTHER: "127.0.0.1"}
    driver = local_sandbox_driver(resolve=resolve, upstream_ca=test_ca)
    deps = SandboxDeps(
        config=load_config_text(CONFIG),
        driver=driver,
        load_entrypoints=False,
        secret={"TEST_API_KEY": _egress_fuzz.KEY}.get,
    )
    sandbox = Sandbox(deps)
    totals = {"plain": [0, 0, 0], "egress": [0, 0, 0]}  # requests tried, requests the origin received, findings
    try:
        for path in ["plain", "egress"] if args.path == "both" else [args.path]:
            for seed in range(args.seed, args.seed + args.rounds):
                if path == "plain":
                    answers, tally, found = _proxy_fuzz.fuzz_in_box(sandbox, seed, args.cases)
                    read = sum(a.startswith("HTTP/1.1 200") for a in answers)
                else:
                    read, tally, found = _egress_fuzz.fuzz_in_box(sandbox, seed, args.cases, test_ca, "120s")
                totals[path][0] += args.cases
                totals[path][1] += read
                totals[path][2] += len(found)
                print(f"{path} seed {seed}: {dict(sorted(tally.items()))}; findings: {len(found)}", flush=True)
                for data, why in found[:3]:
                    print(f"  {why}: {data[:300]!r}")
    finally:
        sandbox.close()
    for path, (tried, read, findings) in totals.items():
        if tried:
            print(
                f"{path}: {tried} requests tried, {read} received by the origin and read by both parsers, "
                f"{findings} findings (disagreements included)"
            )
    return 1 if any(findings for _, _, findings in totals.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
