"""Sessions: create, write, read, run, close, get, MAIN-SANDBOX-0008 and idle; never a shell."""

from __future__ import annotations

import asyncio
import json
import time
from decimal import Decimal

import pytest
from mainsdk import Capabilities, SandboxError
from mainsdk.errors import COST, INVALID_OPTION, NO_SESSION

from mainsdk_conformance.marks import requires
from mainsdk_conformance.target import Conformance

UNKNOWN_ID = "ses_" + "0" * 24
LIST_WORK = ["-c", "import os; print(sorted(os.listdir('.')))"]


@requires("sessions")
class TestSessions:
    """One box kept across commands, for the tenant that created it."""

    def test_the_seeds_two_steps(self, conformance: Conformance) -> None:
        session = conformance.sandbox().create(feature="notebook", idle="1m")
        try:
            session.write("a.txt", "hello")
            out = session.run("python3", ["-c", "print(open('a.txt').read())"])
            assert (out.stdout, out.exit_code, out.stop, out.session_id) == ("hello\n", 0, None, session.id)
            assert out.id.startswith("cmd_") and session.id.startswith("ses_")
        finally:
            session.close()
        assert session.closed

    def test_files_persist_between_commands_and_out_files_can_be_read(self, conformance: Conformance) -> None:
        with conformance.sandbox().create(files={"in.txt": "0\n"}) as session:
            session.run("python3", ["-c", "open('in.txt', 'a').write('1\\n'); open('../out/r.txt', 'w').write('done')"])
            session.write("sub/b.bin", bytes(range(256)))
            session.run("python3", ["-c", "open('in.txt', 'a').write('2\\n')"])
            assert session.read("in.txt") == b"0\n1\n2\n"
            assert session.read("../out/r.txt") == b"done"
            assert session.read("sub/b.bin") == bytes(range(256))

    def test_arguments_never_go_through_a_shell(self, conformance: Conformance) -> None:
        tricky = ["; echo pwned #", "$(id)", "`id`", "a b", "*", "'\"", "$HOME", "&& echo pwned", "\\n"]
        with conformance.sandbox().create() as session:
            out = session.run("python3", ["-c", "import sys, json; print(json.dumps(sys.argv[1:]))", *tricky])
            assert json.loads(out.stdout) == tricky

    @requires("language:bash")
    def test_bash_receives_its_arguments_one_by_one(self, conformance: Conformance) -> None:
        tricky = ["; echo pwned #", "$(id)", "a b", "*"]
        with conformance.sandbox().create() as session:
            out = session.run("bash", ["-c", 'printf "%s|" "$@"', "bash", *tricky])
            assert out.stdout == "|".join(tricky) + "|"

    def test_get_returns_an_open_session_of_the_current_tenant_only(self, conformance: Conformance) -> None:
        tenant = {"id": "tenant-a"}
        sandbox = conformance.sandbox(tenancy=lambda: tenant["id"])
        session = sandbox.create(feature="notebook")
        try:
            assert sandbox.get(session.id).id == session.id
            tenant["id"] = "tenant-b"
            with pytest.raises(SandboxError) as other:
                sandbox.get(session.id)
            with pytest.raises(SandboxError) as unknown:
                sandbox.get(UNKNOWN_ID)
            assert other.value.code == unknown.value.code == NO_SESSION and other.value.status == 404
            # Nothing tells another tenant that the id exists.
            assert other.value.message.replace(session.id, "X") == unknown.value.message.replace(UNKNOWN_ID, "X")
        finally:
            tenant["id"] = "tenant-a"
            session.close()

    def test_a_closed_session_is_0008(self, conformance: Conformance) -> None:
        sandbox = conformance.sandbox()
        session = sandbox.create()
        session.close()
        session.close()  # closing twice is fine
        for call in (
            lambda: sandbox.get(session.id),
            lambda: session.run("python3", ["-c", "1"]),
            lambda: session.write("a.txt", "x"),
            lambda: session.read("a.txt"),
        ):
            with pytest.raises(SandboxError) as caught:
                call()
            assert caught.value.code == NO_SESSION

    def test_an_idle_session_closes(self, conformance: Conformance) -> None:
        sandbox = conformance.sandbox()
        session = sandbox.create(idle="1s")
        session.write("x.txt", "1")
        deadline = time.monotonic() + 10
        while not session.closed and time.monotonic() < deadline:
            time.sleep(0.1)
        assert session.closed
        with pytest.raises(SandboxError) as caught:
            sandbox.get(session.id)
        assert caught.value.code == NO_SESSION

    def test_a_running_command_keeps_the_session_open(self, conformance: Conformance) -> None:
        with conformance.sandbox().create(idle="1s") as session:
            out = session.run("python3", ["-c", "import time; time.sleep(2); print('ok')"])
            assert out.stdout == "ok\n" and not session.closed

    def test_each_command_has_the_sessions_limits(self, conformance: Conformance) -> None:
        with conformance.sandbox().create(limits={"timeout": "1s", "output": "1KB"}) as session:
            assert session.run("python3", ["-c", "while True: pass"]).stop == "timeout"
            # Still running when its output passes the limit, so the stop always ends a live command: a command
            # that exits at once raced its own stop, and a replay saw a kill only some of the time.
            out = session.run("python3", ["-c", "import time; print('x' * 5000, flush=True); time.sleep(30)"])
            assert (out.stop, out.stdout) == ("output", "x" * 1024)
            assert session.run("python3", ["-c", "print('still open')"]).stdout == "still open\n"
            assert session.run("python3", ["-c", "1"], timeout="0.5s").stop is None

    @requires("language:bash")
    def test_a_timed_out_command_leaves_nothing_running(self, conformance: Conformance) -> None:
        with conformance.sandbox().create(limits={"timeout": "1s"}) as session:
            out = session.run("bash", ["-c", "(sleep 2; echo late > late.txt) & while true; do :; done"])
            assert out.stop == "timeout"
            time.sleep(2.5)
            assert session.run("python3", LIST_WORK).stdout == "[]\n"

    def test_sessions_cannot_see_each_other(self, conformance: Conformance) -> None:
        sandbox = conformance.sandbox()
        with sandbox.create() as first, sandbox.create() as second:
            first.write("mine.txt", "first's")
            assert second.run("python3", LIST_WORK).stdout == "[]\n"

    def test_paths_outside_the_work_folder_are_refused(self, conformance: Conformance) -> None:
        with conformance.sandbox().create() as session:
            for call in (
                lambda: session.write("../x.txt", "x"),
                lambda: session.write("/etc/x.txt", "x"),
                lambda: session.read("/etc/hostname"),
                lambda: session.read("../../etc/hostname"),
                lambda: session.run("python3", "-c print(1)"),  # a string, not a list of arguments
            ):
                with pytest.raises(SandboxError) as caught:
                    call()
                assert caught.value.code == INVALID_OPTION

    def test_reading_a_missing_file_is_0008_not_an_outage(self, conformance: Conformance) -> None:
        with conformance.sandbox().create() as session:
            with pytest.raises(SandboxError) as caught:
                session.read("missing.txt")
            assert (caught.value.code, caught.value.status, caught.value.retryable) == (NO_SESSION, 404, False)
            assert session.run("python3", ["-c", "print(1)"]).stdout == "1\n"  # and the session is still open

    def test_cost_accumulates_and_a_command_past_max_cost_stops_with_cost(self, conformance: Conformance) -> None:
        # $0.1 a second and a $0.25 ceiling: the session can afford 2.5 seconds in all.
        sandbox = conformance.sandbox({"sandbox": {"price": "$0.1"}})
        with sandbox.create(limits={"timeout": "2s"}, max_cost="$0.25") as session:
            first = session.run("python3", ["-c", "import time; time.sleep(1.2)"])
            assert first.stop is None and first.cost > Decimal("0.1")
            second = session.run("python3", ["-c", "import time; time.sleep(5)"])
            assert (second.stop, second.stop_code) == ("cost", "MAIN-SANDBOX-0007")
            assert session.cost == first.cost + second.cost
            with pytest.raises(SandboxError) as caught:
                session.run("python3", ["-c", "1"])
            assert caught.value.code == COST

    def test_one_audit_event_per_command_with_the_session_id(self, conformance: Conformance) -> None:
        built = conformance.build()
        with built.sandbox.create(feature="notebook") as session:
            first = session.run("python3", ["-c", "print(1)"])
            session.run("python3", ["-c", "import sys; sys.exit(3)"])
        commands = [e for e in built.events if e.kind == "command"]
        assert [(e.id, e.session_id, e.feature, e.exit_code) for e in commands] == [
            (first.id, session.id, "notebook", 0),
            (commands[1].id, session.id, "notebook", 3),
        ]
        assert all(e.code_sha256 is None for e in commands)  # a command is a program and its arguments, not code

    def test_the_async_twin_and_a_cancelled_command_leaves_nothing(self, conformance: Conformance) -> None:
        async def main() -> None:
            sandbox, _ = conformance.async_sandbox()
            try:
                async with sandbox.create(feature="notebook") as session:
                    await session.write("a.txt", "hello")
                    assert (await sandbox.get(session.id)) is session
                    late = "import time; time.sleep(1.5); open('late.txt', 'w').write('late')"
                    task = asyncio.ensure_future(session.run("python3", ["-c", late]))
                    await asyncio.sleep(0.5)
                    task.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await task
                    await asyncio.sleep(2)
                    assert (await session.run("python3", LIST_WORK)).stdout == "['a.txt']\n"
                assert session.closed
            finally:
                await sandbox.aclose()

        asyncio.run(main())


class TestNoSessions:
    """A driver without sessions refuses them cleanly."""

    def test_create_is_refused_without_sessions(
        self, conformance: Conformance, conformance_capabilities: Capabilities
    ) -> None:
        if conformance_capabilities.sessions:
            pytest.skip(f"driver {conformance.driver_id} declares sessions")
        built = conformance.build()
        with pytest.raises(SandboxError) as caught:
            built.sandbox.create()
        assert caught.value.code == INVALID_OPTION and built.started == []
