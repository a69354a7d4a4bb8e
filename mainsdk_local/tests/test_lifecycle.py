"""One box lifecycle (``mainsdk.lifecycle``) for runs, session commands and cells, on the real local driver.

Every refusal is decided before anything starts and audited once as ``refused``: the driver's start and
exec hooks are counted by a spy plugin that lets each call go on to the real driver. A run, a command and
a cell each write exactly one audit event, and the same ending gives the same stop on all three.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mainsdk.audit import AuditEvent
from mainsdk.config import load_config_text
from mainsdk.driver import BoxSpec, Command
from mainsdk.errors import (
    COST,
    DRIVER_UNAVAILABLE,
    HOST_NOT_ALLOWED,
    INVALID_OPTION,
    LOCAL_IN_PRODUCTION,
    NO_SESSION,
    SECRET_NOT_ALLOWED,
    SandboxError,
)
from mainsdk.hookspecs import hookimpl
from mainsdk.secrets import secret
from mainsdk_local.driver import LocalDriver

CONFIG = """
sandbox:
  driver: local
  local: { python: python3, node: node, bash: bash }
  limits: { timeout: 10s, memory: 128MB, output: 64KB, files: 1MB, max-cost: $5 }
  price: $0.01
  secrets: [TEST_API_KEY]
  network: [api.example.test]
  packages:
    python: [six==1.16.0]
network:
  allow: [api.example.test]
permissions:
  processes: [python3, bash]
  disk: { temp: { max: 64MB } }
"""


class Spy:
    """Counts the boxes the driver was asked to start and stop and the commands it ran; each call goes on."""

    def __init__(self) -> None:
        self.starts = 0
        self.execs = 0
        self.stops = 0

    @hookimpl(tryfirst=True)
    def mainsdk_driver_start(self, spec: Any) -> None:
        self.starts += 1

    @hookimpl(tryfirst=True)
    def mainsdk_driver_exec(self, box: Any, command: Any, output: Any) -> None:
        self.execs += 1

    @hookimpl(tryfirst=True)
    def mainsdk_driver_stop(self, box: Any) -> None:
        self.stops += 1


class Lab:
    """A sandbox on the real local driver, its audit events and the spy on its driver."""

    def __init__(self, built: Any, spy: Spy) -> None:
        self.sandbox = built.sandbox
        self.events: list[AuditEvent] = built.events
        self.spy = spy

    def kinds(self) -> list[tuple[str, str | None]]:
        return [(e.kind, e.error) for e in self.events]


@pytest.fixture
def lab(make_sandbox: Callable[..., Any]) -> Callable[..., Lab]:
    def make(text: str = CONFIG, **deps: Any) -> Lab:
        spy = Spy()
        return Lab(make_sandbox(text, plugins=[spy], **deps), spy)

    return make


# Each way a one-shot run is refused, with the code it gets. None of them may start a box.
RUN_REFUSALS: dict[str, tuple[dict[str, Any], str]] = {
    "unknown language": ({"code": "1", "language": "cobol"}, INVALID_OPTION),
    "empty code": ({"code": ""}, INVALID_OPTION),
    "feature not text": ({"code": "1", "feature": 7}, INVALID_OPTION),
    "listener not callable": ({"code": "1", "on_output": "print"}, INVALID_OPTION),
    "limit raised": ({"code": "1", "limits": {"timeout": "11s"}}, INVALID_OPTION),
    "memory below what starts": ({"code": "1", "limits": {"memory": "1MB"}}, INVALID_OPTION),
    "files past limits.files": ({"code": "1", "files": {"big.bin": b"x" * (2 << 20)}}, INVALID_OPTION),
    "file outside the work folder": ({"code": "1", "files": {"../escape": "x"}}, INVALID_OPTION),
    "host not allowed": ({"code": "1", "network": ["pypi.org"]}, HOST_NOT_ALLOWED),
    "secret not listed": ({"code": "1", "env": {"K": secret("OTHER")}}, SECRET_NOT_ALLOWED),
    "secret without a value": ({"code": "1", "env": {"K": secret("TEST_API_KEY")}}, SECRET_NOT_ALLOWED),
    "cost past the ceiling": ({"code": "1", "max_cost": "$0.01"}, COST),
    "package not configured": ({"code": "1", "packages": ["numpy"]}, INVALID_OPTION),
    "program not permitted (the driver's check)": ({"code": "echo 1", "language": "node"}, INVALID_OPTION),
}


@pytest.mark.parametrize("case", list(RUN_REFUSALS))
def test_every_refused_run_is_audited_once_as_refused_and_starts_nothing(
    lab: Callable[..., Lab], case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_API_KEY", raising=False)
    made = lab()
    call, code = RUN_REFUSALS[case]
    with pytest.raises(SandboxError) as caught:
        made.sandbox.run(**call)
    assert caught.value.code == code
    assert made.kinds() == [("refused", code)]
    assert (made.spy.starts, made.spy.execs) == (0, 0)


def test_a_driver_refused_in_production_is_audited_once_and_starts_nothing(lab: Callable[..., Lab]) -> None:
    made = lab(environment="production")
    calls: list[Callable[[], Any]] = [lambda: made.sandbox.run("print(1)"), made.sandbox.create]
    for call in calls:
        with pytest.raises(SandboxError) as caught:
            call()
        assert caught.value.code == LOCAL_IN_PRODUCTION
    assert made.kinds() == [("refused", LOCAL_IN_PRODUCTION)] * 2
    assert (made.spy.starts, made.spy.execs) == (0, 0)


SESSION_REFUSALS: dict[str, tuple[dict[str, Any], str]] = {
    "idle not a duration": ({"idle": "soon"}, INVALID_OPTION),
    "host not allowed": ({"network": ["pypi.org"]}, HOST_NOT_ALLOWED),
    "limit raised": ({"limits": {"memory": "1GB"}}, INVALID_OPTION),
    "secret not listed": ({"env": {"K": secret("OTHER")}}, SECRET_NOT_ALLOWED),
}


@pytest.mark.parametrize("case", list(SESSION_REFUSALS))
def test_every_refused_session_is_audited_once_as_refused_and_starts_nothing(
    lab: Callable[..., Lab], case: str
) -> None:
    made = lab()
    call, code = SESSION_REFUSALS[case]
    with pytest.raises(SandboxError) as caught:
        made.sandbox.create(**call)
    assert caught.value.code == code
    [event] = made.events
    assert (event.kind, event.error, event.session_id) == ("refused", code, event.id)
    assert made.spy.starts == 0


def test_every_refused_session_command_and_cell_is_audited_once_and_runs_nothing(lab: Callable[..., Lab]) -> None:
    made = lab()
    session = made.sandbox.create(max_cost="$5")
    refusals: list[tuple[Callable[[], Any], str]] = [
        (lambda: session.run("node", ["-e", "1"]), INVALID_OPTION),  # the driver's check: not permitted
        (lambda: session.run("python3", ["-c", "1"], timeout="11s"), INVALID_OPTION),
        (lambda: session.run("python3", ["a\0b"]), INVALID_OPTION),
        (lambda: session.run("python3", ["-c", "1"], on_output=3), INVALID_OPTION),
        (lambda: session.run_code("1", language="ruby"), INVALID_OPTION),  # no driver has cells in it
        (lambda: session.run_code(""), INVALID_OPTION),
        (lambda: session.run_code("1", timeout="1h"), INVALID_OPTION),
        (lambda: session.start("node", ["-e", "1"]), INVALID_OPTION),
    ]
    for call, code in refusals:
        before = len(made.events)
        with pytest.raises(SandboxError) as caught:
            call()
        assert caught.value.code == code
        assert [(e.kind, e.error, e.session_id) for e in made.events[before:]] == [("refused", code, session.id)]
    session.close()
    for call in (lambda: session.run("python3", ["-c", "1"]), lambda: session.run_code("1")):
        with pytest.raises(SandboxError) as caught:
            call()
        assert caught.value.code == NO_SESSION
    assert (made.spy.starts, made.spy.execs) == (1, 0)  # the session's box, and not one command
    assert [e.kind for e in made.events] == ["refused"] * (len(refusals) + 2)


def test_a_background_start_refused_is_audited_once_as_refused(lab: Callable[..., Lab]) -> None:
    # Before: a refusal made by session.start itself (its listener, a closed session, 16 already running) wrote
    # no audit event.
    made = lab()
    session = made.sandbox.create()
    with pytest.raises(SandboxError) as caught:
        session.start("python3", ["-c", "1"], on_output="print")
    assert caught.value.code == INVALID_OPTION and "on_output" in caught.value.message
    session.close()
    with pytest.raises(SandboxError) as caught:
        session.start("python3", ["-c", "1"])
    assert caught.value.code == NO_SESSION
    assert [(e.kind, e.error, e.session_id) for e in made.events] == [
        ("refused", INVALID_OPTION, session.id),
        ("refused", NO_SESSION, session.id),
    ]
    assert made.spy.execs == 0


def test_a_run_a_command_and_a_cell_each_write_exactly_one_audit_event(lab: Callable[..., Lab]) -> None:
    made = lab()
    made.sandbox.run("print(1)")
    assert [e.kind for e in made.events] == ["run"]
    with made.sandbox.create(feature="nb") as session:
        assert [e.kind for e in made.events] == ["run"]  # opening a session is no call that ran code
        session.run("python3", ["-c", "print(2)"])
        assert [e.kind for e in made.events] == ["run", "command"]
        session.run_code("x = 3")
        session.run_code("x")
        assert [e.kind for e in made.events] == ["run", "command", "cell", "cell"]
        process = session.start("python3", ["-c", "print(4)"])
        process.wait()
    assert [e.kind for e in made.events] == ["run", "command", "cell", "cell", "command"]
    run, command, cell, _, background = made.events
    assert run.exit_code == 0 and command.exit_code == 0 and background.exit_code == 0
    assert cell.cell == 1 and cell.session_id == command.session_id == session.id
    assert all(e.error is None for e in made.events)


# The same ending, reached by a run, a session command and a cell. ``code`` is what a run and a cell run;
# a command runs it with ``python3 -c``.
ENDINGS: dict[str, tuple[str, str | None]] = {
    "time limit": ("while True: pass", "timeout"),
    "output limit": ("print('x' * 200_000)", "output"),
    "memory limit": ("b = bytearray(400 << 20)", "memory"),
    "clean exit": ("print('done')", None),
}


@pytest.mark.parametrize("case", list(ENDINGS))
def test_the_same_ending_gives_the_same_stop_on_a_run_a_command_and_a_cell(lab: Callable[..., Lab], case: str) -> None:
    made = lab()
    if case == "memory limit" and made.sandbox.capabilities().memory_limit_scope != "tree":
        pytest.skip("this machine holds memory per process (RLIMIT_AS): the allocation fails with MemoryError")
    code, expected = ENDINGS[case]
    limits = {"timeout": "2s", "memory": "64MB"}
    run = made.sandbox.run(code, limits=limits)
    with made.sandbox.create(limits=limits) as session:
        command = session.run("python3", ["-c", code])
        cell = session.run_code(code)
    assert (run.stop, command.stop, cell.stop) == (expected, expected, expected)
    assert [e.stop for e in made.events] == [expected] * 3


def test_a_cost_bound_command_and_cell_stop_with_cost_and_a_run_is_refused_first(lab: Callable[..., Lab]) -> None:
    # $1 a second under a $1.50 ceiling: a 5 s run is refused before it starts; a session affords 1.5 s in all.
    made = lab(CONFIG.replace("price: $0.01", "price: $1"))
    with pytest.raises(SandboxError) as caught:
        made.sandbox.run("while True: pass", limits={"timeout": "5s"}, max_cost="$1.50")
    assert caught.value.code == COST and made.spy.starts == 0
    with made.sandbox.create(limits={"timeout": "1s"}, max_cost="$1.50") as session:
        command = session.run("python3", ["-c", "while True: pass"], timeout="0.9s")
        assert command.stop == "timeout"  # its own limit, below what the ceiling left
        cell = session.run_code("while True: pass")  # about $0.5 left: cut to half a second, then cost
        assert cell.stop == "cost"
    assert [(e.kind, e.stop) for e in made.events] == [("refused", None), ("command", "timeout"), ("cell", "cost")]


class ExecFails(LocalDriver):
    """The real local driver, but its exec hook fails as a backend outage would, after the box started."""

    @hookimpl
    async def mainsdk_driver_exec(self, box: Any, command: Any, output: Any) -> Any:
        raise OSError("backend gone")


def test_a_run_a_command_and_a_cell_that_fail_in_the_driver_each_write_exactly_one_audit_event(
    lab: Callable[..., Lab],
) -> None:
    made = lab(driver=ExecFails(permissions=load_config_text(CONFIG).permissions))
    with pytest.raises(SandboxError) as caught:
        made.sandbox.run("print(1)")
    assert caught.value.code == DRIVER_UNAVAILABLE and caught.value.ran is None
    with made.sandbox.create() as session:
        calls: list[Callable[[], Any]] = [lambda: session.run("python3", ["-c", "1"]), lambda: session.run_code("1")]
        for call in calls:
            with pytest.raises(SandboxError) as caught:
                call()
            assert caught.value.code == DRIVER_UNAVAILABLE
    assert [(e.kind, e.error) for e in made.events] == [
        ("run", DRIVER_UNAVAILABLE),
        ("command", DRIVER_UNAVAILABLE),
        ("cell", DRIVER_UNAVAILABLE),
    ]
    assert (made.spy.starts, made.spy.stops) == (2, 2)  # the run's box and the session's, each stopped


class NoNetworkHere(LocalDriver):
    """The real local driver with a check that also looks at the box: it refuses any box given hosts."""

    checked: list[tuple[str, tuple[str, ...], Any]]

    @hookimpl
    def mainsdk_driver_check(self, command: Command, spec: BoxSpec) -> None:
        self.checked.append((command.program, spec.hosts, spec.network_policy))
        if spec.hosts:
            raise SandboxError(HOST_NOT_ALLOWED, "this backend gives no box network access; call it without network")
        LocalDriver.mainsdk_driver_check(self, command, spec)  # and the program, as the local driver checks it


def test_the_drivers_check_sees_the_planned_box_and_refuses_before_anything_starts(lab: Callable[..., Lab]) -> None:
    driver = NoNetworkHere(permissions=load_config_text(CONFIG).permissions)
    driver.checked = []
    made = lab(driver=driver)
    with pytest.raises(SandboxError) as caught:
        made.sandbox.run("print(1)", network=["api.example.test"])
    assert caught.value.code == HOST_NOT_ALLOWED and made.spy.starts == 0
    # It saw the policy the box would have been started with: asked for once, in the plan.
    assert driver.checked == [("python3", ("api.example.test",), {"hosts": ["api.example.test"]})]
    assert made.sandbox.run("print(2)").stdout == "2\n"
    with made.sandbox.create(network=["api.example.test"]) as session:
        with pytest.raises(SandboxError) as caught:
            session.run("python3", ["-c", "print(3)"])
        assert caught.value.code == HOST_NOT_ALLOWED
    assert [(e.kind, e.error) for e in made.events] == [
        ("refused", HOST_NOT_ALLOWED),
        ("run", None),
        ("refused", HOST_NOT_ALLOWED),
    ]
    assert (made.spy.starts, made.spy.execs) == (2, 1)  # the second run's box and the session's; one command ran
