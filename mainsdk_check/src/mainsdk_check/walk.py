"""Which Python files ``mainsdk check`` reads: the paths given, less what ignore files exclude.

Ignore patterns use ``.gitignore`` syntax and rules, implemented here so the
check needs no extra dependency: ``#`` comments, ``!`` to re-include, a
trailing ``/`` for directories only, a leading or inner ``/`` to anchor a
pattern to its file's directory, ``*``, ``?``, ``[...]`` and ``**``. The last
matching pattern wins, patterns in deeper directories override those above,
and nothing under an excluded directory is re-included (git does the same).

They are read from, in rising precedence: a few built-in excludes
(``.git``, virtualenvs, caches), ``.git/info/exclude``, the ``.gitignore``
and ``.mainsdkignore`` of each directory from the repository root down, and
``--exclude`` patterns (relative to the working directory). Excludes apply
to files named on the command line too, so a pre-commit run skips them.
Not supported: git's global excludes file (``core.excludesFile``).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from functools import cache
from pathlib import Path

import attrs

from mainsdk_check.config_checks import CannotCheck

__all__ = ["DEFAULT_EXCLUDES", "IGNORE_FILES", "IgnorePattern", "Walker", "find_root", "is_python_file"]

IGNORE_FILES = (".gitignore", ".mainsdkignore")
DEFAULT_EXCLUDES = (
    ".git/",
    ".hg/",
    ".svn/",
    "__pycache__/",
    ".venv/",
    ".tox/",
    ".nox/",
    ".eggs/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".pytest_cache/",
    "node_modules/",
    "site-packages/",
)
PYTHON_SUFFIXES = (".py", ".pyw")


def find_root(start: Path) -> Path:
    """The repository root above ``start`` (the nearest directory holding ``.git``), else ``start``."""
    start = start.resolve()
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return start


def read_regular(path: Path, limit: int) -> bytes | None:
    """Up to ``limit`` + 1 bytes of the regular file at ``path``; None when it is anything else.

    Opened without blocking and judged by what fstat says of the open file: a FIFO named on the command line
    (or put where a ``.gitignore`` is) blocked the open for ever, and a device never ends.
    Raises ``OSError`` as opening does.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        os.set_blocking(fd, True)
        return file.read(limit + 1)


def is_python_file(path: Path) -> bool:
    """A ``.py``/``.pyw`` file, or a script whose first line is a Python ``#!`` line (as pre-commit sees it)."""
    if path.suffix in PYTHON_SUFFIXES:
        return True
    try:
        head = read_regular(path, 200)
    except OSError:
        return False
    first = (head or b"").split(b"\n", 1)[0]
    return first.startswith(b"#!") and b"python" in first


def _translate(pattern: str) -> str:
    """A gitignore glob (anchored, without its leading ``/``) as a regular expression over a relative path."""
    out = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if pattern.startswith("**/", i) and (i == 0 or pattern[i - 1] == "/"):
            out.append("(?:.*/)?")  # zero or more directories
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == n:
            out.append("/.*")  # everything inside
            i += 3
        elif char == "*":
            while i < n and pattern[i] == "*":  # other runs of * are a plain *
                i += 1
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
            i += 1
        elif char == "[":
            end = i + 1
            if end < n and pattern[end] in "!^":
                end += 1
            if end < n and pattern[end] == "]":
                end += 1
            end = pattern.find("]", end)
            if end == -1:
                out.append(re.escape(char))  # no closing ]: a literal [
                i += 1
            else:
                body = pattern[i + 1 : end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("(?!/)[" + body.replace("\\", "\\\\").replace("[", "\\[") + "]")
                i = end + 1
        elif char == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(char))
            i += 1
    return "".join(out)


@attrs.frozen
class IgnorePattern:
    """One line of an ignore file, applying to paths under ``base``."""

    base: Path
    regex: re.Pattern[str]
    negated: bool
    directory_only: bool

    @classmethod
    def parse(cls, line: str, base: Path) -> IgnorePattern | None:
        """Parse one line; None for a blank line or a comment."""
        line = line.rstrip("\n").rstrip("\r")
        # Trailing spaces are dropped unless escaped with a backslash.
        stripped = line.rstrip(" ")
        if stripped.endswith("\\") and len(stripped) < len(line):
            stripped += " "
        line = stripped
        if not line or line.startswith("#"):
            return None
        negated = line.startswith("!")
        if negated:
            line = line[1:]
        elif line.startswith("\\"):
            line = line[1:] if line[1:2] in ("#", "!") else line
        directory_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            return None
        # A slash at the start or in the middle anchors the pattern to its file's directory.
        anchored = "/" in line
        line = line.lstrip("/")
        if not anchored and not line.startswith("**/"):
            line = "**/" + line
        return cls(base, re.compile(_translate(line) + r"\Z", re.DOTALL), negated, directory_only)

    def matches(self, path: Path, is_dir: bool) -> bool:
        """Whether ``path`` (absolute) is matched by this pattern, not counting its parent directories."""
        if self.directory_only and not is_dir:
            return False
        try:
            relative = path.relative_to(self.base).as_posix()
        except ValueError:
            return False
        return relative != "." and self.regex.match(relative) is not None


MAX_IGNORE_FILE_BYTES = 1024 * 1024


def _read_patterns(file: Path, base: Path) -> list[IgnorePattern]:
    try:
        data = read_regular(file, MAX_IGNORE_FILE_BYTES)
    except OSError:
        return []
    text = (data or b"")[:MAX_IGNORE_FILE_BYTES].decode("utf-8", errors="replace")
    return [p for line in text.splitlines() if (p := IgnorePattern.parse(line, base)) is not None]


class Walker:
    """Lists the Python files under the given paths that no ignore pattern excludes."""

    def __init__(self, cwd: Path, excludes: Sequence[str] = ()) -> None:
        self.cwd = cwd.resolve()
        self.excludes = [p for e in excludes if (p := IgnorePattern.parse(e, self.cwd)) is not None]
        self._patterns = cache(self._patterns_uncached)
        self.skipped: list[Path] = []  # paths named on the command line that an ignore pattern excludes
        self.errors: list[str] = []  # directories that could not be listed; the rest is still walked

    def _patterns_uncached(self, directory: Path) -> tuple[IgnorePattern, ...]:
        """The patterns that apply to entries of ``directory``, lowest precedence first."""
        if (directory / ".git").exists() or directory.parent == directory:
            inherited = [IgnorePattern.parse(p, directory) for p in DEFAULT_EXCLUDES]
            patterns = [p for p in inherited if p is not None]
            patterns += _read_patterns(directory / ".git" / "info" / "exclude", directory)
        else:
            patterns = list(self._patterns(directory.parent))
        for name in IGNORE_FILES:
            patterns += _read_patterns(directory / name, directory)
        return tuple(patterns)

    def ignored(self, path: Path, is_dir: bool) -> bool:
        """Whether ``path`` itself is excluded, by the last pattern that matches it."""
        verdict = False
        for pattern in (*self._patterns(path.parent), *self.excludes):
            if pattern.matches(path, is_dir):
                verdict = not pattern.negated
        return verdict

    def excluded(self, path: Path, is_dir: bool) -> bool:
        """Whether ``path`` or a directory above it, below its repository root, is excluded."""
        if (path / ".git").exists():
            return False  # a repository root is never excluded by the patterns above it
        if self.ignored(path, is_dir):
            return True
        for parent in path.parents:
            if (parent / ".git").exists():
                return False
            if self.ignored(parent, True):
                return True
        return False

    def files(self, paths: Iterable[str]) -> Iterator[Path]:
        """The Python files to check, each once, in a stable order. Raises ``CannotCheck`` for a missing path."""
        seen: set[Path] = set()
        for given in paths:
            path = Path(os.path.normpath(self.cwd / given))
            if not path.exists():
                raise CannotCheck(f"{given}: no such file or directory")
            is_dir = path.is_dir()
            if self.excluded(path, is_dir):
                self.skipped.append(path)
                continue
            found = self._walk(path) if is_dir else [path] if is_python_file(path) else []
            for file in found:
                if file not in seen:
                    seen.add(file)
                    yield file

    def _walk(self, directory: Path) -> Iterator[Path]:
        try:
            entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
        except OSError as exc:
            self.errors.append(f"cannot list {directory}: {exc.strerror}")
            return
        for entry in entries:
            path = Path(entry.path)
            # Symlinked directories are not followed, so a link cannot loop or leave the tree.
            is_dir = entry.is_dir(follow_symlinks=False)
            if self.ignored(path, is_dir):
                continue
            if is_dir:
                yield from self._walk(path)
            elif path.suffix in PYTHON_SUFFIXES and entry.is_file():
                yield path
