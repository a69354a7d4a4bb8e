"""``mainsdk-conformance``: record a provider driver's cassettes, and check cassettes for credentials.

mainsdk-conformance record --driver e2b [--tests DIR] [--upstream NAME=URL] [-- PYTEST-ARGS]
mainsdk-conformance check PATH...
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from mainsdk_conformance.cassette import CassetteError, iter_files, load, secret_field_values
from mainsdk_conformance.profiles import PROFILES

# Where this repository keeps each driver's conformance conftest; a third party passes --tests.
DEFAULT_TESTS = "conformance/drivers/{driver}"
OUR_DRIVER_TESTS = {
    "e2b": "mainsdk_e2b/tests/conformance",
    "vercel-sandbox": "mainsdk_vercel/tests/conformance",
    "kubernetes": "mainsdk_kubernetes/tests/conformance",
}


def _record(args: argparse.Namespace) -> int:
    import pytest

    tests = Path(args.tests or OUR_DRIVER_TESTS.get(args.driver) or DEFAULT_TESTS.format(driver=args.driver))
    if not tests.exists():
        print(
            f"mainsdk-conformance: no tests at {tests}; pass --tests with the folder of the driver's conftest",
            file=sys.stderr,
        )
        return 2
    profile = PROFILES.get(args.driver)
    if profile is not None and not any(os.environ.get(name) for name in profile.credential_env):
        needed = " or ".join(profile.credential_env)
        print(f"mainsdk-conformance: recording {args.driver} needs a real account: set {needed}", file=sys.stderr)
        return 2
    command = [str(tests), "--conformance-record", "-p", "no:cacheprovider"]
    for upstream in args.upstream:
        command += ["--conformance-upstream", upstream]
    command += list(args.pytest_args)
    print(f"mainsdk-conformance: recording {args.driver}: pytest {' '.join(command)}", file=sys.stderr)
    return int(pytest.main(command))


def _check(args: argparse.Namespace) -> int:
    bad = 0
    files = list(iter_files(Path(p) for p in args.paths))
    for path in files:
        try:
            cassette = load(path)
            # A provider's secret fields (egress headers) hold only marks (Profile.secret_fields).
            profile = PROFILES.get(str(cassette.meta.get("provider")))
            found = secret_field_values(cassette.interactions, profile.secret_fields) if profile is not None else []
            if found:
                raise CassetteError(f"{path}: " + "; ".join(found))
        except CassetteError as exc:
            bad += 1
            print(exc, file=sys.stderr)
    print(f"{len(files) - bad} cassettes clean, {bad} refused")
    return 1 if bad else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = argparse.ArgumentParser(prog="mainsdk-conformance", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    record = commands.add_parser(
        "record",
        help="run a driver's conformance tests against the real provider and write their cassettes (scrubbed)",
    )
    record.add_argument("--driver", required=True, help="the driver id, e.g. e2b or vercel-sandbox")
    record.add_argument("--tests", help=f"the folder of the driver's conformance tests (default {DEFAULT_TESTS})")
    record.add_argument("--upstream", action="append", default=[], metavar="NAME=URL", help="forward NAME to URL")
    record.add_argument("pytest_args", nargs="*", help="passed to pytest (after --), e.g. -k TestRun")
    record.set_defaults(run=_record)
    check = commands.add_parser("check", help="refuse cassettes that are malformed or hold a credential")
    check.add_argument("paths", nargs="+", help="cassette files or folders of them")
    check.set_defaults(run=_check)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
