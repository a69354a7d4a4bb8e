"""The app-side wheelhouse the remote drivers share: real pip against the app's package index (PyPI here and in CI)."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
from pathlib import Path

import attrs
import pytest
from mainsdk.errors import INVALID_OPTION, SandboxError
from mainsdk.wheelhouse import Wheelhouse, failure_message, manylinux_platforms, wheels_key

INICONFIG = "iniconfig==2.0.0"  # a small pure-Python wheel


@attrs.frozen
class Interpreter:
    """The smallest box interpreter a driver could describe: CPython of a version on glibc 2.36, x86_64."""

    version: str

    def pip_target(self) -> list[str]:
        abi = "cp" + self.version.replace(".", "")
        platforms = [arg for tag in manylinux_platforms(36, "x86_64") for arg in ("--platform", tag)]
        return ["--implementation", "cp", "--python-version", self.version, "--abi", abi, *platforms]

    def describe(self) -> str:
        return f"the test box's python {self.version}"


def test_a_set_is_fetched_once_for_each_interpreter_and_kept_whole(tmp_path: Path) -> None:
    house = Wheelhouse(str(tmp_path))
    py311, py312 = Interpreter("3.11"), Interpreter("3.12")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # two threads asking at once: one download
        first, again = pool.map(lambda _: house.ensure(py311, [INICONFIG]), range(2))
    assert first == again and first.names == ("iniconfig-2.0.0-py3-none-any.whl",)
    assert house.downloads == 1
    assert house.ensure(py311, [INICONFIG]) == first and house.downloads == 1  # cached: pip not run again
    other = house.ensure(py312, [INICONFIG])
    assert other.key != first.key and house.downloads == 2  # keyed by the box's interpreter too
    assert first.key == wheels_key(py311, [INICONFIG]) and first.folder == tmp_path / first.key
    manifest = json.loads((first.folder / "mainsdk-wheels.json").read_text())
    assert manifest["packages"] == [INICONFIG] and manifest["python"] == {"version": "3.11"}
    data = first.read()[first.names[0]]
    assert manifest["wheels"][0]["sha256"] == hashlib.sha256(data).hexdigest() == _sha(first.paths[0])
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == sorted(
        {first.key, other.key}
    )  # no half-built folder left behind


def test_a_set_pip_cannot_resolve_is_one_invalid_option_naming_the_package(tmp_path: Path) -> None:
    house = Wheelhouse(str(tmp_path))
    with pytest.raises(SandboxError) as caught:
        house.ensure(Interpreter("3.11"), [INICONFIG, "doesnotexist-xyz==1.0"])
    error = caught.value
    assert error.code == INVALID_OPTION and error.ran is False and not error.retryable
    assert "doesnotexist-xyz==1.0" in error.message and INICONFIG not in error.message
    assert "the test box's python 3.11" in error.message and "pip said: ERROR" in error.message
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []  # nothing kept
    assert house.downloads == 0


def test_the_message_blames_the_package_pip_names_as_a_whole_word_else_the_set() -> None:
    said = "ERROR: No matching distribution found for six-extras==9"
    assert "cannot install six-extras==9 from" in failure_message(["six==1.16.0", "six-extras==9"], said, "here")
    unnamed = failure_message(["six==1.16.0", "attrs==23.1.0"], "Killed", "here")
    assert "cannot install six==1.16.0, attrs==23.1.0 from" in unnamed and "pip said: Killed" in unnamed
    assert failure_message(["six==1.16.0"], "ERROR: " + "x" * 5000, "here").count("x") <= 1600  # pip's words are cut


def test_platform_tags_run_newest_first_with_the_legacy_aliases_where_they_exist() -> None:
    x86 = manylinux_platforms(17, "x86_64")
    assert x86[:2] == ("manylinux_2_17_x86_64", "manylinux2014_x86_64")
    assert {"manylinux2010_x86_64", "manylinux1_x86_64"} <= set(x86) and x86[-1] == "manylinux1_x86_64"
    arm = manylinux_platforms(17, "aarch64")
    assert "manylinux2014_aarch64" in arm and not any(t.startswith(("manylinux1_", "manylinux2010_")) for t in arm)
    assert manylinux_platforms(20, "x86_64", oldest=17) == (
        "manylinux_2_20_x86_64", "manylinux_2_19_x86_64", "manylinux_2_18_x86_64", "manylinux_2_17_x86_64",
        "manylinux2014_x86_64",
    )  # fmt: skip


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
