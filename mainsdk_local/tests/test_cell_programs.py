"""Cells start their executors as runs start programs (issue 35, point 8): the same ``permissions.processes``, the
same ``sandbox.local`` program. Before, ``processes: [python3]`` refused node and bash runs while JavaScript and
bash cells ran, and a JS cell ran whichever ``node`` the box's default PATH held, not ``sandbox.local.node``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import CONFIG, Built
from mainsdk import SandboxError

pytestmark = [
    pytest.mark.skipif(not os.path.exists("/proc/self/ns/user"), reason="needs Linux namespaces"),
    pytest.mark.skipif(shutil.which("node") is None or shutil.which("bash") is None, reason="needs node and bash"),
]


@pytest.mark.parametrize(("language", "program"), [("javascript", "node"), ("bash", "bash")])
def test_a_cell_whose_program_is_not_under_permissions_processes_is_refused(
    make_sandbox: Callable[..., Built], language: str, program: str
) -> None:
    built = make_sandbox(CONFIG.replace("processes: [python3, node, bash]", "processes: [python3]"))
    with pytest.raises(SandboxError) as refused:
        built.sandbox.run("1", language=program)  # the run, as before
    assert refused.value.code == "MAIN-SANDBOX-0001"
    with built.sandbox.create() as session, pytest.raises(SandboxError) as cell:
        session.run_code("1", language=language)
    assert cell.value.code == "MAIN-SANDBOX-0001"
    assert f"sandbox.local.{program} {program!r} is not under permissions.processes" in str(cell.value)


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A folder outside /tmp (a program under /tmp, the box's own, is refused), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="mainsdk-own-node-", dir="/var/tmp"))
    folder.chmod(0o755)  # the box's unprivileged uid reads it
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_javascript_cell_runs_the_node_sandbox_local_names(
    make_sandbox: Callable[..., Built], outside_tmp: Path
) -> None:
    own = outside_tmp / "bin"
    own.mkdir()
    real = shutil.which("node")
    assert real is not None
    try:
        os.link(os.path.realpath(real), own / "node")  # a node of its own path (a copy where a link cannot be)
    except OSError:
        shutil.copy2(os.path.realpath(real), own / "node")
    built = make_sandbox(CONFIG.replace("node: node,", f"node: {own / 'node'},"))
    run = built.sandbox.run("console.log(process.execPath)", language="node")
    assert run.stdout == f"{own / 'node'}\n"  # runs took it before
    with built.sandbox.create() as session:
        assert session.run_code("process.execPath", language="javascript").text == repr(str(own / "node"))
