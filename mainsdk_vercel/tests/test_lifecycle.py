"""A Vercel session's life: it may be ``pending`` when the create answers, and it ends at the plan's cap.

Against the loopback stand-in (``conformance/simulator.py``), with the real driver and a real httpx client.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mainsdk import Sandbox, SandboxDeps, SandboxError
from mainsdk.config import load_config_text
from mainsdk.errors import DRIVER_UNAVAILABLE, INVALID_OPTION, NO_SESSION

from mainsdk_vercel import driver_from_config

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "conformance"))
Simulator: Any = importlib.import_module("simulator").Simulator


CAP = 8.0  # seconds: a plan whose sandboxes live this long at most (Hobby's 45 minutes, shrunk for the test)


def standin_with(pending: int, max_duration: float = 45 * 60.0) -> Iterator[Any]:
    sim = Simulator(pending=pending, max_duration=max_duration)
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


@pytest.fixture
def capped() -> Iterator[Any]:
    """A stand-in whose plan lets a sandbox live ``CAP`` seconds from its start."""
    yield from standin_with(1, max_duration=CAP)


def sandbox_on(sim: Any, timeout: str = "30s", vercel: str = "") -> Sandbox:
    config = load_config_text(
        f"sandbox: {{driver: vercel-sandbox, limits: {{timeout: {timeout}}}, vercel: {{project: prj_x{vercel}}}}}\n"
    )
    driver = driver_from_config(config, token=sim.token, base_url=sim.url)
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


def test_a_session_at_the_plans_cap_is_over_with_an_error_naming_the_cap_and_nothing_more_is_sent(
    capped: Any,
) -> None:
    sandbox = sandbox_on(capped, timeout="3s", vercel=f", max_duration: {CAP:g}s")
    try:
        session = sandbox.create()
        assert session.run("bash", ["-c", "echo early"]).stdout == "early\n"
        created = next(r for r in capped.requests if r["path"] == "/v3/sandboxes")
        assert json.loads(created["body"])["timeout"] == CAP * 1000  # the lease asked for, cut to the cap
        time.sleep(CAP)  # Vercel (the stand-in) stops the sandbox at the cap
        sent = len(capped.requests)
        with pytest.raises(SandboxError) as caught:
            session.run("bash", ["-c", "echo late"])
        error = caught.value
        assert (error.code, error.retryable) == (NO_SESSION, False)
        assert f"{CAP:g} s from its start (sandbox.vercel.max_duration: {CAP:g} s)" in error.message, error.message
        assert error.message.count("open a new session") == 1, error.message
        assert len(capped.requests) == sent  # known over: nothing sent
        assert "extend-timeout" not in json.dumps([r["path"] for r in capped.requests])  # never past the cap
    finally:
        sandbox.close()


def test_a_command_cut_by_the_cap_is_that_error_not_an_exit_code_or_an_outage(capped: Any) -> None:
    sandbox = sandbox_on(capped, timeout="7s", vercel=f", max_duration: {CAP:g}s")
    try:
        session = sandbox.create()
        with pytest.raises(SandboxError) as caught:
            session.run("bash", ["-c", "sleep 6.5; echo done"])  # still running when the stand-in stops at the cap
            session.run("bash", ["-c", "sleep 6.5; echo done"])
        error = caught.value
        assert (error.code, error.retryable) == (NO_SESSION, False), error.message
        assert "reached the most a sandbox may live on this plan" in error.message, error.message
        with pytest.raises(SandboxError) as again:
            session.run("bash", ["-c", "echo next"])
        assert again.value.code == NO_SESSION  # the session is over
    finally:
        sandbox.close()


def test_a_time_limit_the_plan_cannot_hold_is_refused_before_any_sandbox_is_made(capped: Any) -> None:
    sandbox = sandbox_on(capped, timeout="10s", vercel=f", max_duration: {CAP:g}s")
    try:
        with pytest.raises(SandboxError) as caught:
            sandbox.run("print(1)")
    finally:
        sandbox.close()
    assert (caught.value.code, caught.value.ran) == (INVALID_OPTION, False)
    assert "limits.timeout 10s" in caught.value.message and "sandbox.vercel.max_duration: 8 s" in caught.value.message
    assert capped.requests == []


def test_the_plan_sets_the_cap_and_a_plan_vercel_does_not_have_is_refused_with_its_line() -> None:
    from mainsdk.config import load_config_text as load
    from mainsdk.errors import ConfigError
    from mainsdk_vercel.config import VercelConfig

    text = "sandbox:\n  driver: vercel-sandbox\n  vercel: {{plan: {}}}\n"
    assert load(text.format("pro")).sandbox.section("vercel", VercelConfig).session_cap == 24 * 3600
    assert load(text.format("hobby")).sandbox.section("vercel", VercelConfig).session_cap == 45 * 60
    with pytest.raises(ConfigError) as caught:
        load(text.format("gold"))
    [problem] = caught.value.problems
    assert (
        problem.line == 3 and "plan 'gold' is not a Vercel plan; use one of hobby, pro, enterprise" in problem.message
    )
