"""A Vercel session's life: it may be ``pending`` when the create answers, and it ends at the plan's cap.

Against the loopback stand-in (``conformance/simulator.py``), with the real driver and a real httpx client.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mainsdk import Sandbox, SandboxDeps, SandboxError
from mainsdk.config import load_config_text
from mainsdk.errors import DRIVER_UNAVAILABLE

from mainsdk_vercel import vercel_sandbox_driver

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "conformance"))
Simulator: Any = importlib.import_module("simulator").Simulator


def standin_with(pending: int) -> Iterator[Any]:
    sim = Simulator(pending=pending)
    sim.start()
    yield sim
    sim.stop()


@pytest.fixture
def slow_boot() -> Iterator[Any]:
    """A stand-in whose sessions answer ``pending`` to the create and the next two reads."""
    yield from standin_with(3)


@pytest.fixture
def never_boots() -> Iterator[Any]:
    yield from standin_with(10**9)


def sandbox_on(sim: Any, timeout: str = "30s") -> Sandbox:
    driver = vercel_sandbox_driver(token=sim.token, project="prj_x", base_url=sim.url)
    config = load_config_text(f"sandbox: {{driver: vercel-sandbox, limits: {{timeout: {timeout}}}}}\n")
    return Sandbox(SandboxDeps(config=config, driver=driver, load_entrypoints=False))


def steps(sim: Any) -> list[str]:
    return [f"{r['method']} {r['path'].rsplit('/', 1)[-1]}" for r in sim.requests]


def test_a_command_right_after_create_waits_until_the_session_is_running(slow_boot: Any) -> None:
    sandbox = sandbox_on(slow_boot)
    try:
        result = sandbox.run("print('booted')")
    finally:
        sandbox.close()
    assert (result.exit_code, result.stdout) == (0, "booted\n"), result.stderr
    # The create answered pending; the sandbox was read by name until it said running; only then the command.
    name = slow_boot.requests[1]["path"].rsplit("/", 1)[-1]
    assert steps(slow_boot)[:6] == ["POST sandboxes", *[f"GET {name}"] * 3, "POST cmd", "POST read"]
    get = slow_boot.requests[1]
    assert get["query"] == {"projectId": "prj_x", "resume": "false"}  # as vercel-sandbox's get_sandbox


def test_a_session_that_never_runs_is_a_clear_retryable_error_within_the_time_limit(never_boots: Any) -> None:
    sandbox = sandbox_on(never_boots, timeout="2s")
    try:
        with pytest.raises(SandboxError) as caught:
            sandbox.run("print('ran')")
    finally:
        sandbox.close()
    error = caught.value
    assert (error.code, error.retryable, error.ran) == (DRIVER_UNAVAILABLE, True, False)
    assert "'pending', not running, 2s after its create" in error.message, error.message
    said = steps(never_boots)
    assert said[0] == "POST sandboxes" and said[-1] == "POST stop"  # stopped: nothing left billed
    assert "POST cmd" not in said
    polls = said.count(said[1])
    assert 3 <= polls <= 6, said  # at once, then every 0.5 s, for 2 s
