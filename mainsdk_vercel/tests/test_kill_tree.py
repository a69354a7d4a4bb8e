"""A timed-out or cancelled command leaves nothing running, even what ``env -i`` or ``nohup`` started.

Against the loopback stand-in, whose kill signals one process as Vercel's
does: the wrapper's group kill is what reaches the rest. The old way (an
environment marker found in /proc) missed children started with ``env -i``
or ``sudo``, which drop the environment.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mainsdk import Sandbox, SandboxDeps
from mainsdk.config import load_config_text
from mainsdk_conformance.suite.cells import STUBBORN

from mainsdk_vercel import vercel_sandbox_driver

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "conformance"))
Simulator: Any = importlib.import_module("simulator").Simulator


@pytest.fixture
def standin() -> Iterator[Any]:
    sim = Simulator()
    sim.start()
    yield sim
    sim.stop()


def running(mark: str) -> list[str]:
    found = subprocess.run(["pgrep", "-f", mark], capture_output=True, text=True, check=False)
    return found.stdout.split()


def gone(mark: str, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while running(mark):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.parametrize("starter", ["env -i", "nohup", ""])
def test_a_timed_out_session_command_leaves_nothing_running(standin: Any, starter: str) -> None:
    driver = vercel_sandbox_driver(token=standin.token, project="prj_x", base_url=standin.url)
    config = load_config_text("sandbox: {driver: vercel-sandbox}\n")
    sandbox = Sandbox(SandboxDeps(config=config, driver=driver, load_entrypoints=False))
    mark = f"{317 + len(starter)}.25"  # a sleep only this test starts
    try:
        session = sandbox.create()
        # A child in the background (without our environment with env -i), then the command hangs.
        line = f"{starter} /bin/sleep {mark} >/dev/null 2>&1 & echo started; /bin/sleep {mark}"
        result = session.run("bash", ["-c", line], timeout="2s")
        assert (result.stop, result.stdout) == ("timeout", "started\n")
        assert gone(mark), f"left running: {running(mark)}"
        # The session lives on: the next command runs.
        assert session.run("bash", ["-c", "echo next"]).stdout == "next\n"
        session.close()
    finally:
        sandbox.close()
        subprocess.run(["pkill", "-KILL", "-f", mark], check=False)


def test_a_cell_interpreter_that_is_killed_takes_its_children_and_the_next_cell_restarts(standin: Any) -> None:
    # A cell that ignores KeyboardInterrupt ends its interpreter; a child it started must not outlive it. Vercel's
    # kill (and the kernel's own exit) reach one process: the wrapper's group kill is what takes the child.
    driver = vercel_sandbox_driver(token=standin.token, project="prj_x", base_url=standin.url)
    config = load_config_text("sandbox: {driver: vercel-sandbox}\n")
    sandbox = Sandbox(SandboxDeps(config=config, driver=driver, load_entrypoints=False))
    mark = "419.75"
    try:
        session = sandbox.create()
        started = session.run_code(
            f"import subprocess\nchild = subprocess.Popen(['/bin/sleep', '{mark}'], start_new_session=False)\n'ok'"
        )
        assert started.text == "'ok'" and running(mark)
        result = session.run_code(STUBBORN, timeout="1s")
        assert result.stop == "timeout" and not result.state_kept
        assert gone(mark), f"left running: {running(mark)}"
        after = session.run_code("'child' in globals()")
        assert after.restarted and after.text == "False"
        # Closing the session kills the new interpreter's tree too.
        session.run_code(f"import subprocess\nchild = subprocess.Popen(['/bin/sleep', '{mark}'])")
        assert running(mark)
        session.close()
        assert gone(mark), f"left running after close: {running(mark)}"
    finally:
        sandbox.close()
        subprocess.run(["pkill", "-KILL", "-f", mark], check=False)
