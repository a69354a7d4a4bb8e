"""Checkpoints in core: what a driver without them, or a bad main.yaml key, gets before anything happens.

The checkpoints themselves are tested live on the local driver by the conformance suite (``suite/checkpoints.py``).
"""

from __future__ import annotations

import pytest
from mainsdk import AsyncSandbox, SandboxDeps
from mainsdk.audit import AuditEvent
from mainsdk.config import load_config_text
from mainsdk.errors import INVALID_OPTION, NO_SESSION, ConfigError, SandboxError
from memory_driver import MemoryDriver


def sandbox_with(events: list[AuditEvent]) -> tuple[AsyncSandbox, MemoryDriver]:
    driver = MemoryDriver()
    return AsyncSandbox(SandboxDeps(driver=driver, load_entrypoints=False, log=events.append)), driver


async def test_a_driver_without_checkpoint_kinds_refuses_each_call_naming_itself_before_anything_happens() -> None:
    events: list[AuditEvent] = []
    sandbox, driver = sandbox_with(events)
    session = await sandbox.create()
    calls = len(driver.calls)
    for call, name in ((session.snapshot, "snapshot"), (session.fork, "fork"), (session.pause, "pause")):
        with pytest.raises(SandboxError) as caught:
            await call()
        assert caught.value.code == INVALID_OPTION, name
        assert "'local'" in caught.value.message and "none" in caught.value.message, caught.value.message
    with pytest.raises(SandboxError) as caught:
        await session.snapshot(kind="memory")
    assert caught.value.code == INVALID_OPTION
    assert not [c for c in driver.calls[calls:] if c != "mainsdk_driver_capabilities"]  # nothing reached the box
    assert [e.kind for e in events if e.session_id == session.id] == ["refused"] * 4
    await session.close()


async def test_an_unknown_snapshot_is_0008_and_a_resume_of_an_unknown_session_too() -> None:
    sandbox, _ = sandbox_with([])
    with pytest.raises(SandboxError) as caught:
        await sandbox.create(snapshot="snap_nothere")
    assert caught.value.code == NO_SESSION
    with pytest.raises(SandboxError) as caught:
        await sandbox.delete_snapshot("snap_nothere")
    assert caught.value.code == NO_SESSION
    with pytest.raises(SandboxError) as caught:
        await sandbox.resume("ses_" + "0" * 24)
    assert caught.value.code == NO_SESSION
    assert sandbox.snapshots() == []


def test_sessions_on_idle_is_close_or_pause_and_anything_else_is_0001_naming_the_key() -> None:
    assert load_config_text("sandbox:\n  sessions: { on-idle: pause }\n").sandbox.on_idle == "pause"
    assert load_config_text("sandbox: {}\n").sandbox.on_idle == "close"
    with pytest.raises(ConfigError) as caught:
        load_config_text("sandbox:\n  sessions: { on-idle: sleep }\n")
    (problem,) = caught.value.problems
    assert problem.code == INVALID_OPTION and problem.key == "sandbox.sessions.on-idle", problem
    assert "close" in problem.message and "pause" in problem.message
    with pytest.raises(ConfigError) as caught:
        load_config_text("sandbox:\n  sessions: { on_idle: pause }\n")
    assert "on-idle" in caught.value.problems[0].message
