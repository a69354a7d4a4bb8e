"""Run every check over a set of paths and a config file, and collect the result."""

from __future__ import annotations

import io
import os
import tokenize
from collections.abc import Sequence
from pathlib import Path

import attrs
from mainsdk.config import CONFIG_ENV_VAR, DEFAULT_CONFIG_FILE

from mainsdk_check.config_checks import CannotCheck, check_config_files, is_config_file, overlay_files
from mainsdk_check.findings import Finding
from mainsdk_check.unsafe_eval import find_unsafe_eval
from mainsdk_check.walk import Walker, find_root, read_regular

__all__ = ["CheckResult", "display_path", "find_config", "run_check"]

EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_CANNOT_CHECK = 2
# A Python file past this is refused unread: no source is that large, and the parser's memory grows with it.
MAX_SOURCE_BYTES = 32 * 1024 * 1024


@attrs.frozen
class CheckResult:
    """What a check found.

    ``errors`` names each file that could not be checked (unreadable, not
    valid Python) and each config file the loader refuses (its problems are
    still findings); the other files are still checked, but the exit status is 2.
    """

    findings: tuple[Finding, ...]
    files_checked: int
    root: Path
    config: Path | None = None
    errors: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()  # paths given to check that ignore patterns exclude
    notes: tuple[str, ...] = ()  # what the check could not judge (a section no installed driver declares)

    @property
    def unsilenced(self) -> tuple[Finding, ...]:
        """The findings that fail the check."""
        return tuple(f for f in self.findings if not f.silenced)

    @property
    def silenced(self) -> tuple[Finding, ...]:
        """The findings a ``# mainsdk: allow`` comment accepted."""
        return tuple(f for f in self.findings if f.silenced)

    @property
    def exit_status(self) -> int:
        """2 when something could not be checked, else 1 with unsilenced findings, else 0."""
        if self.errors:
            return EXIT_CANNOT_CHECK
        return EXIT_FINDINGS if self.unsilenced else EXIT_CLEAN


def display_path(path: Path, root: Path) -> str:
    """A file as findings name it: POSIX and relative to ``root`` when inside it, else absolute."""
    path = Path(os.path.abspath(path))
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def find_config(config: str | None, cwd: Path) -> Path | None:
    """The ``main.yaml`` to check, as the loader finds it: ``config``, else ``$MAINSDK_CONFIG``, else ``./main.yaml``.

    None when there is none. Raises ``CannotCheck`` when ``config`` or
    ``$MAINSDK_CONFIG`` names a file that does not exist.
    """
    named = config if config is not None else os.environ.get(CONFIG_ENV_VAR) or None
    if named is not None:
        path = cwd / named
        if not path.is_file():
            where = "--config" if config is not None else CONFIG_ENV_VAR
            raise CannotCheck(f"{where} names {named}, which is not a file")
        return path
    default = cwd / DEFAULT_CONFIG_FILE
    return default if default.is_file() else None


def _check_file(path: Path, shown: str) -> list[Finding] | str:
    """The findings in one Python file, or why it could not be checked."""
    try:
        data = read_regular(path, MAX_SOURCE_BYTES)  # a FIFO named on the command line blocked the open for ever
        if data is None:
            return f"cannot read {shown}: not a regular file"
        if len(data) > MAX_SOURCE_BYTES:
            return f"cannot check {shown}: it is over {MAX_SOURCE_BYTES:,} bytes, too large to be source code"
        # What tokenize.open does: the PEP 263 coding line (or BOM) honoured, as Python does, newlines universal.
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        source = io.TextIOWrapper(io.BytesIO(data), encoding, line_buffering=True).read()
    except (OSError, SyntaxError, UnicodeDecodeError, LookupError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return f"cannot read {shown}: {reason}"
    try:
        return find_unsafe_eval(source, shown)
    except (RecursionError, MemoryError):
        # CPython's parser gives up on deep nesting with either (50,000 ``not``s: MemoryError from ast.parse).
        return f"cannot check {shown}: an expression is nested too deeply to analyse"
    except (SyntaxError, ValueError) as exc:
        line = f" line {exc.lineno}" if isinstance(exc, SyntaxError) and exc.lineno else ""
        detail = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        return f"cannot parse {shown}{line}: {detail}"


def run_check(
    paths: Sequence[str] = (),
    *,
    env: str | None = None,
    config: str | None = None,
    excludes: Sequence[str] = (),
    cwd: Path | None = None,
) -> CheckResult:
    """Check the Python files under ``paths`` (default: the working directory) and the config file.

    ``env`` is the environment to check the config for (``prod`` or
    ``production`` enables MAIN-SANDBOX-0011); ``config`` is the
    ``main.yaml`` to check (see ``find_config``); ``excludes`` are extra
    gitignore-style patterns. Raises ``CannotCheck`` when the check cannot
    run at all: a path or the config file does not exist or cannot be read.
    """
    cwd = (cwd or Path.cwd()).resolve()
    root = find_root(cwd)

    def shown(path: Path) -> str:
        """The path as findings name it."""
        return display_path(path, root)

    config_file = find_config(config, cwd)
    findings: list[Finding] = []
    errors: list[str] = []
    notes: list[str] = []
    if config_file is not None:
        checked = check_config_files(config_file, env, shown)
        findings += checked.findings
        errors += checked.unloadable
        notes += checked.notes
    walker = Walker(cwd, excludes)
    files = list(walker.files(paths or ["."]))
    errors += walker.errors
    # A main*.yaml named on the command line (the pre-commit hook passes the changed ones) is checked as a config
    # file too, by the loader and for its hosts, unless it is the config file or an overlay checked above.
    already: set[Path] = set()
    if config_file is not None:
        overlays = overlay_files(config_file, env) if env else []
        already = {config_file.resolve(), *(path.resolve() for path in overlays)}
    for given in sorted({(cwd / given).resolve() for given in paths}):
        if given not in already and is_config_file(given):
            checked = check_config_files(given, None, shown)
            findings += checked.findings
            errors += checked.unloadable
            notes += checked.notes
    for file in files:
        outcome = _check_file(file, shown(file))
        if isinstance(outcome, str):
            errors.append(outcome)
        else:
            findings += outcome
    return CheckResult(
        findings=tuple(sorted(findings, key=Finding.sort_key)),
        files_checked=len(files),
        root=root,
        config=config_file,
        errors=tuple(errors),
        skipped=tuple(shown(path) for path in walker.skipped),
        notes=tuple(notes),
    )
