"""One version, written once: ``mainsdk.__version__``. Every distribution's metadata and ``--version`` agree."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import mainsdk
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
VERSION_FILE = REPO / "core" / "src" / "mainsdk" / "__init__.py"
SKIP_DIRS = {".venv", ".tox", ".git", "node_modules", "build", "dist"}


def repo_files(suffixes: set[str]) -> list[Path]:
    """The repository's own files with these suffixes (never a venv's or tox's)."""
    found = []
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        found += [Path(folder, f) for f in files if Path(f).suffix in suffixes]
    return sorted(found)


def pyprojects() -> list[Path]:
    found = [p for p in repo_files({".toml"}) if p.name == "pyproject.toml"]
    assert len(found) >= 8, found  # the workspace, core, local, e2b, vercel, conformance, two plugins
    return found


def test_mainsdk_version_prints_the_installed_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mainsdk_cli", "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"mainsdk {importlib.metadata.version('mainsdk')}\n"
    assert importlib.metadata.version("mainsdk") == mainsdk.__version__


def test_every_pyproject_reads_the_one_version() -> None:
    for path in pyprojects():
        data = tomllib.loads(path.read_text())
        where = path.relative_to(REPO)
        assert "version" not in data["project"], f"{where}: a hard-coded version; use dynamic = ['version']"
        assert "version" in data["project"].get("dynamic", []), where
        source = path.parent / data["tool"]["hatch"]["version"]["path"]
        assert source.resolve() == VERSION_FILE, f"{where}: the version must come from {VERSION_FILE}"


def test_no_exact_pin_between_our_distributions() -> None:
    # A driver pinned to ==0.4.0 breaks on every core patch release; a range that holds this version does not.
    current = Version(mainsdk.__version__)
    for path in pyprojects():
        project = tomllib.loads(path.read_text())["project"]
        requirements = list(project.get("dependencies", []))
        for extra in project.get("optional-dependencies", {}).values():
            requirements += extra
        for text in requirements:
            requirement = Requirement(text)
            if not requirement.name.startswith("mainsdk") or requirement.url:
                continue
            assert not any(s.operator in ("==", "===") for s in requirement.specifier), f"{path}: {text}"
            assert requirement.specifier.contains(current), f"{path}: {text} excludes {current}"


def test_the_version_is_written_nowhere_else() -> None:
    literal = re.compile(re.escape(f'"{mainsdk.__version__}"') + "|" + re.escape(f"'{mainsdk.__version__}'"))
    copies = []
    for path in repo_files({".py", ".toml", ".cfg", ".ini"}):
        if path != VERSION_FILE and literal.search(path.read_text(errors="replace")):
            copies.append(str(path.relative_to(REPO)))
    assert copies == [], "the version is hard-coded here; read mainsdk.__version__ or importlib.metadata"


def test_every_installed_distribution_has_the_same_version() -> None:
    ours = {
        d.metadata["Name"]: d.version
        for d in importlib.metadata.distributions()
        if (d.metadata["Name"] or "").startswith("mainsdk") and d.metadata["Name"] != "mainsdk-workspace"
    }
    assert ours.get("mainsdk") == mainsdk.__version__
    assert set(ours.values()) == {mainsdk.__version__}, ours
