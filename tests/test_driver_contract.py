"""The driver contract at core's boundary: every driver call coded and audited once, the policy sent and
recorded, capabilities that claim nothing unless declared, audit sinks called as pluggy intends."""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from mainsdk import Capabilities, Sandbox, SandboxDeps
from mainsdk.audit import AuditEvent
from mainsdk.config import load_config_text
from mainsdk.errors import DRIVER_UNAVAILABLE, SandboxError
from mainsdk.hookspecs import hookimpl
from mainsdk.plugins import DriverHookError
from mainsdk_local.driver import LocalDriver

CONFIG = """
sandbox:
  driver: local
  limits: { timeout: 10s, memory: 128MB }
  network: [api.example.test]
network:
  allow: [api.example.test]
permissions:
  processes: [python3]
"""

PERMISSIONS = load_config_text(CONFIG).permissions


class Started:
    """Counts the boxes the driver was asked to start (a spy that lets the call go on)."""

    def __init__(self) -> None:
        self.count = 0

    @hookimpl(tryfirst=True)
    def mainsdk_driver_start(self, spec: Any) -> None:
        self.count += 1


@pytest.fixture
def build(tmp_path: Path) -> Iterator[Any]:
    made: list[Sandbox] = []

    def make(driver: object, *plugins: object, log: Any = None) -> tuple[Sandbox, list[AuditEvent]]:
        events: list[AuditEvent] = []
        config = load_config_text(CONFIG, source=tmp_path / "main.yaml")
        deps = SandboxDeps(
            config=config,
            driver=driver,
            log=log or events.append,
            plugins=list(plugins),
            load_entrypoints=False,
        )
        sandbox = Sandbox(deps)
        made.append(sandbox)
        return sandbox, events

    yield make
    for sandbox in made:
        sandbox.close()


class CapabilitiesRaise(LocalDriver):
    @hookimpl
    def mainsdk_driver_capabilities(self) -> Capabilities:
        raise RuntimeError("probe failed: https://user:tok-secret@backend.invalid")


class PolicyRaises(LocalDriver):
    @hookimpl
    def mainsdk_network_policy(self, hosts: Any) -> Any:
        raise KeyError("tok-secret")


def test_a_raising_capabilities_hook_is_a_coded_error_naming_the_driver_and_hook_with_one_audit_event(
    build: Any,
) -> None:
    # Before: the RuntimeError escaped raw, and no audit event was written.
    sandbox, events = build(CapabilitiesRaise(permissions=PERMISSIONS))
    with pytest.raises(SandboxError) as caught:
        sandbox.run("print(1)")
    error = caught.value
    assert isinstance(error, DriverHookError)
    assert error.code == DRIVER_UNAVAILABLE
    assert "'local' driver failed in mainsdk_driver_capabilities (RuntimeError)" in error.message
    assert (error.driver, error.hook) == ("local", "mainsdk_driver_capabilities")
    assert "tok-secret" not in str(error)  # the driver's own message stays in __cause__, for logs
    assert [(e.kind, e.error) for e in events] == [("refused", DRIVER_UNAVAILABLE)]
    with pytest.raises(DriverHookError):
        sandbox.capabilities()  # the public call goes through the same boundary


def test_a_raising_network_policy_hook_is_coded_starts_nothing_and_is_audited_once(build: Any) -> None:
    started = Started()
    sandbox, events = build(PolicyRaises(permissions=PERMISSIONS), started)
    with pytest.raises(SandboxError) as caught:
        sandbox.run("print(1)", network=["api.example.test"])
    assert caught.value.code == DRIVER_UNAVAILABLE
    assert "mainsdk_network_policy (KeyError)" in caught.value.message
    assert "tok-secret" not in str(caught.value)
    assert started.count == 0
    # The policy is asked for in the run's plan, before anything starts: a failure there is on record as refused.
    assert [(e.kind, e.error) for e in events] == [("refused", DRIVER_UNAVAILABLE)]


def test_the_audit_event_records_the_policy_the_driver_was_sent(build: Any) -> None:
    sent: list[Any] = []

    class Spy:
        @hookimpl(tryfirst=True)
        def mainsdk_driver_start(self, spec: Any) -> None:
            sent.append(spec.network_policy)

    sandbox, events = build(LocalDriver(permissions=PERMISSIONS), Spy())
    sandbox.run("print(1)", network=["api.example.test"])
    sandbox.run("print(2)")
    assert sent == [{"hosts": ["api.example.test"]}, {"hosts": []}]
    assert [e.network_policy for e in events] == sent
    assert [e.to_dict()["network_policy"] for e in events] == sent


def test_capabilities_claim_nothing_but_the_isolation_by_default() -> None:
    # Before: a bare Capabilities claimed all three languages, a memory limit and production use.
    caps = Capabilities(isolation="weak")
    claims = {f.name: getattr(caps, f.name) for f in attrs.fields(Capabilities)}
    assert claims["languages"] == frozenset()
    flags = ("network", "wildcard_hosts", "memory_limit", "sessions", "production", "reports_signals")
    for flag in (*flags, "private_tmp", "disk_limit"):
        assert claims[flag] is False, flag
    assert (caps.memory_limit_scope, caps.network_reach) == (None, None)


# --- audit sinks, called as pluggy intends ------------------------------------------------------------------------


class Raising:
    @hookimpl(tryfirst=True)
    def mainsdk_audit_event(self, event: AuditEvent) -> None:
        raise RuntimeError("this sink is broken")


class Collecting:
    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    @hookimpl(trylast=True)
    def mainsdk_audit_event(self, event: AuditEvent) -> None:
        self.events.append(event)


class Wrapping:
    def __init__(self) -> None:
        self.saw: list[str] = []

    @hookimpl(wrapper=True)
    def mainsdk_audit_event(self, event: AuditEvent) -> Generator[None, None, None]:
        self.saw.append(f"before {event.kind}")
        result = yield
        self.saw.append(f"after {event.kind}")
        return result


def test_a_wrapper_sink_runs_around_the_others(build: Any) -> None:
    # Before: the fan-out called each implementation's function itself, so a wrapper never ran.
    wrapping, collecting = Wrapping(), Collecting()
    sandbox, _events = build(LocalDriver(permissions=PERMISSIONS), wrapping, collecting)
    result = sandbox.run("print(1)")
    assert result.stdout == "1\n"
    assert wrapping.saw == ["before run", "after run"]
    assert [e.kind for e in collecting.events] == ["run"]


def test_a_raising_sink_stops_neither_the_other_sinks_nor_the_run(build: Any, caplog: pytest.LogCaptureFixture) -> None:
    collecting, wrapping = Collecting(), Wrapping()
    with caplog.at_level(logging.ERROR, logger="mainsdk"):
        sandbox, events = build(LocalDriver(permissions=PERMISSIONS), Raising(), collecting, wrapping)
        result = sandbox.run("print(1)")
    assert result.stdout == "1\n"
    assert [e.kind for e in events] == ["run"]
    assert [e.kind for e in collecting.events] == ["run"]
    assert wrapping.saw == ["before run", "after run"]
    assert "audit sink" in caplog.text and "failed" in caplog.text


class StartFails(LocalDriver):
    @hookimpl
    async def mainsdk_driver_start(self, spec: Any) -> Any:
        raise OSError("backend down")


def test_a_session_that_cannot_open_is_coded_and_audited_once(build: Any) -> None:
    # Before: a failing policy hook escaped raw, and neither it nor a failing start wrote an audit event.
    for driver, hook in (
        (PolicyRaises(permissions=PERMISSIONS), "mainsdk_network_policy"),
        (StartFails(permissions=PERMISSIONS), "mainsdk_driver_start"),
    ):
        sandbox, events = build(driver)
        with pytest.raises(SandboxError) as caught:
            sandbox.create(network=["api.example.test"])
        assert caught.value.code == DRIVER_UNAVAILABLE and hook in caught.value.message
        [event] = events
        assert (event.kind, event.error, event.session_id) == ("refused", DRIVER_UNAVAILABLE, event.id)
        expected_policy = None if hook == "mainsdk_network_policy" else {"hosts": ["api.example.test"]}
        assert event.network_policy == expected_policy


def test_each_session_command_event_carries_the_policy_its_box_was_started_with(build: Any) -> None:
    sandbox, events = build(LocalDriver(permissions=PERMISSIONS))
    with sandbox.create(network=["api.example.test"]) as session:
        session.run("python3", ["-c", "print(1)"])
    [event] = [e for e in events if e.kind == "command"]
    assert event.network_policy == {"hosts": ["api.example.test"]}
