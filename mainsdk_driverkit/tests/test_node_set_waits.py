"""The kernel's TypeScript set says what npm is building and why (issue 35, point 9), and when it fails, at INFO.

Run here with no npm on PATH: the build is refused at once (MAIN-SANDBOX-0006), so the test needs no registry,
and the two lines still come, the second saying it failed (mainsdk_driverkit.waits).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from mainsdk import SandboxError
from mainsdk_driverkit.node_sets import NODE_KERNEL_SETS, ensure_node_set


def test_a_node_set_build_is_said_with_what_and_why_and_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-npm-here"))
    with caplog.at_level(logging.INFO, logger="mainsdk"), pytest.raises(SandboxError):
        ensure_node_set(NODE_KERNEL_SETS["typescript"], root=str(tmp_path / "sets"))
    said = [r.getMessage() for r in caplog.records if r.name == "mainsdk"]
    name, version, _ = NODE_KERNEL_SETS["typescript"][0]
    assert said[0].startswith(f"mainsdk: building the kernel's node set {name}@{version}: the first TypeScript cell")
    assert "installs it with npm" in said[0]
    assert said[1].startswith(f"mainsdk: building the kernel's node set {name}@{version}: failed after ")
