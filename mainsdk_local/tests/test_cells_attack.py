"""Cells under attack (issue 31): what one cell leaves, or what a cell says, never decides past its limits.

Each test runs real code in a real local box through the public API only, as the attacker did.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from typing import Any

import pytest
from mainsdk import AsyncSandbox, SandboxError, secret
from mainsdk.errors import INVALID_OPTION
from mainsdk.rich import CHART_MIME, DATAFRAME_MIME, RichResult

needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="JavaScript cells need node (.ci/run installs it)")
VALUE = "left-behind-value-0031"


def test_a_secret_one_cell_was_given_stays_redacted_in_every_later_cell(
    make_sandbox: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The secret is the first cell's own (not in the session's env); what that cell leaves running prints it
    # while the next cells run: a Python thread, and a bash background job.
    monkeypatch.setenv("TEST_API_KEY", VALUE)
    chunks: list[bytes] = []
    with make_sandbox().sandbox.create() as session:
        session.run_code(
            "import os, threading, time\nkept = os.environ['TOK']\n"
            "def later():\n    time.sleep(0.5)\n    print('thread', kept, flush=True)\n"
            "threading.Thread(target=later, daemon=True).start()",
            env={"TOK": secret("TEST_API_KEY")},
        )
        later = session.run_code(
            "import time\ntime.sleep(1.5)\nfrom IPython.display import display\ndisplay({'text/plain': kept}, raw=True)"
            "\nkept",
            on_output=lambda stream, data: chunks.append(data),
        )
        assert "thread" in later.stdout and VALUE not in later.stdout
        assert later.results and all(VALUE not in str(r.data) for r in later.results)
        assert chunks and VALUE.encode() not in b"".join(chunks)
        session.run_code("(sleep 0.5; echo job $TOK) &", language="bash", env={"TOK": secret("TEST_API_KEY")})
        job = session.run_code("sleep 1.5; echo done", language="bash")
        assert "job" in job.stdout and VALUE not in job.stdout
        again = session.run_code("print(kept)")  # every later cell of the interpreter, as long as it lives
        assert again.stdout and VALUE not in again.stdout


def test_results_only_the_end_frame_lists_share_the_live_results_room(
    make_sandbox: Callable[..., Any], local_config: str
) -> None:
    # The cell lifts the executor's own bound on its results, then displays 12 outputs of 30,000 characters: the
    # ones the app's room (limits.files: 100 KB) did not take live must not come back through the end frame.
    config = local_config.replace("output: 1MB }", "output: 1MB, files: 100KB }")
    lift = (
        "import gc\nfrom IPython.display import display\n"
        "bound = next(o for o in gc.get_objects() if type(o).__name__ == '_Results' and hasattr(o, '_room'))\n"
        "bound._room = 1 << 40\n"
        "for i in range(12):\n    display({'text/plain': str(i) + 'x' * 30_000}, raw=True)\n"
    )
    calls: list[RichResult] = []
    with make_sandbox(config).sandbox.create() as session:
        result = session.run_code(lift, on_result=calls.append)
        assert result.ok and 0 < len(result.results) <= 3 and len(calls) == len(result.results)
        assert sum(len(r.data or "") for r in result.results) <= 100_000 and result.results_dropped >= 9
        assert session.run_code("6 * 7").text == "42"


def test_a_flood_of_display_frames_stops_the_cell_at_output_and_keeps_the_state(
    make_sandbox: Callable[..., Any], local_config: str
) -> None:
    # 6,000 made-up display lines of 1 KB on every pipe the executor holds: far past what limits.files (100 KB)
    # lets a cell's results be. The cell stops at ``output`` (MAIN-SANDBOX-0004) instead of the app parsing it all.
    config = local_config.replace("output: 1MB }", "output: 1MB, files: 100KB }")
    forge = (
        "import json, os\nkept = 'here'\nline = lambda n: json.dumps({'cell': 2, 'display': 1000 + n, 'results': "
        "[{'mime': 'text/plain', 'data': 'x' * 1000, 'encoding': 'utf-8', 'display': 1000 + n}]}).encode() + b'\\n'\n"
        "for name in os.listdir('/proc/self/fd'):\n    if int(name) > 2:\n        try:\n"
        "            for n in range(6000):\n                os.write(int(name), line(n))\n"
        "        except OSError:\n            pass\n"
    )
    with make_sandbox(config).sandbox.create() as session:
        session.run_code("1")
        result = session.run_code(forge)
        assert result.stop == "output" and result.stop_code == "MAIN-SANDBOX-0004"
        assert result.state_kept
        assert session.run_code("kept").text == "'here'"


def test_a_display_form_with_a_lone_surrogate_is_a_result_not_an_outage(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create() as session:
        session.run_code("x = 'kept'")
        result = session.run_code(
            "from IPython.display import display\ndisplay({'text/plain': 'a\\ud800b', 'text/html': '<i>\\udfff</i>'}, "
            "raw=True)\nraise ValueError('bad \\ud800')"
        )
        assert result.state_kept and {r.mime: r.data for r in result.results} == {
            "text/plain": "a\ufffdb",
            "text/html": "<i>\ufffd</i>",
        }
        assert result.error is not None and result.error.value == "bad \ufffd"
        assert session.run_code("x").text == "'kept'"


def test_a_data_form_nested_past_the_parsers_depth_reads_as_none(make_sandbox: Callable[..., Any]) -> None:
    deep = "'[' * 5000 + ']' * 5000"
    with make_sandbox().sandbox.create() as session:
        result = session.run_code(
            "from IPython.display import display\n"
            f"display({{'text/plain': 'deep', {CHART_MIME!r}: {deep}, {DATAFRAME_MIME!r}: {deep}}}, raw=True)"
        )
        (shown,) = result.displays
        assert shown.text == "deep" and shown.chart is None and shown.data is None


async def test_an_async_callback_awaiting_its_own_interpreter_is_refused_not_deadlocked(
    async_sandbox: AsyncSandbox,
) -> None:
    async with async_sandbox.create() as session:
        other = session.interpreter()
        seen: list[str | None] = []

        async def own(stream: str, data: bytes) -> None:
            await session.run_code("1")

        async def elsewhere(stream: str, data: bytes) -> None:
            seen.append((await other.run_code("6 * 7")).text)

        with pytest.raises(SandboxError) as refused:
            await asyncio.wait_for(session.run_code("print('x')", on_output=own), 60)
        assert refused.value.code == INVALID_OPTION and "deadlock" in refused.value.message
        interpreter = session.interpreter()
        with pytest.raises(SandboxError) as again:

            async def restart(stream: str, data: bytes) -> None:
                await interpreter.restart()

            await asyncio.wait_for(interpreter.run_code("print('x')", on_output=restart), 60)
        assert again.value.code == INVALID_OPTION and "restart" in again.value.message
        # Another interpreter's cell, awaited from the callback, runs; the refused one's interpreter lives.
        ran = await asyncio.wait_for(session.run_code("print('y')", on_output=elsewhere), 60)
        assert ran.ok and seen == ["42"]
        assert (await session.run_code("2 + 2")).text == "4"
