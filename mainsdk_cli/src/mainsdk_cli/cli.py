"""The ``mainsdk`` command line: ``mainsdk sandbox run``, ``mainsdk sandbox drivers``, and the plugins' commands.

Other distributions add commands through the ``mainsdk_cli_commands`` hook (``mainsdk_cli.hooks``):
``mainsdk check`` (mainsdk-check), ``mainsdk sandbox mcp`` (mainsdk-mcp). An app on core, like them: it
uses the interface (``Sandbox``, ``load_config``) as any app does.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import stat
import sys
from collections.abc import Sequence
from pathlib import Path

from mainsdk import __version__, errors
from mainsdk.config import load_config
from mainsdk.engine import SandboxDeps
from mainsdk.entry_points import installed_drivers
from mainsdk.errors import SandboxError
from mainsdk.languages import run_language, run_names
from mainsdk.lifecycle import RunResult
from mainsdk.secrets import SecretRef, secret
from mainsdk.sync import Sandbox

from mainsdk_cli.hooks import CliCommand, load_cli_commands
from mainsdk_cli.out_dir import NotWritten, OutDir, OutDirError
from mainsdk_cli.progress import show_waits

# Exit statuses for a stopped run, after the conventions of timeout(1) and the shell.
STOP_EXIT = {"timeout": 124, "memory": 137, "output": 141, "cost": 142}
ERROR_EXIT = 2
BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE: what the shell reports for a command whose reader closed the pipe
# The command line's own commands, which no plugin may replace.
OWN_COMMANDS = (("sandbox", "run"), ("sandbox", "drivers"))
EXTENSIONS = {".py": "python", ".js": "node", ".mjs": "node", ".cjs": "node", ".sh": "bash", ".bash": "bash"}


class UsageError(Exception):
    """A command-line mistake, printed without a traceback."""


def _parser(plugin_commands: dict[tuple[str, ...], CliCommand]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mainsdk", description="mainsdk sandbox: run code nobody reviewed.")
    parser.add_argument("--version", action="version", version=f"mainsdk {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    sandbox = commands.add_parser("sandbox", help="run code in a sandbox, list drivers")
    sandbox_commands = sandbox.add_subparsers(dest="sandbox_command", required=True)

    run = sandbox_commands.add_parser("run", help="run code and print its output")
    run.add_argument("path", nargs="?", help="a file of code, or - for stdin (default: stdin when --code is not given)")
    run.add_argument("--code", help="the code to run")
    run.add_argument(
        "--language",
        choices=run_names(),
        metavar="LANGUAGE",
        help=f"{', '.join(run_names())} (default: from the file's extension, else python)",
    )
    run.add_argument(
        "--file", action="append", default=[], metavar="NAME=PATH", help="put PATH in the work folder as NAME"
    )
    run.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="VALUE, or secret:NAME for a secret"
    )
    run.add_argument("--network", action="append", default=[], metavar="HOST", help="a host the run may reach")
    run.add_argument("--timeout", help="lower the time limit, like 5s")
    run.add_argument("--memory", help="lower the memory limit, like 64MB")
    run.add_argument("--output", dest="output_limit", help="lower the output limit, like 100KB")
    run.add_argument("--feature", default="cli", help="the name of the run in the audit event (default: cli)")
    run.add_argument("--config", help="the main.yaml to use (default: MAINSDK_CONFIG, else ./main.yaml)")
    run.add_argument("--json", action="store_true", help="print the whole result as JSON instead of the output")
    run.add_argument(
        "--out",
        metavar="DIR",
        help="write the files the code left in ../out/ into DIR, an existing folder below the current one "
        "(paths kept, never over an existing file)",
    )

    sandbox_commands.add_parser("drivers", help="list the installed drivers and their versions")

    for command in plugin_commands.values():
        # Listed here for --help only: main() hands a plugin's command its own arguments before parsing.
        group = sandbox_commands if command.words[:-1] == ("sandbox",) else commands
        group.add_parser(command.words[-1], help=command.help, add_help=False)
    return parser


def _read_code(args: argparse.Namespace) -> tuple[str, str | None]:
    if args.code is not None:
        if args.path:
            raise UsageError("give the code with --code or as a file, not both")
        return args.code, None
    if args.path and args.path != "-":
        data = _read_regular_file(args.path, f"cannot read the code file {args.path}")
        try:
            return data.decode(), args.path
        except UnicodeDecodeError as exc:
            raise UsageError(f"the code file {args.path} is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    if sys.stdin is None or (sys.stdin.isatty() and not args.path):
        raise UsageError("no code: pass --code '...', a file, or pipe the code on stdin")
    return sys.stdin.read(), None


def _read_regular_file(path: str, context: str) -> bytes:
    """The bytes of the regular file at ``path``; anything else is a usage error naming it.

    A device or a FIFO (``/dev/zero``, a named pipe) has no end: read whole, it filled the app's
    memory until a raw ``MemoryError`` traceback, or blocked for ever.
    """
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer before we can refuse it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UsageError(f"{context}: not a regular file (a device, FIFO or folder); give a file")
            os.set_blocking(fd, True)
            return handle.read()
    except OSError as exc:
        raise UsageError(f"{context}: {exc.strerror}") from None


def _language_of(path: str | None) -> str:
    """The language a code file's extension names; python for stdin or a file without one.

    Any other extension is refused: ``x.ts`` or ``x.rb`` run as Python only failed with a SyntaxError that
    hid the mistake, or worse, ran.
    """
    suffix = Path(path).suffix if path else ""
    if not suffix:
        return "python"
    if suffix not in EXTENSIONS:
        known = ", ".join(f"{ext} ({lang})" for ext, lang in EXTENSIONS.items())
        raise SandboxError(
            errors.INVALID_OPTION,
            f"{_shown(path or '')}: cannot tell the language from {_shown(suffix)}; a run takes {known}: pass "
            "--language python, node or bash (TypeScript runs in a session's typescript interpreter, not here)",
            ran=False,
        )
    return EXTENSIONS[suffix]


def _pairs(values: Sequence[str], option: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name:
            raise UsageError(f"{option} {value!r}: use NAME=VALUE")
        pairs[name] = rest
    return pairs


def _open_out(args: argparse.Namespace) -> OutDir | None:
    """The ``--out`` folder, checked before anything runs; MAIN-SANDBOX-0001 naming it when it cannot be used.

    Never the current folder or one holding it, nor the config's: main.yaml and the configuration tools read
    (uv.toml, pip.conf, .npmrc, conftest.py, ...) live there, and no filter of names can tell which file a tool
    will read, so the code's files go to a folder of their own.
    """
    if args.out is None:
        return None
    refuse = [("the current folder", os.getcwd())]
    config = args.config or os.environ.get("MAINSDK_CONFIG")
    if config:
        refuse.append(("the folder of the config file", os.path.dirname(os.path.abspath(config))))
    try:
        return OutDir.open(args.out, refuse=refuse)
    except OutDirError as exc:
        raise SandboxError(errors.INVALID_OPTION, f"--out {_shown(args.out)}: {exc}", ran=False) from None


def _run(args: argparse.Namespace) -> int:
    code, path = _read_code(args)
    language = run_language(args.language) if args.language else _language_of(path)
    files: dict[str, str | bytes] = {}
    for name, file_path in _pairs(args.file, "--file").items():
        files[name] = _read_regular_file(file_path, f"--file {name}={file_path}")
    env: dict[str, str | SecretRef] = {}
    for name, value in _pairs(args.env, "--env").items():
        env[name] = secret(value[len("secret:") :]) if value.startswith("secret:") else value
    limits = {k: v for k, v in (("timeout", args.timeout), ("memory", args.memory), ("output", args.output_limit)) if v}
    sandbox = Sandbox(SandboxDeps(config=load_config(args.config)))
    out = _open_out(args)
    try:
        return _run_and_report(args, sandbox, out, code, language, files, env, limits)
    finally:
        if out is not None:
            out.close()


def _run_and_report(
    args: argparse.Namespace,
    sandbox: Sandbox,
    out: OutDir | None,
    code: str,
    language: str,
    files: dict[str, str | bytes],
    env: dict[str, str | SecretRef],
    limits: dict[str, str],
) -> int:
    def echo(stream: str, data: bytes) -> None:
        target = sys.stdout if stream == "stdout" else sys.stderr
        target.buffer.write(data)
        target.flush()

    result = sandbox.run(
        code,
        language,
        files=files,
        env=env,
        network=args.network,
        feature=args.feature,
        limits=limits or None,
        on_output=None if args.json else echo,
    )
    # From here on nothing may stop the result from being printed: a file that cannot be written is reported.
    not_written: list[dict[str, str | int]] = []
    written = _write_out_files(sandbox, result, out, not_written)
    drawn = _write_figures(sandbox, result, out, not_written)
    if args.json:
        data = result.to_dict()
        for entry in data["files"]:
            entry["written"] = written.get(entry["id"])
        for entry, path in zip(data["results"], drawn, strict=True):
            entry["written"] = path
        data["not_written"] = not_written
        print(json.dumps(data, indent=2))
    elif result.stop:
        print(f"mainsdk: stopped: {result.stop} ({result.stop_code})", file=sys.stderr)
    elif result.signal:
        print(f"mainsdk: the code was killed by {result.signal} (exit {result.exit_code})", file=sys.stderr)
    if result.stop:
        return STOP_EXIT[result.stop]
    return result.exit_code if result.exit_code is not None else 1


def _shown(name: str) -> str:
    """``name`` as the CLI prints it: quoted and escaped when it holds a control character.

    The code chooses its out-file names: raw, a newline forged a "mainsdk: ..." line and an escape
    sequence reached the terminal, even with --json, where the code's own output is escaped.
    """
    return name if name.isprintable() else repr(name)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _them(number: int) -> str:
    return "it" if number == 1 else "them"


def _write_out_files(
    sandbox: Sandbox, result: RunResult, out: OutDir | None, not_written: list[dict[str, str | int]]
) -> dict[str, str]:
    """Write the run's out files into ``out`` (if given) and say so on stderr; their paths by file id.

    A file that cannot be written (its name is taken, a link is in the way, no room) is named on stderr and
    added to ``not_written`` with the reason; the others are still written.
    """
    written: dict[str, str] = {}
    for name in result.files_dropped:
        print(
            f"mainsdk: out file not kept: {_shown(name)} (past limits.files, not a regular file, or no room)",
            file=sys.stderr,
        )
    if out is None:
        if result.files:
            count = len(result.files)
            print(f"mainsdk: {_count(count, 'out file')}; pass --out DIR to write {_them(count)}", file=sys.stderr)
        return written
    for ref in result.files:
        try:
            path = out.write(ref.name, sandbox.files.read(ref))
        except (NotWritten, OSError, SandboxError) as exc:  # out of descriptors, the store gone: still printed
            print(f"mainsdk: out file not written: {ref.name!r}: {exc}", file=sys.stderr)
            not_written.append({"name": ref.name, "id": ref.id, "reason": str(exc)})
            continue
        written[ref.id] = str(path)
        print(f"mainsdk: wrote {_shown(str(path))} ({ref.size} bytes)", file=sys.stderr)
    return written


def _write_figures(
    sandbox: Sandbox, result: RunResult, out: OutDir | None, not_written: list[dict[str, str | int]]
) -> list[str | None]:
    """Write the run's figures (``results``) as ``figure-<n>.png`` into ``out``; where each went, in order.

    A name already there (the code's own out file of that name, or an earlier file) is left as it is: that
    figure stays in the result only.
    """
    if out is None:
        if result.results:
            count = len(result.results)
            print(f"mainsdk: {_count(count, 'figure')}; pass --out DIR to write {_them(count)}", file=sys.stderr)
        return [None] * len(result.results)
    own = {ref.name for ref in result.files}
    paths: list[str | None] = []
    for number, figure in enumerate(result.results, start=1):
        name = f"figure-{number}.png"
        try:
            data = (figure.file and sandbox.files.read(figure.file)) or figure.bytes() or b""
            path = out.write(name, data)
        except (NotWritten, OSError, SandboxError) as exc:
            reason = f"the code's own {name} is there" if name in own else str(exc)
            print(f"mainsdk: figure {number} not written: {reason}", file=sys.stderr)
            not_written.append({"name": name, "figure": number, "reason": reason})
            paths.append(None)
            continue
        paths.append(str(path))
        print(f"mainsdk: wrote {_shown(str(path))} ({len(data)} bytes, a figure)", file=sys.stderr)
    return paths


def _drivers() -> int:
    drivers = installed_drivers()
    if not drivers:
        print("no drivers installed; install one, like mainsdk-local (pip install mainsdk-local)")
        return 0
    for driver in drivers:
        print(f"{driver.id:<16} {driver.distribution} {driver.version}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        plugin_commands = load_cli_commands(reserved=OWN_COMMANDS)
        for words, command in plugin_commands.items():
            if tuple(argv[: len(words)]) == words:
                return command.main(argv[len(words) :])
        args = _parser(plugin_commands).parse_args(argv)
        if args.sandbox_command == "drivers":
            return _drivers()
        display = show_waits()  # a package set's first build, on a terminal: what and why, not silence
        try:
            return _run(args)
        finally:
            if display is not None:
                logging.getLogger("mainsdk").removeHandler(display)
                display.close()
    except SandboxError as exc:
        print(f"mainsdk: {exc}", file=sys.stderr)
        return ERROR_EXIT
    except UsageError as exc:
        print(f"mainsdk: {exc}", file=sys.stderr)
        return ERROR_EXIT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``| head -1``): stop quietly, as a CLI killed by SIGPIPE would (128 + 13).
        # The run was stopped when its output could not be written; stdout now goes nowhere, so that the
        # interpreter's last flush at exit cannot raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return BROKEN_PIPE_EXIT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
