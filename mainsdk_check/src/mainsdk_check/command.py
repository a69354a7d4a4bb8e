"""``mainsdk check [paths...] [--env ENV] [--config FILE] [--format human|json|sarif] [--exclude PATTERN]...``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from mainsdk_check.config_checks import CannotCheck
from mainsdk_check.report import format_human, format_json, format_sarif
from mainsdk_check.runner import EXIT_CANNOT_CHECK, run_check

__all__ = ["main"]

PROG = "mainsdk check"
ENV_VAR = "MAINSDK_ENV"  # the environment the app runs in, read by the runtime too


class _UsageError(Exception):
    """A command-line mistake: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Raise instead of printing the usage and exiting: one line and a return value suit a hook better."""
        raise _UsageError(message)


def _parser() -> _Parser:
    parser = _Parser(
        prog=PROG,
        description=(
            "Find code that runs values that are not string literals (MAIN-SANDBOX-0010) and main.yaml "
            "problems (MAIN-SANDBOX-0011, MAIN-SANDBOX-0012 and every loader error). Exit status: 0 clean, "
            "1 findings, 2 the check could not run."
        ),
    )
    parser.add_argument("paths", nargs="*", help="files and directories to check (default: the working directory)")
    parser.add_argument(
        "--env",
        default=os.environ.get(ENV_VAR) or None,
        help=f"the environment to check main.yaml for, as at run time (default: ${ENV_VAR}); prod or production "
        "checks the driver and reads a main.prod.yaml overlay",
    )
    parser.add_argument("--config", help="the main.yaml to check (default: MAINSDK_CONFIG, else ./main.yaml)")
    parser.add_argument("--format", choices=["human", "json", "sarif"], default="human", help="output format")
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="PATTERN",
        help="a .gitignore-style pattern to skip, relative to the working directory (repeatable)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``mainsdk check`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit status.

    Prints the report on stdout; files that could not be checked and usage
    errors go to stderr as one line each, without a traceback.
    """
    try:
        options = _parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    except _UsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_CANNOT_CHECK
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    cwd = Path.cwd()
    try:
        result = run_check(options.paths, env=options.env, config=options.config, excludes=options.exclude, cwd=cwd)
    except CannotCheck as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_CANNOT_CHECK
    if options.format == "json":
        output = format_json(result)
    elif options.format == "sarif":
        output = format_sarif(result)
    else:
        output = format_human(result, cwd)
    try:
        sys.stdout.write(output)
    except UnicodeEncodeError:  # a terminal that cannot show a character the report quotes from a file
        encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
        sys.stdout.write(output.encode(encoding, "backslashreplace").decode(encoding))
    for error in result.errors:
        print(f"{PROG}: {error}", file=sys.stderr)
    return result.exit_status
