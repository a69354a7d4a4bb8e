"""The example driver itself, beyond the suite: what hostile code does to a subprocess driver.

Runs where the example driver is installed (``tox -e conformance-example``); the conftest leaves it out
of other runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from mainsdk import Sandbox, SandboxDeps, SandboxError
from mainsdk.config import load_config_text
from mainsdk.errors import INVALID_OPTION


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    made = Sandbox(SandboxDeps(config=load_config_text("sandbox:\n  driver: example\n"), load_entrypoints=False))
    yield made
    made.close()


def test_a_process_that_left_the_group_holding_stdout_does_not_turn_an_exit_into_a_timeout(sandbox: Sandbox) -> None:
    # The grandchild calls setsid, so the group kill cannot reach it (weak isolation), and it keeps stdout open for
    # 60 s. The command itself exits at once: it must come back as exit 0, not as a timeout 20 s later (the old
    # driver waited on Process.wait(), which waits for the pipes too).
    code = "setsid sleep 60 & echo $! > ../out/pid; echo done"
    result = sandbox.run(code, "bash", limits={"timeout": "20s"})
    try:
        assert (result.exit_code, result.stop, result.stdout) == (0, None, "done\n")
    finally:
        pid = int(sandbox.files.read(next(f for f in result.files if f.name == "pid")))
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # the escaped sleep, by its pid: nothing it left outlives the test


def test_an_on_output_that_raises_gives_the_apps_own_exception(sandbox: Sandbox) -> None:
    # Core re-raises an app's listener error that comes out of the exec hook; the old driver's reader task
    # swallowed it, and the run came back as if nothing had happened.
    def listener(stream: str, data: bytes) -> None:
        raise LookupError("the app's own bug")

    code = "import sys, time\nfor _ in range(50): print('x' * 10000, flush=True); time.sleep(0.01)"
    with pytest.raises(LookupError, match="the app's own bug"):
        sandbox.run(code, on_output=listener)


def test_a_program_it_does_not_run_is_refused_before_the_command_is_sent() -> None:
    events: list[Any] = []
    refusing = Sandbox(
        SandboxDeps(config=load_config_text("sandbox:\n  driver: example\n"), load_entrypoints=False, log=events.append)
    )
    try:
        with refusing.create() as session, pytest.raises(SandboxError) as caught:
            session.run("node", ["-e", "1"])
    finally:
        refusing.close()
    assert (caught.value.code, caught.value.ran) == (INVALID_OPTION, False) and "'node'" in caught.value.message
    # Audited as a refusal, not as a command that failed: nothing was sent.
    [event] = [event for event in events if event.error == INVALID_OPTION]
    assert event.kind == "refused"
