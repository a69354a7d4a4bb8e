"""Background processes in a session on the local driver: real processes, real namespaces."""

from __future__ import annotations

import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from mainsdk import AsyncSandbox, SandboxError
from mainsdk.errors import INVALID_OPTION
from mainsdk.sessions import MAX_BACKGROUND
from mainsdk.sync import Process

SERVE = "import time\nprint('ready', flush=True)\nwhile True:\n    time.sleep(0.05)"


def _running(process: Process) -> bool:
    return process.running  # a call, so a type checker does not keep the narrowed value across the kill


def _until(check: Callable[[], bool], seconds: float = 20.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.02)
    return False


def test_a_process_runs_while_the_session_goes_on_and_its_output_can_be_read(make_sandbox: Callable[..., Any]) -> None:
    built = make_sandbox()
    with built.sandbox.create() as session:
        process = session.start("python3", ["-c", "import sys; print('x' * 9000, flush=True)\n" + SERVE])
        assert _until(lambda: "x" * 9000 in process.output()[0])
        assert _running(process)
        with pytest.raises(TimeoutError, match=r"still runs after 0\.2; waiting never stops it"):
            process.wait(timeout=0.2)  # issue 35: it returned None, and .wait(...).stdout was an AttributeError
        # The session keeps working around it: commands, files, cells.
        assert session.run("python3", ["-c", "print(1 + 1)"]).stdout == "2\n"
        assert session.run_code("21 * 2").text == "42"
        killed = process.kill()
        assert not process.running and killed.signal == "SIGKILL" and killed.exit_code == 137
        assert "x" * 9000 in killed.stdout and process.wait() == killed
    events = [e for e in built.events if e.id == process.id]
    assert len(events) == 1 and events[0].kind == "command" and events[0].session_id == session.id


def test_wait_returns_the_result_of_a_process_that_ended(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create() as session:
        process = session.start("python3", ["-c", "import sys; print('out'); sys.exit(3)"])
        result = process.wait(timeout=20)
        assert result is not None and result.exit_code == 3 and result.stdout == "out\n" and result.id == process.id
        assert process.kill() == result  # killing an ended process changes nothing


def test_kill_takes_the_whole_tree(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create() as session:
        spawn = (
            "import subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', "
            '\'import time\\nwhile True:\\n    open("beat", "w").write(str(time.time())); time.sleep(0.05)\'])\n'
            "print('spawned', flush=True)\nwhile True: time.sleep(1)"
        )
        process = session.start("python3", ["-c", spawn])
        assert _until(lambda: "spawned" in process.output()[0])
        assert _until(lambda: _exists(session, "beat"))
        process.kill()
        first = session.read("beat")
        time.sleep(0.5)
        assert session.read("beat") == first  # the child stopped beating: it died with its parent's tree


def _exists(session: Any, path: str) -> bool:
    try:
        session.read(path)
    except SandboxError:
        return False
    return True


def test_a_process_stops_at_its_time_limit(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create() as session:
        process = session.start("python3", ["-c", SERVE], timeout="1s")
        result = process.wait(timeout=20)
        assert result is not None and result.stop == "timeout" and "ready" in result.stdout


def test_closing_the_session_kills_every_background_process(make_sandbox: Callable[..., Any]) -> None:
    built = make_sandbox()
    session = built.sandbox.create()
    processes = [session.start("python3", ["-c", SERVE]) for _ in range(3)]
    assert _until(lambda: all("ready" in p.output()[0] for p in processes))
    session.close()
    assert not any(p.running for p in processes)


def test_a_refused_program_raises_at_start_and_the_count_is_bounded(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create() as session:
        with pytest.raises(SandboxError) as refused:
            session.start("perl", ["-e", "1"])
        assert refused.value.code == INVALID_OPTION
        processes = [session.start("python3", ["-c", SERVE]) for _ in range(MAX_BACKGROUND)]
        with pytest.raises(SandboxError) as bounded:
            session.start("python3", ["-c", SERVE])
        assert bounded.value.code == INVALID_OPTION and str(MAX_BACKGROUND) in bounded.value.message
        processes[0].kill()
        session.start("python3", ["-c", "pass"]).wait(timeout=20)


async def test_background_on_async_sandbox(async_sandbox: AsyncSandbox) -> None:
    async with async_sandbox.create() as session:
        process = session.start("python3", ["-c", "print('done')"])
        result = await process.wait(timeout=20)
        assert result is not None and result.stdout == "done\n" and result.ok


async def test_awaiting_start_gives_the_handle_and_plain_use_still_works(async_sandbox: AsyncSandbox) -> None:
    # Async users await by habit: ``await session.start(...)`` was a TypeError (AsyncProcess not awaitable).
    async with async_sandbox.create() as session:
        process = await session.start("python3", ["-c", "print('awaited')"])
        result = await process.wait(timeout=20)
        assert result is not None and result.stdout == "awaited\n" and result.id == process.id
        plain = session.start("python3", ["-c", "print('plain')"])
        assert (await plain) is plain
        done = await plain.wait(timeout=20)
        assert done is not None and done.stdout == "plain\n"


@pytest.mark.parametrize("timeout", [Decimal("sNaN"), Decimal("NaN"), float("nan"), True, [1], "soon", -1])
def test_a_wait_timeout_that_is_no_duration_is_0001_and_the_process_goes_on(
    make_sandbox: Callable[..., Any], timeout: object
) -> None:
    # Decimal("sNaN") raised decimal.InvalidOperation: ``timeout == 0`` was compared before it was checked.
    with make_sandbox().sandbox.create() as session:
        process = session.start("python3", ["-c", SERVE])
        with pytest.raises(SandboxError) as caught:
            process.wait(timeout=timeout)
        assert caught.value.code == INVALID_OPTION and "timeout" in caught.value.message
        assert _running(process) and process.kill().signal == "SIGKILL"
