"""Cells under attack (issue 31): what one cell leaves, or what a cell says, never decides past its limits.

Each test runs real code in a real local box through the public API only, as the attacker did.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from typing import Any

import pytest
from mainsdk import AsyncSandbox, SandboxError, secret
from mainsdk.errors import DRIVER_UNAVAILABLE, INVALID_OPTION
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
        "bound = next(o for o in gc.get_objects() if type(o).__name__ == 'Results' and hasattr(o, '_room'))\n"
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


# What an earlier cell leaves sitting in read(R) on the executor's main thread once that cell is over: the next
# request would be its to take, with a made-up result for the next cell written first.
_PYTHON_LEFTOVER = (
    "import json, os, signal, threading, time\n"
    "args = open('/proc/self/cmdline', 'rb').read().split(b'\\0')\n"
    "R, W = (int(a) for a in args[args.index(b'executor') + 3 : args.index(b'executor') + 5])\n"
    "def steal(signum, frame):\n"
    "    forged = {'cell': 2, 'results': [{'mime': 'text/plain', 'data': \"'forged'\", 'encoding': 'utf-8'}], "
    "'results_dropped': 0, 'error': None}\n"
    "    os.write(W, json.dumps(forged).encode() + b'\\n')\n"
    "    while True:\n        os.read(R, 1 << 16)\n"
    "signal.signal(signal.SIGUSR1, steal)\n"
    "threading.Thread(target=lambda: (time.sleep(0.3), os.kill(os.getpid(), signal.SIGUSR1)), daemon=True).start()"
)
_BASH_LEFTOVER = (
    '__steal() { printf \'%s\\n\' \'{"cell": 2, "results": [{"mime": "text/plain", "data": "forged", '
    '"encoding": "utf-8"}], "results_dropped": 0, "error": null}\' >&"$__mainsdk_W"; '
    'while :; do read -r -u "$__mainsdk_R" __l; done; }\n'
    "trap __steal USR1\n(sleep 0.3; kill -USR1 $$) &"
)


@pytest.mark.parametrize(("language", "leftover"), [("python", _PYTHON_LEFTOVER), ("bash", _BASH_LEFTOVER)])
def test_a_handler_an_earlier_cell_left_in_read_never_ends_a_later_cell(
    make_sandbox: Callable[..., Any], language: str, leftover: str
) -> None:
    built = make_sandbox()
    later = "print('ran')" if language == "python" else "echo ran"
    with built.sandbox.create() as session:
        assert session.run_code(leftover, language=language).error is None
        time.sleep(1.0)  # the handler runs, and sits in read(R) on the main thread
        with pytest.raises(SandboxError) as caught:
            session.run_code(later, language=language)
        assert caught.value.code == DRIVER_UNAVAILABLE and caught.value.ran is False
        assert "not waiting for a cell" in caught.value.message and "not run" in caught.value.message
        after = session.run_code(later, language=language)
        assert after.restarted and after.stdout == "ran\n"
    assert [(e.cell, e.error) for e in built.events if e.kind == "cell"] == [
        (1, None),
        (2, DRIVER_UNAVAILABLE),
        (3, None),
    ]


@needs_node
def test_a_js_callback_an_earlier_cell_left_holding_the_main_thread_never_ends_a_later_cell(
    make_sandbox: Callable[..., Any],
) -> None:
    # A timer that writes a result for cell 2, then keeps node's main thread in read(R); then one that never returns.
    leftover = (
        "const fs = require('fs');\nconst [R, W] = [Number(process.argv[3]), Number(process.argv[4])];\n"
        "setTimeout(() => {\n  fs.writeSync(W, JSON.stringify({cell: 2, results: [{mime: 'text/plain', data: "
        "\"'forged'\", encoding: 'utf-8'}], results_dropped: 0, error: null}) + '\\n');\n"
        "  const b = Buffer.alloc(65536);\n  for (;;) fs.readSync(R, b);\n}, 300);\n1"
    )
    busy = "setTimeout(() => { for (;;); }, 300);\n1"  # a callback that never gives the event loop back
    built = make_sandbox()
    with built.sandbox.create() as session:
        assert session.run_code(leftover, language="javascript").error is None
        time.sleep(1.0)
        with pytest.raises(SandboxError) as caught:
            session.run_code("console.log('ran'); 'real'", language="javascript")
        assert caught.value.code == DRIVER_UNAVAILABLE and caught.value.ran is False
        assert session.run_code(busy, language="javascript").restarted
        time.sleep(1.0)
        with pytest.raises(SandboxError) as caught:
            session.run_code("console.log('ran'); 'real'", language="javascript")
        assert caught.value.code == DRIVER_UNAVAILABLE and caught.value.ran is False
        after = session.run_code("console.log('ran'); 'real'", language="javascript")
        assert after.restarted and after.text == "'real'" and after.stdout == "ran\n"
    assert [(e.cell, e.error) for e in built.events if e.kind == "cell"] == [
        (1, None),
        (2, DRIVER_UNAVAILABLE),
        (3, None),
        (4, DRIVER_UNAVAILABLE),
        (5, None),
    ]


def test_a_thread_an_earlier_cell_left_taking_the_next_request_never_ends_that_cell(
    make_sandbox: Callable[..., Any],
) -> None:
    # The thread waits in read(R) before the main thread does, so the pipe hands it the next request; it answers.
    leftover = (
        "import json, os, threading\nargs = open('/proc/self/cmdline', 'rb').read().split(b'\\0')\n"
        "R, W = (int(a) for a in args[args.index(b'executor') + 3 : args.index(b'executor') + 5])\n"
        "def steal():\n    os.read(R, 1 << 16)\n"
        "    forged = {'cell': 2, 'results': [{'mime': 'text/plain', 'data': \"'forged'\", 'encoding': 'utf-8'}], "
        "'results_dropped': 0, 'error': None}\n    os.write(W, json.dumps(forged).encode() + b'\\n')\n"
        "threading.Thread(target=steal, daemon=True).start()\nimport time\ntime.sleep(0.3)"  # in read(R) first
    )
    built = make_sandbox()
    with built.sandbox.create() as session:
        session.run_code(leftover)
        time.sleep(0.3)
        with pytest.raises(SandboxError) as caught:
            session.run_code("print('ran')\n'real'", timeout="2s")
        assert caught.value.code == DRIVER_UNAVAILABLE and caught.value.ran is False
        assert "not run" in caught.value.message
        assert session.run_code("print('ran')").restarted
    assert [(e.cell, e.error) for e in built.events if e.kind == "cell"] == [
        (1, None),
        (2, DRIVER_UNAVAILABLE),
        (3, None),
    ]


def test_streams_a_cell_replaced_or_closed_are_restored_before_the_next_cell(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create() as session:
        session.run_code("import sys\nsys.stdout = None\nsys.stderr = None")
        after = session.run_code("print('back')\nimport sys\nprint('err', file=sys.stderr)")
        assert after.ok and after.stdout == "back\n" and after.stderr == "err\n"
        session.run_code("sys.stdout.close()")
        assert session.run_code("print('again')").stdout == "again\n"


@needs_node
async def test_a_js_cell_delivers_every_byte_up_to_the_output_limit_and_stops_there(
    async_sandbox: AsyncSandbox,
) -> None:
    async with async_sandbox.create() as session:
        whole = await session.run_code("process.stdout.write('x'.repeat(200000)); 1", language="javascript")
        assert whole.ok and whole.stdout == "x" * 200000
        assert (await session.run_code("2", language="javascript")).stdout == ""  # nothing of it comes late
        endless = await session.run_code("for (;;) console.log('y'.repeat(1000))", language="javascript")
        assert endless.stop == "output" and endless.stop_code == "MAIN-SANDBOX-0004"
        once = await session.run_code("process.stdout.write('z'.repeat(5000000))", language="javascript")
        assert once.stop == "output" and once.stdout.startswith("z" * 1000)
        assert (await session.run_code("6 * 7", language="javascript")).text == "42"


@needs_node
async def test_a_js_cell_awaiting_a_promise_that_never_settles_is_interrupted_with_its_state_kept(
    async_sandbox: AsyncSandbox,
) -> None:
    async with async_sandbox.create() as session:
        await session.run_code("var kept = 'here'", language="javascript")
        never = await session.run_code("await new Promise(() => {})", language="javascript", timeout="1s")
        assert never.stop == "timeout" and never.state_kept and never.error is not None
        after = await session.run_code("kept", language="javascript")
        assert after.text == "'here'" and not after.restarted


async def test_a_bash_cell_that_resets_the_int_trap_still_ends_at_its_timeout(async_sandbox: AsyncSandbox) -> None:
    async with async_sandbox.create() as session:
        await session.run_code("v=kept; trap - INT", language="bash")
        interrupted = await session.run_code("sleep 5", language="bash", timeout="1s")
        assert interrupted.stop == "timeout" and interrupted.state_kept  # the kernel's trap is back for each cell
        assert (await session.run_code('echo "$v"', language="bash")).stdout == "kept\n"
        dying = await session.run_code("trap - INT; sleep 5", language="bash", timeout="1s")
        assert dying.stop == "timeout" and dying.stop_code == "MAIN-SANDBOX-0002"


@needs_node
def test_a_js_cell_making_the_shared_stdout_non_blocking_never_loses_the_supervisors_frame(
    make_sandbox: Callable[..., Any],
) -> None:
    # node's stdout is the supervisor's own open file: the cell makes it non-blocking and fills the pipe while
    # the app reads slowly, so the supervisor's frame (600 KB: the value's two forms) meets EAGAIN.
    def slow(stream: str, data: bytes) -> None:
        time.sleep(0.05)

    with make_sandbox().sandbox.create() as session:
        session.run_code("var kept = 'here'", language="javascript")
        result = session.run_code(
            "process.stdout._handle.setBlocking(false);\nprocess.stdout.write('q'.repeat(300000));\n'r'.repeat(300000)",
            language="javascript",
            on_output=slow,
        )
        assert result.ok and result.stdout == "q" * 300000 and result.state_kept
        assert session.run_code("kept", language="javascript").text == "'here'"


def test_a_display_line_nested_past_the_parsers_depth_is_a_malformed_line_not_a_dead_kernel(
    make_sandbox: Callable[..., Any],
) -> None:
    deep = (
        "import os\nargs = open('/proc/self/cmdline', 'rb').read().split(b'\\0')\n"
        "W = int(args[args.index(b'executor') + 4])\nkept = 'here'\n"
        "os.write(W, b'{\"cell\": 1, \"display\": ' + b'[' * 100000 + b']' * 100000 + b'}\\n')\n'done'"
    )
    with make_sandbox().sandbox.create() as session:
        result = session.run_code(deep)
        assert result.ok and result.text == "'done'" and result.state_kept
        assert session.run_code("kept").text == "'here'"
