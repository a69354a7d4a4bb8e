"""Sessions on the local driver: one box across commands, per tenant, never through a shell."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from mainsdk import AsyncSandbox, SandboxError
from mainsdk.errors import COST, INVALID_OPTION, NO_SESSION


def test_the_seeds_two_steps_example(make_sandbox: Callable[..., Any]) -> None:
    sandbox = make_sandbox().sandbox
    session = sandbox.create(feature="notebook", idle="1m")
    try:
        session.write("a.txt", "hello")
        out = session.run("python3", ["-c", "print(open('a.txt').read())"])
        assert out.stdout == "hello\n" and out.exit_code == 0 and out.session_id == session.id
    finally:
        session.close()


def test_the_work_folder_persists_between_commands_and_out_files_can_be_read(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create(feature="notebook") as session:
        session.run("bash", ["-c", "echo 1 > state.txt; echo done > ../out/r.txt"])
        session.run("bash", ["-c", "echo 2 >> state.txt"])
        assert session.read("state.txt") == b"1\n2\n"
        assert session.read("../out/r.txt") == b"done\n"
    assert session.closed


def test_arguments_never_go_through_a_shell(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create() as session:
        tricky = ["; rm -rf / #", "$(id)", "`id`", "a b", "*", "'\"", "$HOME", "&& echo pwned"]
        out = session.run("python3", ["-c", "import sys, json; print(json.dumps(sys.argv[1:]))", *tricky])
        assert out.stdout.strip() == __import__("json").dumps(tricky)
        out = session.run("bash", ["-c", 'printf "%s|" "$@"', "bash", *tricky])
        assert out.stdout == "|".join(tricky) + "|"


def test_a_program_not_permitted_is_refused(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create() as session:
        with pytest.raises(SandboxError) as caught:
            session.run("curl", ["http://example.com"])
        assert caught.value.code == INVALID_OPTION and "permissions.processes" in caught.value.message


def test_sessions_belong_to_their_tenant(make_sandbox: Callable[..., Any]) -> None:
    tenant = {"id": "tenant-a"}
    built = make_sandbox(tenancy=lambda: tenant["id"])
    session = built.sandbox.create(feature="notebook")
    try:
        assert built.sandbox.get(session.id).id == session.id
        tenant["id"] = "tenant-b"
        with pytest.raises(SandboxError) as other:
            built.sandbox.get(session.id)
        with pytest.raises(SandboxError) as unknown:
            built.sandbox.get("ses_" + "0" * 24)
        assert other.value.code == unknown.value.code == NO_SESSION and other.value.status == 404
        # Nothing in the answer tells another tenant that the id exists.
        assert other.value.message.replace(session.id, "X") == unknown.value.message.replace("ses_" + "0" * 24, "X")
    finally:
        tenant["id"] = "tenant-a"
        session.close()
    with pytest.raises(SandboxError) as closed:
        built.sandbox.get(session.id)
    assert closed.value.code == NO_SESSION
    with pytest.raises(SandboxError) as after_close:
        session.run("python3", ["-c", "1"])
    assert after_close.value.code == NO_SESSION


def test_sessions_cannot_see_each_other(make_sandbox: Callable[..., Any]) -> None:
    sandbox = make_sandbox().sandbox
    with sandbox.create() as first, sandbox.create() as second:
        first.write("mine.txt", "first's")
        out = second.run("python3", ["-c", "import os; print(os.listdir('.'), os.path.exists('/work/mine.txt'))"])
        assert out.stdout == "[] False\n"


def test_a_running_command_keeps_the_session_open(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create(idle="1s") as session:
        assert session.run("bash", ["-c", "sleep 2; echo ok"]).stdout == "ok\n"
        assert not session.closed


def test_each_command_has_the_sessions_limits(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create(limits={"timeout": "1s", "output": "1KB"}) as session:
        assert session.run("python3", ["-c", "while True: pass"]).stop == "timeout"
        assert session.run("python3", ["-c", "print('x' * 5000)"]).stop == "output"
        assert session.run("python3", ["-c", "print('still open')"]).stdout == "still open\n"


def test_cost_accumulates_and_a_command_that_would_pass_max_cost_stops_with_cost(
    make_sandbox: Callable[..., Any], local_config: str
) -> None:
    # $0.1 per second and a $0.25 ceiling: the session can afford 2.5 seconds in all.
    text = local_config.replace("secrets: [TEST_API_KEY]", "secrets: [TEST_API_KEY]\n  price: $0.1")
    with make_sandbox(text).sandbox.create(limits={"timeout": "2s"}, max_cost="$0.25") as session:
        first = session.run("bash", ["-c", "sleep 1.2"])
        assert first.stop is None and first.cost > Decimal("0.1")
        second = session.run("bash", ["-c", "sleep 5"])
        assert second.stop == "cost" and second.stop_code == "MAIN-SANDBOX-0007"
        assert session.cost <= Decimal("0.25") + Decimal("0.05")
        with pytest.raises(SandboxError) as caught:
            session.run("bash", ["-c", "true"])
        assert caught.value.code == COST


def test_one_audit_event_per_command_with_the_session_id(make_sandbox: Callable[..., Any]) -> None:
    built = make_sandbox()
    with built.sandbox.create(feature="notebook") as session:
        session.run("python3", ["-c", "print(1)"])
        session.run("python3", ["-c", "print(2)"])
    commands = [e for e in built.events if e.kind == "command"]
    assert len(commands) == 2 and {e.session_id for e in commands} == {session.id}
    assert all(e.feature == "notebook" and e.exit_code == 0 for e in commands)


async def test_the_async_twin_is_an_async_context_manager(async_sandbox: AsyncSandbox) -> None:
    async with async_sandbox.create(feature="notebook") as session:
        await session.write("a.txt", "hello")
        out = await session.run("python3", ["-c", "print(open('a.txt').read())"])
        assert out.stdout == "hello\n"
        assert (await async_sandbox.get(session.id)) is session
    assert session.closed
    session = await async_sandbox.create()
    await session.close()
    await asyncio.sleep(0)


@pytest.mark.parametrize(
    ("first", "then", "says"),
    [
        ("f", "f/g", "'f/g' cannot be written: a folder on its way is a file"),
        ("f", "f/g/h", "'f/g/h' cannot be written: a folder on its way is a file"),
        ("d/x", "d", "'d' cannot be written: it is a folder in the session's box"),
    ],
)
def test_a_write_the_boxs_own_files_forbid_is_0001_and_writes_nothing(
    make_sandbox: Callable[..., Any], first: str, then: str, says: str
) -> None:
    # It was a retryable MAIN-SANDBOX-0006 (NotADirectoryError): an outage to retry forever, for a user mistake.
    tree = "import os; print(sorted(os.path.join(r, n) for r, ds, fs in os.walk('.') for n in ds + fs))"
    with make_sandbox().sandbox.create() as session:
        session.write(first, "kept")
        before = session.run("python3", ["-c", tree]).stdout
        with pytest.raises(SandboxError) as caught:
            session.write(then, "new")
        error = caught.value
        assert (error.code, error.retryable, error.ran) == (INVALID_OPTION, False, False)
        assert says in error.message, error.message
        assert session.run("python3", ["-c", tree]).stdout == before and session.read(first) == b"kept"
        session.write("other.txt", "the session goes on")
        assert session.read("other.txt") == b"the session goes on"
