"""The command line as a user runs it, in an app folder of its own."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mainsdk.default import reset_default_sandbox


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], Path]]:
    """An app folder as cwd; call it with a main.yaml text to write that file. The default sandbox is rebuilt."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MAINSDK_CONFIG", raising=False)
    monkeypatch.delenv("MAINSDK_ENV", raising=False)
    reset_default_sandbox()

    def write(text: str) -> Path:
        path = tmp_path / "main.yaml"
        path.write_text(text)
        return path

    yield write
    reset_default_sandbox()
