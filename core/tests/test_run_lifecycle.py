"""Core's run lifecycle on the in-memory driver (``memory_driver``): what core guarantees whatever the driver.

Checks before anything starts, the output limit, the time limit and core's own backstop deadline,
redaction across chunk borders, the audit event, files, sessions and their background processes, and the
one boundary that turns a driver's failures into the seed's codes; through the async API and the sync one.
Nothing here starts a process, so it all runs in the ``core`` tox env, where no driver is installed, in
about a second.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import attrs
import pytest
from mainsdk import AsyncSandbox, Sandbox, SandboxDeps, SandboxError, secret
from mainsdk import limits as core_limits
from mainsdk.audit import AuditEvent
from mainsdk.config import AppConfig, load_config_text
from mainsdk.errors import (
    DRIVER_UNAVAILABLE,
    HOST_NOT_ALLOWED,
    INVALID_OPTION,
    MEMORY,
    NO_SESSION,
    OUTPUT,
    SECRET_NOT_ALLOWED,
    TIMEOUT,
)
from mainsdk.redact import REDACTED
from memory_driver import CAPABILITIES, MemoryDriver, script

SECRET = "s3cr3t-Value-0f-the-app"
CONFIG = """
sandbox:
  driver: memory
  secrets: [TOKEN]
  network: [api.example.com]
network:
  allow: [api.example.com]
"""


def config() -> AppConfig:
    return load_config_text(CONFIG)


def deps(driver: MemoryDriver, events: list[AuditEvent], **more: Any) -> SandboxDeps:
    return SandboxDeps(
        config=more.pop("config", config()),
        driver=driver,
        load_entrypoints=False,
        log=events.append,
        secret=lambda name: {"TOKEN": SECRET}[name],
        **more,
    )


@pytest.fixture
def driver() -> MemoryDriver:
    return MemoryDriver()


@pytest.fixture
def events() -> list[AuditEvent]:
    return []


@pytest.fixture
def sandbox(driver: MemoryDriver, events: list[AuditEvent]) -> AsyncSandbox:
    return AsyncSandbox(deps(driver, events))


# -- a run, start to stop ------------------------------------------------------------------------------------


async def test_a_run_returns_what_the_driver_saw_and_stops_its_box(sandbox: AsyncSandbox, driver: MemoryDriver) -> None:
    result = await sandbox.run(script('out "hi\\n"', 'err "oops\\n"', "exit 3"), "bash")
    assert (result.stdout, result.stderr, result.exit_code, result.stop, result.ok) == (
        "hi\n",
        "oops\n",
        3,
        None,
        False,
    )
    assert (result.driver, result.language, result.isolation) == ("memory", "bash", "microvm")
    hooks = [call for call in driver.calls if call != "mainsdk_driver_capabilities"]
    assert hooks == [
        "mainsdk_network_policy",
        "mainsdk_driver_check",
        "mainsdk_driver_start",
        "mainsdk_driver_exec",
        "mainsdk_driver_collect",
        "mainsdk_driver_stop",
    ]
    assert [box.stopped for box in driver.boxes] == [True]


async def test_a_run_in_a_language_the_driver_lacks_is_refused_before_any_box_starts(
    sandbox: AsyncSandbox, driver: MemoryDriver, events: list[AuditEvent]
) -> None:
    with pytest.raises(SandboxError) as caught:
        await sandbox.run("print(1)")  # python, which the memory driver does not declare
    assert caught.value.code == INVALID_OPTION and "python" in caught.value.message
    assert caught.value.ran is False
    assert "mainsdk_driver_start" not in driver.calls
    assert [(e.kind, e.error) for e in events] == [("refused", INVALID_OPTION)]


async def test_the_drivers_own_check_refuses_before_its_box_starts(
    sandbox: AsyncSandbox, driver: MemoryDriver, events: list[AuditEvent]
) -> None:
    async with sandbox.create() as session:
        with pytest.raises(SandboxError) as caught:
            await session.run("python3", ["-c", "print(1)"])
        assert caught.value.code == INVALID_OPTION and "bash -c SCRIPT" in caught.value.message
    assert "mainsdk_driver_exec" not in driver.calls
    assert [(e.kind, e.error) for e in events] == [("refused", INVALID_OPTION)]


async def test_a_secret_not_listed_in_the_config_is_refused_and_nothing_starts(
    sandbox: AsyncSandbox, driver: MemoryDriver
) -> None:
    with pytest.raises(SandboxError) as caught:
        await sandbox.run("env OTHER", "bash", env={"OTHER": secret("OTHER")})
    assert caught.value.code == SECRET_NOT_ALLOWED and "OTHER" in caught.value.message
    assert driver.boxes == []


async def test_a_host_outside_the_allowlist_is_refused_and_nothing_starts(
    sandbox: AsyncSandbox, driver: MemoryDriver
) -> None:
    with pytest.raises(SandboxError) as caught:
        await sandbox.run("out x", "bash", network=["evil.example.org"])
    assert caught.value.code == HOST_NOT_ALLOWED and "evil.example.org" in caught.value.message
    assert driver.boxes == []


# -- limits -------------------------------------------------------------------------------------------------


async def test_output_is_cut_exactly_at_the_limit_across_both_streams_and_the_command_cancelled(
    sandbox: AsyncSandbox, driver: MemoryDriver
) -> None:
    code = script('err "0123456789"', "chunks 1000 abcdefghij", "sleep 30", 'out "never"')
    result = await sandbox.run(code, "bash", limits={"output": "64B"})
    assert result.stop == "output" and result.stop_code == OUTPUT
    assert len(result.stdout_bytes) + len(result.stderr_bytes) == 64
    assert result.stderr == "0123456789" and result.stdout == ("abcdefghij" * 6)[:54]
    # Core cancelled the exec when the limit was reached: the driver never got to its sleep's end.
    (box,) = driver.boxes
    assert box.cancelled == 1 and box.stopped
    assert result.exit_code is None and result.duration < 30


async def test_the_driver_stops_a_command_at_its_time_limit(sandbox: AsyncSandbox, driver: MemoryDriver) -> None:
    result = await sandbox.run(script('out "started\\n"', "sleep 30", 'out "late"'), "bash", timeout="50ms")
    assert (result.stop, result.stop_code, result.exit_code) == ("timeout", TIMEOUT, None)
    assert result.stdout == "started\n"
    assert driver.boxes[0].commands[0].timeout == pytest.approx(0.05)
    assert driver.boxes[0].cancelled == 0  # the driver stopped it itself, core did not have to


async def test_core_cancels_a_driver_that_overruns_its_deadline(
    events: list[AuditEvent], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(core_limits, "DEADLINE_GRACE", 0.05)
    driver = MemoryDriver(honours_timeout=False)
    sandbox = AsyncSandbox(deps(driver, events))
    result = await sandbox.run(script("sleep 30"), "bash", timeout="50ms")
    assert (result.stop, result.exit_code) == ("timeout", None)
    assert driver.boxes[0].cancelled == 1 and driver.boxes[0].stopped
    assert events[-1].stop == "timeout"


async def test_a_memory_stop_and_a_crash_are_reported_with_the_seeds_codes(sandbox: AsyncSandbox) -> None:
    memory = await sandbox.run("memory", "bash")
    assert (memory.stop, memory.stop_code, memory.exit_code, memory.signal) == ("memory", MEMORY, None, None)
    crash = await sandbox.run("signal 11", "bash")
    assert (crash.stop, crash.exit_code, crash.signal, crash.ok) == (None, 139, "SIGSEGV", False)
    named = await sandbox.run("signal SIGKILL", "bash")
    assert (named.exit_code, named.signal) == (137, "SIGKILL")


async def test_a_limit_above_the_config_is_refused(sandbox: AsyncSandbox, driver: MemoryDriver) -> None:
    with pytest.raises(SandboxError) as caught:
        await sandbox.run("out x", "bash", limits={"output": "2MB"})  # the config's default is 1MB
    assert caught.value.code == INVALID_OPTION and "output" in caught.value.message
    assert driver.boxes == []


# -- redaction ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cut", [1, 5, len(SECRET) - 1])
async def test_a_secret_split_across_chunks_never_reaches_the_result_or_the_listener(
    sandbox: AsyncSandbox, cut: int
) -> None:
    seen: list[tuple[str, bytes]] = []
    code = script(
        f"out {('token=' + SECRET[:cut])!r}",
        f"out {(SECRET[cut:] + ' and again ' + SECRET[:3])!r}",
        f"out {SECRET[3:]!r}",
        f"err {SECRET[:cut]!r}",
        f"err {SECRET[cut:]!r}",
        "env TOKEN",
    )
    result = await sandbox.run(code, "bash", env={"TOKEN": secret("TOKEN")}, on_output=lambda s, d: seen.append((s, d)))
    assert SECRET not in result.stdout + result.stderr
    assert result.stdout_bytes == b"token=" + REDACTED + b" and again " + REDACTED + REDACTED
    assert result.stderr_bytes == REDACTED
    streamed = b"".join(d for s, d in seen if s == "stdout")
    assert streamed == result.stdout_bytes and SECRET.encode() not in b"".join(d for _, d in seen)


async def test_a_well_known_key_format_split_across_chunks_is_redacted(sandbox: AsyncSandbox) -> None:
    key = "ghp_" + "A1b2C3d4E5" * 4
    result = await sandbox.run(script(f"out {key[:10]!r}", f"out {key[10:] + ' end'!r}"), "bash")
    assert key not in result.stdout and result.stdout_bytes == REDACTED + b" end"


async def test_a_secret_in_an_out_file_name_or_a_refused_host_is_redacted(sandbox: AsyncSandbox) -> None:
    code = script(f"write ../out/{SECRET}.txt data", f"refused {SECRET}.evil.example", "refused a.example")
    result = await sandbox.run(code, "bash", env={"TOKEN": secret("TOKEN")})
    assert [f.name for f in result.files] == [REDACTED.decode() + ".txt"]
    assert result.hosts_refused == (REDACTED.decode() + ".evil.example", "a.example")


# -- the audit event --------------------------------------------------------------------------------------------


async def test_a_run_has_one_audit_event_with_what_it_was_given_and_no_secret_value(
    sandbox: AsyncSandbox, driver: MemoryDriver, events: list[AuditEvent]
) -> None:
    code = script("env TOKEN", 'out "done"', "refused other.example", "exit 2")
    result = await sandbox.run(
        code, "bash", env={"TOKEN": secret("TOKEN"), "MODE": "plain"}, network=["api.example.com"], feature="report"
    )
    (event,) = events
    assert (event.id, event.kind, event.driver, event.feature, event.tenant) == (
        result.id,
        "run",
        "memory",
        "report",
        "default",
    )
    assert (event.language, event.isolation, event.exit_code, event.stop, event.error) == (
        "bash",
        "microvm",
        2,
        None,
        None,
    )
    assert event.code_sha256 == hashlib.sha256(code.encode()).hexdigest()
    assert event.env_names == ("MODE", "TOKEN") and event.hosts == ("api.example.com",)
    assert event.hosts_refused == ("other.example",)
    # The policy on record is the one the driver was asked to enforce.
    assert event.network_policy == driver.policies[0] == {"allow": ["api.example.com"]}
    text = json.dumps(event.to_dict())
    assert SECRET not in text and "refused other.example" not in text  # no secret value, no code
    assert "done" not in text  # no output


async def test_a_failed_run_is_audited_once_with_the_error_code(events: list[AuditEvent]) -> None:
    sandbox = AsyncSandbox(deps(MemoryDriver(fail={"mainsdk_driver_collect": OSError("disk")}), events))
    with pytest.raises(SandboxError):
        await sandbox.run("out x", "bash")
    assert [(e.kind, e.error) for e in events] == [("run", DRIVER_UNAVAILABLE)]
    assert events[0].duration is not None


# -- a driver's failures, through the one boundary ------------------------------------------------------------

LEAKY = "https://admin:hunter2@backend.internal/v1"


@pytest.mark.parametrize(
    ("hook", "ran", "retryable"),
    [
        ("mainsdk_driver_start", False, True),  # nothing ran: safe to retry
        ("mainsdk_driver_exec", None, False),  # it may have run: never retried blindly
        ("mainsdk_driver_collect", True, False),  # it ran
    ],
)
async def test_a_driver_hook_that_raises_is_an_outage_naming_the_driver_and_the_hook(
    events: list[AuditEvent], hook: str, ran: bool | None, retryable: bool
) -> None:
    driver = MemoryDriver(fail={hook: ConnectionError(LEAKY)})
    sandbox = AsyncSandbox(deps(driver, events))
    with pytest.raises(SandboxError) as caught:
        await sandbox.run("out x", "bash")
    error = caught.value
    assert error.code == DRIVER_UNAVAILABLE
    assert f"the 'memory' driver failed in {hook} (ConnectionError)" in error.message
    assert "check the memory driver's fail= argument" in error.message  # the driver's own outage_remedy
    assert "hunter2" not in str(error) and "backend.internal" not in str(error)
    assert isinstance(error.__cause__, ConnectionError)  # kept for the logs
    assert (error.ran, error.retryable) == (ran, retryable)
    assert all(box.stopped for box in driver.boxes)  # a started box is stopped whatever failed


async def test_an_exec_that_raises_midway_keeps_nothing_and_stops_the_box(
    sandbox: AsyncSandbox, driver: MemoryDriver, events: list[AuditEvent]
) -> None:
    with pytest.raises(SandboxError) as caught:
        await sandbox.run(script('out "half"', "fail"), "bash")
    assert caught.value.code == DRIVER_UNAVAILABLE and "tok_in_the_drivers_message" not in str(caught.value)
    assert driver.boxes[0].stopped and "mainsdk_driver_collect" not in driver.calls
    assert [(e.kind, e.error) for e in events] == [("run", DRIVER_UNAVAILABLE)]


async def test_a_driver_that_fails_to_stop_its_box_does_not_lose_the_result(
    events: list[AuditEvent], caplog: pytest.LogCaptureFixture
) -> None:
    sandbox = AsyncSandbox(deps(MemoryDriver(fail={"mainsdk_driver_stop": RuntimeError("stuck")}), events))
    result = await sandbox.run('out "kept"', "bash")
    assert (result.stdout, result.exit_code) == ("kept", 0)
    assert "failed to stop box mem_" in caplog.text
    assert [(e.kind, e.error) for e in events] == [("run", None)]


async def test_capabilities_that_raise_are_an_outage_with_cores_own_remedy(events: list[AuditEvent]) -> None:
    sandbox = AsyncSandbox(deps(MemoryDriver(fail={"mainsdk_driver_capabilities": KeyError("x")}), events))
    with pytest.raises(SandboxError) as caught:
        await sandbox.run("out x", "bash")
    assert caught.value.code == DRIVER_UNAVAILABLE
    assert "mainsdk_driver_capabilities (KeyError)" in caught.value.message


# -- files ---------------------------------------------------------------------------------------------------


async def test_files_go_in_and_out_files_come_back_as_refs_of_the_tenant(
    sandbox: AsyncSandbox, driver: MemoryDriver
) -> None:
    code = script("cat data/in.txt", "write ../out/b.txt second", "write ../out/a.txt first", "write scratch.txt no")
    result = await sandbox.run(code, "bash", files={"data/in.txt": "hello"})
    assert result.stdout == "hello"
    assert [f.name for f in result.files] == ["a.txt", "b.txt"]  # in path order, work files stay in the box
    assert [await sandbox.files.read(f) for f in result.files] == [b"first", b"second"]
    assert driver.boxes[0].spec.files == {"data/in.txt": b"hello"}


async def test_out_files_past_the_files_limit_stop_with_output_and_are_named(sandbox: AsyncSandbox) -> None:
    code = script(f"write ../out/a.txt {'x' * 40}", f"write ../out/b.txt {'y' * 40}")
    result = await sandbox.run(code, "bash", limits={"files": "64B"})
    assert result.stop == "output" and result.exit_code == 0
    assert [f.name for f in result.files] == ["a.txt"] and result.files_dropped == ("b.txt",)


# -- sessions ---------------------------------------------------------------------------------------------------


async def test_a_session_keeps_one_box_across_commands_and_stops_it_on_close(
    sandbox: AsyncSandbox, driver: MemoryDriver, events: list[AuditEvent]
) -> None:
    async with sandbox.create(env={"TOKEN": secret("TOKEN")}) as session:
        await session.write("notes.txt", "from the app")
        first = await session.run("bash", ["-c", script("cat notes.txt", "write ../out/r.txt result")])
        second = await session.run("bash", ["-c", script("cat ../out/r.txt", "env TOKEN")])
        assert await session.read("../out/r.txt") == b"result"
        with pytest.raises(SandboxError) as missing:
            await session.read("nothing.txt")
        assert missing.value.code == NO_SESSION
    assert (first.stdout, second.stdout_bytes) == ("from the app", b"result" + REDACTED)
    assert len(driver.boxes) == 1 and driver.boxes[0].stopped and driver.boxes[0].spec.session
    commands = [e for e in events if e.kind == "command"]
    assert [e.session_id for e in commands] == [session.id, session.id] and commands[0].id == first.id
    with pytest.raises(SandboxError) as closed:
        await session.run("bash", ["-c", "out x"])
    assert closed.value.code == NO_SESSION


async def test_a_session_command_gets_the_output_limit_and_its_own_timeout(
    sandbox: AsyncSandbox, driver: MemoryDriver
) -> None:
    async with sandbox.create(limits={"output": "16B"}) as session:
        cut = await session.run("bash", ["-c", "chunks 10 0123456789"])
        slow = await session.run("bash", ["-c", "sleep 30"], timeout="50ms")
        fine = await session.run("bash", ["-c", 'out "still open"'])
    assert (cut.stop, cut.stdout) == ("output", "0123456789012345")
    assert (slow.stop, slow.stop_code) == ("timeout", TIMEOUT)
    assert fine.ok and fine.stdout == "still open"
    assert len(driver.boxes) == 1  # the box outlived both stops


async def test_a_session_the_driver_cannot_open_is_refused_and_audited(events: list[AuditEvent]) -> None:
    sandbox = AsyncSandbox(deps(MemoryDriver(fail={"mainsdk_driver_start": OSError("full")}), events))
    with pytest.raises(SandboxError) as caught:
        await sandbox.create()
    assert caught.value.code == DRIVER_UNAVAILABLE and caught.value.retryable
    assert [(e.kind, e.error) for e in events] == [("refused", DRIVER_UNAVAILABLE)]


async def test_a_background_process_runs_beside_commands_and_is_killed_whole(
    sandbox: AsyncSandbox, driver: MemoryDriver, events: list[AuditEvent]
) -> None:
    async with sandbox.create(env={"TOKEN": secret("TOKEN")}) as session:
        process = session.start("bash", ["-c", script('out "up "', "env TOKEN", 'out " "', "sleep 30")])
        beside = await session.run("bash", ["-c", 'out "beside"'])
        await asyncio.sleep(0.01)
        assert process.running and process.output() == ("up " + REDACTED.decode() + " ", "")
        killed = await process.kill()
    assert beside.stdout == "beside"
    assert (killed.exit_code, killed.signal, killed.stop, killed.stdout) == (137, "SIGKILL", None, process.output()[0])
    (box,) = driver.boxes
    assert box.cancelled == 1 and box.stopped
    assert sorted(e.id for e in events if e.kind == "command") == sorted([beside.id, process.id])


async def test_at_most_sixteen_background_processes_run_at_once_and_all_die_with_the_session(
    sandbox: AsyncSandbox, driver: MemoryDriver
) -> None:
    session = await sandbox.create()
    processes = [session.start("bash", ["-c", "sleep 30"]) for _ in range(16)]
    await asyncio.sleep(0.01)  # each in the driver's exec
    with pytest.raises(SandboxError) as caught:
        session.start("bash", ["-c", "sleep 30"])
    assert caught.value.code == INVALID_OPTION and "already runs 16 background processes" in caught.value.message
    await processes[0].kill()
    replacement = session.start("bash", ["-c", "sleep 30"])  # a place was freed
    await asyncio.sleep(0.01)
    await session.close()
    assert not replacement.running and not any(p.running for p in processes)
    assert driver.boxes[0].cancelled == 17 and driver.boxes[0].stopped


async def test_a_driver_without_background_processes_refuses_them_and_nothing_runs(events: list[AuditEvent]) -> None:
    driver = MemoryDriver(capabilities=attrs.evolve(CAPABILITIES, background=False))
    async with AsyncSandbox(deps(driver, events)).create() as session:
        with pytest.raises(SandboxError) as caught:
            session.start("bash", ["-c", "out x"])
    assert caught.value.code == INVALID_OPTION and "Capabilities.background" in caught.value.message
    assert "mainsdk_driver_exec" not in driver.calls
    assert [(e.kind, e.error) for e in events] == [("refused", INVALID_OPTION)]


# -- the sync API: the same lifecycle ----------------------------------------------------------------------------


def test_the_sync_api_runs_the_same_lifecycle(driver: MemoryDriver, events: list[AuditEvent]) -> None:
    sandbox = Sandbox(deps(driver, events))
    try:
        cut = sandbox.run("chunks 100 abcd", "bash", limits={"output": "10B"})
        slow = sandbox.run("sleep 30", "bash", timeout="50ms")
        with sandbox.create() as session:
            session.write("f.txt", "in the box")
            command = session.run("bash", ["-c", "cat f.txt"])
            assert session.read("f.txt") == b"in the box"
        with pytest.raises(SandboxError) as caught:
            sandbox.run("print(1)")
    finally:
        sandbox.close()
    assert (cut.stop, cut.stdout) == ("output", "abcdabcdab")
    assert slow.stop == "timeout" and command.stdout == "in the box"
    assert caught.value.code == INVALID_OPTION
    assert [e.kind for e in events] == ["run", "run", "command", "refused"]
    assert all(box.stopped for box in driver.boxes) and len(driver.boxes) == 3


def test_the_sync_api_wraps_a_driver_failure_the_same_way(events: list[AuditEvent]) -> None:
    sandbox = Sandbox(deps(MemoryDriver(fail={"mainsdk_driver_exec": ValueError(LEAKY)}), events))
    try:
        with pytest.raises(SandboxError) as caught:
            sandbox.run("out x", "bash")
    finally:
        sandbox.close()
    assert caught.value.code == DRIVER_UNAVAILABLE and "hunter2" not in str(caught.value)
    assert "mainsdk_driver_exec (ValueError)" in caught.value.message
