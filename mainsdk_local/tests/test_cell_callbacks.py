"""A cell's callbacks on the real local driver: on_output, on_result and on_error, plain or async.

Run with ``-W error::RuntimeWarning`` too: an async callback left unawaited would warn "never awaited".
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from typing import Any

import pytest
from mainsdk import AsyncSandbox, SandboxError
from mainsdk.cells import CellError
from mainsdk.errors import INVALID_OPTION
from mainsdk.rich import RichResult

# The cell waits for a file the app writes, so "while the cell runs" is a fact, not a race.
WAITS_FOR_GO = (
    "import os, sys, time\n"
    "print('one', flush=True)\n"
    "print('err', file=sys.stderr, flush=True)\n"
    "while not os.path.exists('go'):\n"
    "    time.sleep(0.02)\n"
    "print('two')\n"
    "v = 5"
)
RICH = """
class Table:
    def _repr_html_(self): return '<table><tr><td>1</td></tr></table>'
    def _repr_json_(self): return {"rows": 1}
    def __repr__(self): return 'Table()'
Table()
"""


async def test_an_async_on_output_is_awaited_for_every_chunk_in_order_while_the_cell_runs(
    async_sandbox: AsyncSandbox,
) -> None:
    seen: list[tuple[str, bytes]] = []
    first = asyncio.Event()

    async def on_output(stream: str, data: bytes) -> None:
        await asyncio.sleep(0.01)  # a listener that really awaits: the chunks behind it wait their turn
        seen.append((stream, data))
        first.set()

    async with async_sandbox.create() as session:
        running = asyncio.ensure_future(session.run_code(WAITS_FOR_GO, on_output=on_output))
        await asyncio.wait_for(first.wait(), 20)
        assert not running.done()  # the first chunk was awaited while the cell still waited for 'go'
        await session.write("go", "")
        result = await asyncio.wait_for(running, 20)
        assert result.ok and result.stdout == "one\ntwo\n" and result.stderr == "err\n"
        # Every chunk was awaited before run_code returned, each stream's in its order.
        assert b"".join(d for s, d in seen if s == "stdout") == b"one\ntwo\n"
        assert b"".join(d for s, d in seen if s == "stderr") == b"err\n"
        assert (await session.run_code("v")).text == "5"


async def test_on_result_gets_each_rich_result_and_on_error_the_cells_error(async_sandbox: AsyncSandbox) -> None:
    results: list[RichResult] = []
    cell_errors: list[CellError] = []

    async def on_result(result: RichResult) -> None:
        await asyncio.sleep(0)
        results.append(result)

    async with async_sandbox.create() as session:
        shown = await session.run_code(RICH, on_result=on_result, on_error=cell_errors.append)
        assert [r.mime for r in shown.results] == ["text/html", "application/json", "text/plain"]
        assert len(results) == 3 and all(got is held for got, held in zip(results, shown.results, strict=True))
        assert cell_errors == []  # a cell without an error calls no on_error

        async def on_error(error: CellError) -> None:
            await asyncio.sleep(0)
            cell_errors.append(error)

        failed = await session.run_code("print('before')\n1 // 0", on_result=on_result, on_error=on_error)
        assert len(cell_errors) == 1 and cell_errors[0] is failed.error
        assert (cell_errors[0].name, cell_errors[0].value) == (
            "ZeroDivisionError",
            "integer division or modulo by zero",
        )
        assert "Cell In[2], line 2" in cell_errors[0].traceback  # IPython's traceback text
        assert len(results) == 3  # the failed cell had no result to give


def test_the_synchronous_session_calls_plain_callbacks(make_sandbox: Callable[..., Any]) -> None:
    chunks: list[bytes] = []
    results: list[RichResult] = []
    cell_errors: list[CellError] = []
    with make_sandbox().sandbox.create() as session:
        shown = session.run_code(
            "print('hi')\n" + RICH,
            on_output=lambda stream, data: chunks.append(data),
            on_result=results.append,
            on_error=cell_errors.append,
        )
        assert b"".join(chunks) == b"hi\n" and tuple(results) == shown.results and cell_errors == []
        failed = session.run_code("{}['k']", on_error=cell_errors.append)
        assert [(e.name, e.value) for e in cell_errors] == [("KeyError", "'k'")] and failed.error is cell_errors[0]


async def test_a_raising_async_callback_is_the_apps_error_and_the_interpreter_lives(
    async_sandbox: AsyncSandbox,
) -> None:
    seen: list[bytes] = []

    async def on_output(stream: str, data: bytes) -> None:
        await asyncio.sleep(0)
        seen.append(data)
        raise RuntimeError("listener down")

    async def on_result(result: RichResult) -> None:
        await asyncio.sleep(0)
        raise LookupError(f"cannot show {result.mime}")

    async with async_sandbox.create() as session:
        running = asyncio.ensure_future(session.run_code(WAITS_FOR_GO, on_output=on_output))
        for _ in range(1000):
            if seen:
                break
            await asyncio.sleep(0.02)
        await session.write("go", "")
        with pytest.raises(RuntimeError) as caught:
            await asyncio.wait_for(running, 20)
        assert getattr(caught.value, "ran", None) is True and len(seen) == 1  # called no more once it raised
        assert any("raised by on_output of cell 1" in note for note in caught.value.__notes__)
        with pytest.raises(LookupError) as shown:
            await session.run_code(RICH, on_result=on_result)
        assert str(shown.value) == "cannot show text/html"
        assert any("raised by on_result of cell 2" in note for note in shown.value.__notes__)
        assert (await session.run_code("(v, type(Table()).__name__)")).text == "(5, 'Table')"  # the same interpreter


def test_the_synchronous_session_refuses_an_async_callback_and_runs_nothing(
    make_sandbox: Callable[..., Any],
) -> None:
    async def listener(*args: object) -> None:
        await asyncio.sleep(0)

    built = make_sandbox()
    with built.sandbox.create() as session:
        for argument in ("on_output", "on_result", "on_error"):
            with pytest.raises(SandboxError) as caught:
                options: dict[str, Any] = {argument: listener}
                session.run_code("x = 1", **options)
            assert caught.value.code == INVALID_OPTION
            assert argument in caught.value.message and "async function" in caught.value.message
            assert "AsyncSandbox" in caught.value.message  # and how to have one awaited
        assert session.run_code("x").error is not None  # none of them ran
    assert [e.kind for e in built.events if e.cell in (1, 2, 3)] == ["refused"] * 3


async def test_a_callback_that_is_not_a_function_is_refused_by_name(async_sandbox: AsyncSandbox) -> None:
    async with async_sandbox.create() as session:
        for argument in ("on_output", "on_result", "on_error"):
            with pytest.raises(SandboxError) as caught:
                options: dict[str, Any] = {argument: "print"}
                await session.run_code("x = 1", **options)
            assert caught.value.code == INVALID_OPTION
            assert f"{argument}: must be a function taking (" in caught.value.message

        def takes_two(a: object, b: object) -> None:
            pass

        with pytest.raises(SandboxError) as two:
            await session.run_code("x = 1", on_result=takes_two)  # type: ignore[arg-type]
        assert two.value.code == INVALID_OPTION and "cannot take (result)" in two.value.message
        assert (await session.run_code("x")).error is not None  # none of them ran


async def test_run_and_start_refuse_an_async_listener_they_would_not_await(async_sandbox: AsyncSandbox) -> None:
    # Only cells await a listener: anywhere else its coroutine would be dropped, and the output with it.
    async def on_output(stream: str, data: bytes) -> None:
        await asyncio.sleep(0)

    listener: Any = on_output
    async with async_sandbox.create() as session:
        with pytest.raises(SandboxError) as ran:
            await async_sandbox.run("print(1)", on_output=listener)
        with pytest.raises(SandboxError) as ran_in_session:
            await session.run("python3", ["-c", "print(1)"], on_output=listener)
        with pytest.raises(SandboxError) as started:
            session.start("python3", ["-c", "print(1)"], on_output=listener)
        for caught in (ran, ran_in_session, started):
            assert caught.value.code == INVALID_OPTION
            assert caught.value.message.startswith("on_output: on_output is an async function")


# 1,000 lines of varied lengths (0 to 999 characters of padding), each written by one print, console.log or
# echo: the Python ones with several arguments (under -u each was its own write), so a line came in pieces.
LINES = 1000
PRINTS = {
    "python": f"for i in range({LINES}):\n    print('line', i, 'x' * (i * 977 % 1000))",
    "javascript": f"for (let i = 0; i < {LINES}; i++) console.log('line', i, 'x'.repeat(i * 977 % 1000));",
    "bash": (
        "pad=$(printf '%1000s' '' | tr ' ' x)\n"
        f"for ((i = 0; i < {LINES}; i++)); do echo line $i ${{pad:0:$((i * 977 % 1000))}}; done"
    ),
}


@pytest.mark.parametrize("language", list(PRINTS))
async def test_each_line_a_print_writes_reaches_on_output_as_one_chunk(
    async_sandbox: AsyncSandbox, language: str
) -> None:
    if language == "javascript" and shutil.which("node") is None:
        pytest.skip("JavaScript cells need node (.ci/run installs it)")
    chunks: list[bytes] = []
    async with async_sandbox.create() as session:
        cell = await session.run_code(
            PRINTS[language], language=language, on_output=lambda stream, data: chunks.append(data)
        )
    assert cell.error is None and cell.stop is None, cell
    expected = [f"line {i} {'x' * (i * 977 % 1000)}".encode() + b"\n" for i in range(LINES)]
    if language == "bash":  # an empty unquoted word is no argument of echo's: no trailing space
        expected = [line.replace(b" \n", b"\n") for line in expected]
    assert b"".join(chunks) == b"".join(expected)
    assert chunks == expected  # each line whole, one call each
