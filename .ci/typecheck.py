"""mypy --strict over the whole tree, with nothing listed by hand.

The distributions' packages are checked in one run (their source roots are ``[tool.mypy] mypy_path`` in
pyproject.toml). Test and benchmark folders import their siblings by bare name (pytest puts each test
folder on ``sys.path``) and several hold a ``conftest.py``, so one mypy run cannot hold them all: each
folder with Python files is checked on its own, with itself and its parent on the path. Every folder is
found by walking the tree, so a new test folder is type-checked the day it is added.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP = {".git", ".venv", ".tox", "build", "dist", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache"}
# Deliberately odd code the linter under test must judge; it is data, not code of ours.
DATA = {Path("mainsdk_check/tests/corpus")}
# Benchmarks run the tests' own fuzzers and readers, importing them from the test folders.
EXTRA_PATH = {
    Path("benchmarks"): [Path("mainsdk_check/tests"), Path("mainsdk_local/tests"), Path("mainsdk_kubernetes/tests")]
}


def source_roots() -> list[Path]:
    """The distributions' package roots, from pyproject.toml."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [ROOT / entry for entry in config["tool"]["mypy"]["mypy_path"]]


def folders_of_scripts(roots: list[Path]) -> list[Path]:
    """Every folder outside the package roots that holds Python files."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if d not in SKIP and not d.startswith("."))
        if any(here == root or root in here.parents for root in roots):
            continue
        if here.relative_to(ROOT) in DATA:
            dirs[:] = []
            continue
        if here != ROOT and any(name.endswith(".py") for name in files):
            found.append(here)
    return found


def mypy(targets: list[str], path: list[Path]) -> int:
    env = dict(os.environ, MYPYPATH=os.pathsep.join(str(p) for p in path))
    print("mypy", " ".join(targets), flush=True)
    return subprocess.call([sys.executable, "-m", "mypy", *targets], cwd=ROOT, env=env)


def main() -> int:
    roots = source_roots()
    packages = sorted(
        str(p.relative_to(ROOT)) for root in roots for p in root.iterdir() if (p / "__init__.py").exists()
    )
    failed = mypy(packages, []) != 0
    for folder in folders_of_scripts(roots):
        scripts = sorted(str(p.relative_to(ROOT)) for p in folder.glob("*.py"))
        extra = [ROOT / p for p in EXTRA_PATH.get(folder.relative_to(ROOT), [])]
        failed |= mypy(scripts, [folder, folder.parent, *extra]) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
