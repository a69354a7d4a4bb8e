"""Which files are checked: .gitignore semantics (compared with git itself), .mainsdkignore, --exclude, paths."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from mainsdk_check.walk import IgnorePattern, Walker

from mainsdk_check import CannotCheck

TREE = [
    "app.py",
    "main.py",
    "debug.py",
    "src/pkg/__init__.py",
    "src/pkg/core.py",
    "src/pkg/generated_pb2.py",
    "src/pkg/vendor/lib.py",
    "src/pkg/vendor/keep.py",
    "build/out.py",
    "docs/conf.py",
    "docs/build/x.py",
    "tests/test_a.py",
    "tests/data/sample.py",
    "tests/data/nested/deep.py",
    "tools/[x]name.py",
    "tools/space name.py",
    "scripts/a1.py",
    "scripts/ab.py",
    "scripts/sub/a2.py",
    ".hidden/h.py",
    "README.md",
]

# Each set is a .gitignore at the root, and optionally one in tests/.
IGNORES = [
    ["build/"],
    ["/build", "docs/build"],
    ["*.py", "!app.py"],
    ["debug.py", "**/vendor/**", "!src/pkg/vendor/keep.py"],  # re-including under an excluded directory fails
    ["src/**/generated_*.py"],
    ["tests/data"],
    ["data/"],
    ["scripts/a?.py", "tools/\\[x\\]name.py"],
    ["scripts/a[0-9].py", "scripts/*/"],
    ["tools/space\\ name.py", "# a comment", "", "\\#not-a-comment"],
    ["/*.py", "!/main.py"],
    ["**/nested", ".hidden"],
    ["src/pkg/vendor", "!src/pkg/vendor/"],
    ["*.py", "!*/"],
]


def make_tree(root: Path) -> None:
    for name in TREE:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n", encoding="utf-8")


def walked(root: Path, paths: list[str] | None = None, excludes: list[str] | None = None) -> set[str]:
    files = Walker(root, excludes or []).files(paths or ["."])
    return {file.relative_to(root).as_posix() for file in files}


def git_untracked(root: Path) -> set[str]:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "--others", "--exclude-standard", "-z"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    return {name for name in listed.split("\0") if name.endswith(".py")}


@pytest.mark.skipif(shutil.which("git") is None, reason="git is the reference for .gitignore semantics")
@pytest.mark.parametrize("patterns", IGNORES, ids="|".join)
@pytest.mark.parametrize("nested", [False, True], ids=["root", "nested"])
def test_gitignore_semantics_match_git(tmp_path: Path, patterns: list[str], nested: bool) -> None:
    make_tree(tmp_path)
    (tmp_path / ".gitignore").write_text("\n".join(patterns) + "\n", encoding="utf-8")
    if nested:
        # A deeper .gitignore overrides the root's for its own directory.
        (tmp_path / "tests" / ".gitignore").write_text("!sample.py\ntest_*.py\n", encoding="utf-8")
    expected = git_untracked(tmp_path)
    assert walked(tmp_path) == expected


def test_default_excludes_skip_git_and_virtualenvs(tmp_path: Path) -> None:
    for name in (".git/hooks/x.py", ".venv/lib/y.py", "pkg/__pycache__/z.py", "node_modules/m/n.py", "ok.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n", encoding="utf-8")
    assert walked(tmp_path) == {"ok.py"}


def test_mainsdkignore_is_read_like_gitignore(tmp_path: Path) -> None:
    make_tree(tmp_path)
    (tmp_path / "tests" / ".mainsdkignore").write_text("data/\n", encoding="utf-8")
    assert not any(name.startswith("tests/data/") for name in walked(tmp_path))
    assert "tests/test_a.py" in walked(tmp_path)


def test_exclude_patterns_are_relative_to_the_working_directory(tmp_path: Path) -> None:
    make_tree(tmp_path)
    files = walked(tmp_path, excludes=["src/pkg", "test_*.py"])
    assert not any(name.startswith("src/pkg/") for name in files)
    assert "tests/test_a.py" not in files
    assert "tests/data/sample.py" in files


def test_excludes_apply_to_files_named_on_the_command_line(tmp_path: Path) -> None:
    # pre-commit names every staged file; an excluded one must still be skipped.
    make_tree(tmp_path)
    (tmp_path / ".gitignore").write_text("build/\n", encoding="utf-8")
    assert walked(tmp_path, ["build/out.py", "app.py"], excludes=["app.py"]) == set()
    assert walked(tmp_path, ["build"]) == set()
    assert walked(tmp_path, ["main.py", "./main.py", "src/../main.py"]) == {"main.py"}


def test_a_named_script_without_py_is_checked_when_it_is_python(tmp_path: Path) -> None:
    (tmp_path / "tool").write_text("#!/usr/bin/env python3\neval(x)\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("eval(x)\n", encoding="utf-8")
    assert walked(tmp_path, ["tool", "notes.txt"]) == {"tool"}
    assert walked(tmp_path) == set()  # a directory walk takes .py and .pyw files only


def test_a_missing_path_cannot_be_checked(tmp_path: Path) -> None:
    with pytest.raises(CannotCheck, match=re.escape("nope.py: no such file or directory")):
        walked(tmp_path, ["nope.py"])


@pytest.mark.parametrize(
    ("line", "path", "is_dir", "matches"),
    [
        ("*.py", "a/b.py", False, True),
        ("/b.py", "a/b.py", False, False),
        ("a/**/c.py", "a/c.py", False, True),
        ("a/**/c.py", "a/x/y/c.py", False, True),
        ("a/**", "a/x/y", False, True),
        ("a/**", "a", True, False),
        ("build/", "build", False, False),
        ("build/", "build", True, True),
        ("[!a]x.py", "bx.py", False, True),
        ("[!a]x.py", "ax.py", False, False),
        ("\\!x.py", "!x.py", False, True),
        ("x.py\\ ", "x.py ", False, True),
    ],
)
def test_pattern_rules(tmp_path: Path, line: str, path: str, is_dir: bool, matches: bool) -> None:
    pattern = IgnorePattern.parse(line, tmp_path)
    assert pattern is not None
    assert pattern.matches(tmp_path / path, is_dir) is matches


def test_a_directory_that_cannot_be_listed_is_an_error_and_the_rest_is_walked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_tree(tmp_path)
    real_scandir = os.scandir

    def scandir(path: str | os.PathLike[str]) -> object:
        if Path(path).name == "docs":
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    walker = Walker(tmp_path)
    files = {file.relative_to(tmp_path).as_posix() for file in walker.files(["."])}
    assert "app.py" in files
    assert not any(name.startswith("docs/") for name in files)
    assert walker.errors == [f"cannot list {tmp_path / 'docs'}: Permission denied"]
