"""``OutDir``: an out file's name, chosen by the code, never writes outside the folder ``--out`` names."""

from __future__ import annotations

from pathlib import Path

import pytest
from mainsdk_cli.out_dir import NotWritten, OutDir, OutDirError


@pytest.mark.parametrize("name", ["/etc/x", "../x", "a/../../x", "a//b", "./x", "a/.", "", "a\0b", "a/"])
def test_a_name_that_is_not_a_plain_relative_path_is_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / "out").mkdir()
    out = OutDir.open(str(tmp_path / "out"))
    try:
        with pytest.raises(NotWritten):
            out.write(name, b"x")
    finally:
        out.close()
    assert list(tmp_path.rglob("x")) == []


def test_outdir_creates_files_new_and_leaves_an_existing_one_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "taken.txt").write_bytes(b"mine")
    out = OutDir.open(str(tmp_path))
    try:
        assert out.write("a/b.txt", b"data").read_bytes() == b"data"
        with pytest.raises(NotWritten, match="a file of that name is already there"):
            out.write("taken.txt", b"theirs")
        with pytest.raises(NotWritten, match="already there"):
            out.write("a/b.txt", b"again")
    finally:
        out.close()
    assert (tmp_path / "taken.txt").read_bytes() == b"mine" and (tmp_path / "a" / "b.txt").read_bytes() == b"data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "taken.txt"]  # the writability probe is gone


def test_outdir_refuses_a_folder_that_is_or_holds_a_refused_one(tmp_path: Path) -> None:
    (tmp_path / "app" / "deep").mkdir(parents=True)
    for path in (tmp_path / "app", tmp_path):
        with pytest.raises(OutDirError, match="the app folder"):
            OutDir.open(str(path), refuse=[("the app folder", str(tmp_path / "app"))])
    OutDir.open(str(tmp_path / "app" / "deep"), refuse=[("the app folder", str(tmp_path / "app"))]).close()
