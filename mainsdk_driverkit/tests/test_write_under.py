"""``write_under``: a file's name, chosen by the code in the box, never writes outside the box's folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mainsdk.driver import UnsafeName
from mainsdk_driverkit.hostbox import write_under


@pytest.mark.parametrize("name", ["/etc/x", "../x", "a/../../x", "a//b", "./x", "a/.", "", "a\0b", "a/"])
def test_a_name_that_is_not_a_plain_relative_path_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(UnsafeName):
        write_under(tmp_path / "out", name, b"x")
    assert list(tmp_path.rglob("x")) == []


def test_a_plain_path_is_written_with_its_folders(tmp_path: Path) -> None:
    path = write_under(tmp_path / "out", "a/b/c.txt", b"data")
    assert path == tmp_path / "out" / "a" / "b" / "c.txt" and path.read_bytes() == b"data"
    assert write_under(tmp_path / "out", "a/b/c.txt", b"d").read_bytes() == b"d"  # replaced, not appended


def test_a_fifo_in_the_folder_is_refused_without_blocking(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    os.mkfifo(tmp_path / "out" / "f")
    with pytest.raises(UnsafeName):
        write_under(tmp_path / "out", "f", b"x")
