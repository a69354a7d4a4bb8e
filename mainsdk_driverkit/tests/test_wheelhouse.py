"""The app-side wheelhouse the remote drivers share: real pip against the app's package index (PyPI here and in CI)."""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

import attrs
import pytest
from mainsdk.errors import INVALID_OPTION, SandboxError
from mainsdk_driverkit.wheelhouse import Wheelhouse, failure_message, manylinux_platforms, wheels_key

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


# What a box's output could leave in the app's folder (`mainsdk sandbox run --out .`): each planted module and the
# sdist's in-tree backend write a marker when imported; pip.conf and uv.toml point pip and uv at the sdist.
_MARKING = "import pathlib\npathlib.Path({marks!r}, {name!r}).write_text('ran')\n"


def _plant(folder: Path, marks: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "pip.conf").write_text("[global]\nno-index = true\nfind-links = wh\nno-binary = :all:\n")
    (folder / "uv.toml").write_text('[pip]\nno-index = true\nfind-links = ["wh"]\nno-binary = ["iniconfig"]\n')
    for module in ("pip", "sitecustomize", "json"):
        (folder / f"{module}.py").write_text(_MARKING.format(marks=str(marks), name=module))
    files = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "planted"\nbackend-path = ["."]\n',
        "planted.py": _MARKING.format(marks=str(marks), name="backend"),
    }
    (folder / "wh").mkdir()
    with tarfile.open(folder / "wh" / "iniconfig-2.0.0.tar.gz", "w:gz") as tar:
        for member, text in files.items():
            info = tarfile.TarInfo(f"iniconfig-2.0.0/{member}")
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text.encode()))


def test_nothing_a_box_can_leave_in_the_apps_folder_is_read_or_run_by_the_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    app = tmp_path / "app"
    _plant(app, marks)
    monkeypatch.chdir(app)
    monkeypatch.setenv("PIP_CONFIG_FILE", "pip.conf")  # the app's own config names a file box output overwrote
    wheels = Wheelhouse(str(tmp_path / "wheels")).ensure(Interpreter("3.11"), [INICONFIG])
    assert sorted(os.listdir(marks)) == []  # no planted module ran, no config sent pip to the sdist
    assert wheels.names == ("iniconfig-2.0.0-py3-none-any.whl",)


def _wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel, made here: a package no index serves."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    files = {
        f"{name.replace('-', '_')}.py": "VALUE = 42\n",
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{member},,\n" for member in files) + f"{dist}.dist-info/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in {**files, f"{dist}.dist-info/RECORD": record}.items():
            archive.writestr(member, text)
    return path


def test_the_index_settings_of_the_apps_environment_are_honoured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    links = tmp_path / "links"
    _wheel(links, "mainsdk-only-here", "1.0")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # nothing but the folder: the set comes from there or not at all
    wheels = Wheelhouse(str(tmp_path / "wheels")).ensure(Interpreter("3.11"), ["mainsdk-only-here==1.0"])
    assert wheels.names == ("mainsdk_only_here-1.0-py3-none-any.whl",)
    monkeypatch.setenv("PIP_FIND_LINKS", "links")
    with pytest.raises(SandboxError) as caught:
        Wheelhouse(str(tmp_path / "other")).ensure(Interpreter("3.11"), ["mainsdk-only-here==1.0"])
    assert caught.value.code == INVALID_OPTION
    assert "PIP_FIND_LINKS names the relative path 'links'" in caught.value.message
