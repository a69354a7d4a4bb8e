"""Cells on the Vercel driver against the loopback stand-in, whose commands really run here.

The replayed suite (``TestCells``) checks what the app sees; these check what is left in the box.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mainsdk import Sandbox, SandboxDeps
from mainsdk.config import load_config_text

from mainsdk_vercel import vercel_sandbox_driver

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "conformance"))
Simulator: Any = importlib.import_module("simulator").Simulator


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    sim = Simulator()
    sim.start()
    driver = vercel_sandbox_driver(token=sim.token, project="prj_x", base_url=sim.url)
    config = load_config_text("sandbox: {driver: vercel-sandbox}\n")
    built = Sandbox(SandboxDeps(config=config, driver=driver, load_entrypoints=False))
    yield built
    built.close()
    sim.stop()


def test_the_interpreters_token_is_not_left_on_the_disk(sandbox: Sandbox) -> None:
    # The token that marks the interpreter's frames goes in a file the wrapper feeds on stdin; the wrapper removes
    # it before the kernel starts, so a cell cannot read it back from the disk to forge another cell's frame.
    with sandbox.create() as session:
        result = session.run_code("import os\nsorted(n for n in os.listdir('../.mainsdk') if n.startswith('stdin'))")
        assert result.ok and result.text == "[]", (result.text, result.error)
    # Code past the argv limit goes on stdin the same way (core passes it so): it still reaches the code whole.
    assert sandbox.run("print(len('" + "x" * 150_000 + "'))").stdout == "150000\n"
