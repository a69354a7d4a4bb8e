"""Checkpoints in core: what a driver without them, or a bad main.yaml key, gets before anything happens.

The checkpoints themselves are tested live on the local driver by the conformance suite (``suite/checkpoints.py``).
"""

from __future__ import annotations

import time
from typing import Any

import attrs
import pytest
from mainsdk import AsyncSandbox, AsyncSession, SandboxDeps
from mainsdk.audit import AuditEvent
from mainsdk.config import load_config_text
from mainsdk.driver import BoxSpec
from mainsdk.errors import DRIVER_UNAVAILABLE, INVALID_OPTION, NO_SESSION, ConfigError, SandboxError
from mainsdk.hookspecs import hookimpl
from memory_driver import CAPABILITIES, MemoryBox, MemoryDriver


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


class CheckpointingDriver(MemoryDriver):
    """The memory driver with filesystem snapshots (a copy of the work folder) and pause, for core's side."""

    def __init__(self, *, expires: float | None = None, fail_start_after: int | None = None) -> None:
        super().__init__(
            capabilities=attrs.evolve(CAPABILITIES, checkpoint_kinds=frozenset({"filesystem"}), pause=True)
        )
        self.snapshots: dict[str, dict[str, bytes]] = {}
        self.expires = expires
        self.fail_start_after = fail_start_after  # starts that succeed before every later one fails
        self.paused: set[str] = set()

    @hookimpl
    async def mainsdk_driver_start(self, spec: BoxSpec) -> MemoryBox:
        if self.fail_start_after is not None and len(self.boxes) >= self.fail_start_after:
            raise SandboxError(DRIVER_UNAVAILABLE, "the memory driver is full (the test said so)")
        box = await MemoryDriver.mainsdk_driver_start(self, spec)
        if spec.snapshot is not None:
            box.work = {**self.snapshots[spec.snapshot], **spec.files}
        return box

    @hookimpl
    async def mainsdk_driver_snapshot(self, box: MemoryBox, snapshot_id: str, kind: str) -> float | None:
        self.snapshots[snapshot_id] = dict(box.work)
        return self.expires

    @hookimpl
    async def mainsdk_driver_delete_snapshot(self, snapshot_id: str) -> None:
        self.snapshots.pop(snapshot_id, None)

    @hookimpl
    async def mainsdk_driver_pause(self, box: MemoryBox) -> None:
        self.paused.add(box.id)

    @hookimpl
    async def mainsdk_driver_resume(self, box: MemoryBox) -> None:
        self.paused.discard(box.id)


def is_paused(session: AsyncSession) -> bool:
    return session.paused  # read afresh each time (mypy would keep a narrowed property)


def checkpointing(events: list[AuditEvent], **options: Any) -> tuple[AsyncSandbox, CheckpointingDriver]:
    driver = CheckpointingDriver(**options)
    return AsyncSandbox(SandboxDeps(driver=driver, load_entrypoints=False, log=events.append)), driver


async def test_forks_are_independent_sessions_with_their_own_audit_event_and_the_source_goes_on() -> None:
    events: list[AuditEvent] = []
    sandbox, driver = checkpointing(events)
    source = await sandbox.create(files={"a.txt": "alpha"})
    forks = await source.fork(2)
    assert all(isinstance(f, AsyncSession) for f in forks)
    first, second = (f for f in forks if isinstance(f, AsyncSession))
    await first.write("a.txt", "changed")
    assert await second.read("a.txt") == b"alpha" and await source.read("a.txt") == b"alpha"
    assert [e.kind for e in events] == ["fork", "fork"]
    assert {e.session_id for e in events} == {first.id, second.id}
    assert {e.source_session for e in events} == {source.id}
    assert driver.snapshots == {}  # the fork's own snapshot went once the forks had started
    assert sandbox.snapshots() == []


async def test_one_fork_failing_is_its_entry_and_the_others_stand() -> None:
    sandbox, _ = checkpointing([], fail_start_after=2)  # the source, then one fork
    source = await sandbox.create()
    forks = await source.fork(3)
    assert isinstance(forks[0], AsyncSession)
    assert [type(f) for f in forks[1:]] == [SandboxError, SandboxError]
    assert all(isinstance(f, SandboxError) and f.code == DRIVER_UNAVAILABLE for f in forks[1:])


async def test_an_expired_snapshot_is_0008_and_listed_no_more() -> None:
    sandbox, _ = checkpointing([], expires=time.time() - 1)
    source = await sandbox.create(files={"a.txt": "alpha"})
    snapshot = await source.snapshot("old")
    assert snapshot.expires is not None and sandbox.snapshots() == []
    with pytest.raises(SandboxError) as caught:
        await sandbox.create(snapshot=snapshot)
    assert caught.value.code == NO_SESSION


async def test_a_paused_session_runs_nothing_says_so_and_only_its_tenant_resumes_it() -> None:
    events: list[AuditEvent] = []
    tenant = {"id": "a"}
    driver = CheckpointingDriver()
    sandbox = AsyncSandbox(
        SandboxDeps(driver=driver, load_entrypoints=False, log=events.append, tenancy=lambda: tenant["id"])
    )
    session = await sandbox.create()
    await session.pause()
    await session.pause()  # twice is fine: one event
    assert is_paused(session) and driver.paused == {driver.boxes[0].id}
    for call in (lambda: sandbox.get(session.id), lambda: session.read("a.txt")):
        with pytest.raises(SandboxError) as caught:
            await call()
        assert caught.value.code == NO_SESSION and "sandbox.resume" in caught.value.message
    tenant["id"] = "b"
    with pytest.raises(SandboxError) as caught:
        await sandbox.resume(session.id)
    assert caught.value.code == NO_SESSION
    tenant["id"] = "a"
    assert await sandbox.resume(session.id) is session
    assert not is_paused(session) and driver.paused == set()
    await session.write("a.txt", "x")
    assert [e.kind for e in events] == ["pause", "resume"]
    await session.close()
