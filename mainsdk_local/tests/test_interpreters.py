"""Several interpreters in one session on the local driver: real kernels in the real box, on both APIs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from mainsdk import AsyncSandbox, SandboxError, secret
from mainsdk.errors import NO_SESSION

# Waits for a file only the other interpreter's cell makes: it ends only if both cells run at the same time.
WAITS_FOR_OTHER = (
    "import os, time\n"
    "end = time.time() + 8\n"
    "while not os.path.exists('from-b') and time.time() < end:\n"
    "    time.sleep(0.01)\n"
    "os.path.exists('from-b')"
)


async def test_cells_of_two_interpreters_run_at_the_same_time(async_sandbox: AsyncSandbox) -> None:
    async with async_sandbox.create() as session:
        first, second = session.interpreter(), session.interpreter()
        waiting = asyncio.ensure_future(first.run_code(WAITS_FOR_OTHER))
        await asyncio.sleep(0.2)
        await second.run_code("open('from-b', 'w').close()")
        assert (await asyncio.wait_for(waiting, 20)).text == "True"


async def test_closing_an_interpreter_while_its_cell_runs_ends_that_cell_only(async_sandbox: AsyncSandbox) -> None:
    async with async_sandbox.create() as session:
        await session.run_code("x = 'default'")
        doomed = session.interpreter(name="doomed")
        running = asyncio.ensure_future(doomed.run_code("import time\ntime.sleep(60)"))
        await asyncio.sleep(0.5)
        await doomed.close()
        with pytest.raises(SandboxError) as caught:
            await asyncio.wait_for(running, 20)
        assert caught.value.code == NO_SESSION and doomed.id in caught.value.message
        assert (await session.run_code("x")).text == "'default'"
        assert [i.name for i in session.interpreters()] == [None]


async def test_restart_waits_for_the_running_cell_then_empties_the_interpreter(async_sandbox: AsyncSandbox) -> None:
    async with async_sandbox.create() as session:
        python = session.interpreter()
        running = asyncio.ensure_future(python.run_code("import time\ntime.sleep(0.5)\nv = 1\nv"))
        await asyncio.sleep(0.1)
        await python.restart()
        assert (await running).text == "1"  # it ran to its end first
        after = await python.run_code("'v' in globals()")
        assert after.text == "False" and not after.restarted


async def test_an_interpreter_used_as_async_with_closes_on_exit(async_sandbox: AsyncSandbox) -> None:
    async with async_sandbox.create() as session:
        async with session.interpreter(cwd=".") as python:
            assert (await python.run_code("1 + 1")).text == "2"
        assert python.closed and session.interpreters() == []
        with pytest.raises(SandboxError) as caught:
            await python.restart()
        assert caught.value.code == NO_SESSION


def test_a_second_interpreters_cells_keep_the_limits_the_redaction_and_the_cost(
    make_sandbox: Callable[..., Any], local_config: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_API_KEY", "sk-cell-secret-value-123")
    built = make_sandbox(local_config.replace("secrets: [TEST_API_KEY]", "secrets: [TEST_API_KEY]\n  price: $0.1"))
    with built.sandbox.create(env={"KEY": secret("TEST_API_KEY")}) as session:
        first = session.run_code("1")
        other = session.interpreter()
        shown = other.run_code("import os\nk = os.environ['KEY']\nprint(k)\nk")
        assert "sk-cell-secret-value-123" not in shown.stdout + (shown.text or "")
        slow = other.run_code("import time\ntime.sleep(60)", timeout="1s")
        assert slow.stop == "timeout" and slow.state_kept
        flood = other.run_code("print('x' * 3_000_000)")
        assert flood.stop == "output" and not flood.state_kept
        last = other.run_code("'k' in globals()")
        assert last.restarted
        costs = [first.cost, shown.cost, slow.cost, flood.cost, last.cost]
        assert all(cost > 0 for cost in costs) and session.cost == sum(costs)
    events = [e for e in built.events if e.kind == "cell"]
    assert [(e.interpreter, e.stop) for e in events[1:]] == [
        (other.id, None),
        (other.id, "timeout"),
        (other.id, "output"),
        (other.id, None),
    ]


def test_a_folder_missing_in_the_box_is_named_and_the_interpreter_starts_once_it_exists(
    make_sandbox: Callable[..., Any],
) -> None:
    with make_sandbox().sandbox.create() as session:
        inside = session.interpreter(cwd="later")
        missing = inside.run_code("1")
        assert missing.error is not None and missing.error.name == "InterpreterExited" and not missing.state_kept
        assert "folder 'later' exists in the box" in missing.error.value and "'later'" in missing.stderr
        session.write("later/ready.txt", "yes")
        found = inside.run_code("open('ready.txt').read()")
        assert found.text == "'yes'" and found.restarted
