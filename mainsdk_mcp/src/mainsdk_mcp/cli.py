"""``mainsdk sandbox mcp``: added to the ``mainsdk`` command line through the ``mainsdk_cli_commands`` hook.

Loaded by every ``mainsdk`` command to list it, so it imports ``mcp`` (through ``mainsdk_mcp.server``) only
when the command runs.
"""

from __future__ import annotations

import argparse
import sys

from mainsdk.config import load_config
from mainsdk.engine import SandboxDeps
from mainsdk.hookspecs import hookimpl
from mainsdk.languages import run_names
from mainsdk.sync import Sandbox
from mainsdk_cli.hooks import CliCommands

PROG = "mainsdk sandbox mcp"
HELP = "serve the code-runner action over MCP on stdio"
MISSING_EXIT = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=HELP)
    parser.add_argument("--name", default="code.run", help="the action's name (default: code.run)")
    parser.add_argument("--intent", default="Run code", help="what the tool is for, shown to the model")
    parser.add_argument(
        "--language",
        action="append",
        choices=run_names(),
        metavar="LANGUAGE",
        help=f"an allowed language, again for more: {', '.join(run_names())} (default: python)",
    )
    parser.add_argument("--config", help="the main.yaml to use (default: MAINSDK_CONFIG, else ./main.yaml)")
    parser.add_argument(
        "--session", action="store_true", help="keep one sandbox session for the client: files stay between calls"
    )
    return parser


def main(argv: list[str]) -> int:
    """Serve the action on stdio until the client goes; a bad ``main.yaml`` raises ``SandboxError`` (the CLI
    prints it, exit 2), a bad option exits 2 with the usage, as argparse does."""
    args = _parser().parse_args(argv)
    try:
        from mainsdk_mcp.server import languages_option, serve_stdio
    except ImportError as exc:  # a broken install: mcp is a dependency of this distribution
        print(f"{PROG}: the MCP server needs the mcp package; reinstall mainsdk-mcp ({exc})", file=sys.stderr)
        return MISSING_EXIT
    sandbox = Sandbox(SandboxDeps(config=load_config(args.config)))
    action = sandbox.action(name=args.name, intent=args.intent, languages=languages_option(args.language))
    serve_stdio(action, session=args.session)
    return 0


@hookimpl
def mainsdk_cli_commands(commands: CliCommands) -> None:
    """Add ``mainsdk sandbox mcp``."""
    commands.add("sandbox mcp", help=HELP, main=main)
