"""The MCP server's tests: an app folder with its main.yaml, as the server's user has."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Path]:
    """An app folder as cwd; call it with a main.yaml text to write that file (the server reads ./main.yaml)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MAINSDK_CONFIG", raising=False)
    monkeypatch.delenv("MAINSDK_ENV", raising=False)

    def write(text: str) -> Path:
        path = tmp_path / "main.yaml"
        path.write_text(text)
        return path

    return write
