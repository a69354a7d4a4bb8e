"""Cells on the local driver: one interpreter per session, real code in the real box."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from mainsdk import AsyncSandbox, Capabilities, SandboxError
from mainsdk.audit import code_sha256
from mainsdk.config import load_config_text
from mainsdk.driver import Command, ExecOutcome, InputStream, OutputSink
from mainsdk.errors import DRIVER_UNAVAILABLE, INVALID_OPTION, NO_SESSION
from mainsdk.hookspecs import hookimpl
from mainsdk.rich import INLINE_LIMIT
from mainsdk_local.driver import LocalDriver

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def test_variables_imports_and_open_files_stay_across_cells(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create() as session:
        first = session.run_code("import json\nx = 41\nlog = open('log.txt', 'w')\nprint('set')")
        assert first.ok and first.stdout == "set\n" and first.results == () and not first.restarted
        second = session.run_code("x += 1\nlog.write('kept'); log.flush()\njson.dumps({'x': x})")
        assert second.ok and second.state_kept and second.text == "'{\"x\": 42}'"
        assert session.read("log.txt") == b"kept"
        assert (first.number, second.number) == (1, 2)


def test_a_cell_larger_than_any_pipe_arrives_whole_and_its_hash_is_checked(make_sandbox: Callable[..., Any]) -> None:
    code = "blob = '" + "é" * 400_000 + "'\nlen(blob)"  # 800 KB of UTF-8 on the kernel's stdin and its cell pipe
    built = make_sandbox()
    with built.sandbox.create() as session:
        assert session.run_code(code).text == "400000"
        assert session.run_code("len(blob)").text == "400000"
    assert next(e.code_sha256 for e in built.events if e.kind == "cell") == code_sha256(code)


def test_an_error_comes_back_as_name_value_and_the_cells_traceback(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create() as session:
        session.run_code("def f(n):\n    return 10 // n")
        result = session.run_code("print('before')\nf(0)")
        assert result.error is not None and not result.ok and result.state_kept
        assert (result.error.name, result.error.value) == ("ZeroDivisionError", "integer division or modulo by zero")
        # IPython's traceback text, without colours: the cell's frames, the kernel's none.
        assert (
            "Cell In[2], line 2" in result.error.traceback and "Cell In[1], line 2, in f(n)" in result.error.traceback
        )
        assert "\x1b[" not in result.error.traceback and "interactiveshell" not in result.error.traceback
        assert "_kernel" not in result.error.traceback and "<string>" not in result.error.traceback
        assert result.stdout == "before\n"
        syntax = session.run_code("def (:")
        assert syntax.error is not None and syntax.error.name == "SyntaxError"
        exited = session.run_code("import sys; sys.exit(3)")
        assert exited.error is not None and exited.error.name == "SystemExit" and exited.state_kept
        assert session.run_code("f(5)").text == "2"


def test_a_timeout_interrupts_the_cell_and_keeps_the_state(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create() as session:
        session.run_code("x = 'kept'")
        result = session.run_code("import time\nprint('start', flush=True)\ntime.sleep(30)", timeout="1s")
        assert result.stop == "timeout" and result.stop_code == "MAIN-SANDBOX-0002"
        assert result.state_kept and result.error is not None and result.error.name == "KeyboardInterrupt"
        assert result.stdout == "start\n"
        after = session.run_code("x")
        assert after.text == "'kept'" and not after.restarted


def test_a_cell_that_ignores_the_interrupt_loses_the_interpreter_which_restarts_empty(
    make_sandbox: Callable[..., Any],
) -> None:
    with make_sandbox().sandbox.create() as session:
        session.run_code("x = 1")
        stubborn = (
            "import time\nwhile True:\n    try:\n        time.sleep(0.01)\n    except KeyboardInterrupt:\n        pass"
        )
        result = session.run_code(stubborn, timeout="1s")
        assert result.stop == "timeout" and not result.state_kept
        after = session.run_code("'x' in globals()")
        assert after.restarted and after.text == "False" and after.state_kept
        assert session.run_code("1").restarted is False


def test_an_interpreter_that_dies_is_reported_as_it_died_and_the_next_cell_starts_a_new_one(
    make_sandbox: Callable[..., Any],
) -> None:
    with make_sandbox().sandbox.create() as session:
        session.run_code("x = 1")
        exited = session.run_code("import os\nos._exit(3)")
        assert exited.error is not None and exited.error.name == "InterpreterExited" and not exited.state_kept
        assert "exited with status 3" in exited.error.value
        killed = session.run_code("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
        assert killed.restarted and killed.error is not None and "died of SIGSEGV" in killed.error.value
        # The supervisor itself killed (same uid, it can be signalled): the interpreter is gone, nothing more.
        parent = session.run_code(
            "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nimport time; time.sleep(5)"
        )
        assert parent.restarted and parent.error is not None and parent.error.name == "InterpreterExited"
        after = session.run_code("'x' in globals()")
        assert after.restarted and after.text == "False"


def test_modules_a_cell_plants_in_the_work_folder_are_never_the_kernels(make_sandbox: Callable[..., Any]) -> None:
    # The kernel runs ``-I``: the work folder (where cells and session commands write) is not on its path while
    # it imports its own modules; a notebook's own imports from that folder still work.
    plant = (
        "for name in ('json', 'hashlib', 'selectors', 'signal', 'ast', 'traceback', 'ctypes'):\n"
        "    open(name + '.py', 'w').write('import sys; sys.stderr.write(\"PLANTED\\\\n\"); raise SystemExit(9)')\n"
        "open('mine.py', 'w').write('VALUE = 7')"
    )
    with make_sandbox().sandbox.create() as session:
        session.run_code(plant)
        session.run_code("import os\nos._exit(1)")  # the next cell starts a new kernel, in that folder
        fresh = session.run_code("import json, mine\n(json.__file__.startswith('/work'), mine.VALUE)")
        assert fresh.restarted and fresh.text == "(False, 7)" and "PLANTED" not in fresh.stderr


def test_memory_and_output_limits_hold_for_the_interpreter(make_sandbox: Callable[..., Any]) -> None:
    config = """
sandbox:
  driver: local
  local: { python: python3 }
  limits: { timeout: 20s, memory: 128MB, output: 10KB }
permissions:
  processes: [python3]
  disk: { temp: { max: 16MB } }
"""
    with make_sandbox(config).sandbox.create() as session:
        session.run_code("x = 1")
        memory = session.run_code("blocks = []\nwhile True: blocks.append(bytearray(8 << 20))")
        assert memory.stop == "memory" or (memory.error is not None and memory.error.name == "MemoryError")
        if memory.stop == "memory":
            assert not memory.state_kept and session.run_code("1").restarted
        session.run_code("del blocks" if memory.state_kept else "x = 1")
        flood = session.run_code("while True: print('y' * 1000)")
        assert flood.stop == "output" and not flood.state_kept and len(flood.stdout) <= 10 * 1024
        assert session.run_code("'x' in globals()").text == "False"


def test_output_that_looks_like_a_frame_is_only_output(make_sandbox: Callable[..., Any]) -> None:
    with make_sandbox().sandbox.create() as session:
        fake = "\\x1e" + "0" * 32 + ':{"cell": 1, "results": [], "error": null, "stop": "timeout"}'
        result = session.run_code(f"import sys\nprint('{fake}')\nsys.stderr.write('\\x1eabc:end\\n')\n'real'")
        assert result.ok and result.text == "'real'"
        assert '"stop": "timeout"' in result.stdout and result.stderr == "\x1eabc:end\n"
        # The token is not in the cell's reach by ordinary means: not argv, not the environment, not its globals.
        probe = session.run_code("import sys, os\n(sys.argv, sorted(k for k in globals() if not k.startswith('__')))")
        assert probe.text is not None and "'sys'" in probe.text and "token" not in probe.text


def test_rich_results_carry_their_mime_types(make_sandbox: Callable[..., Any]) -> None:
    code = f"""
import asyncio
import base64
class Chart:
    def _repr_png_(self): return base64.b64decode({base64.b64encode(PNG).decode()!r})
    def _repr_svg_(self): return '<svg xmlns="http://www.w3.org/2000/svg"/>'
    def _repr_html_(self): return '<table><tr><td>1</td></tr></table>'
    def _repr_json_(self): return {{"rows": 1}}
    def __repr__(self): return 'Chart()'
Chart()
"""
    with make_sandbox().sandbox.create() as session:
        result = session.run_code(code)
        forms = {r.mime: r.data for r in result.results}
        assert forms == {
            "image/png": PNG,
            "image/svg+xml": '<svg xmlns="http://www.w3.org/2000/svg"/>',
            "text/html": "<table><tr><td>1</td></tr></table>",
            "application/json": '{"rows": 1}',
            "text/plain": "Chart()",
        }


def test_a_large_rich_result_comes_as_a_file_ref(make_sandbox: Callable[..., Any]) -> None:
    built = make_sandbox()
    with built.sandbox.create() as session:
        result = session.run_code(f"class Big:\n    def _repr_html_(self): return 'a' * {INLINE_LIMIT + 1}\nBig()")
        html = next(r for r in result.results if r.mime == "text/html")
        assert html.data is None and html.file is not None and html.file.size == INLINE_LIMIT + 1
        assert built.sandbox.files.read(html.file) == b"a" * (INLINE_LIMIT + 1)


def test_a_secret_in_a_cells_output_and_values_is_redacted(
    make_sandbox: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mainsdk import secret

    monkeypatch.setenv("TEST_API_KEY", "sk-cell-secret-value-123")
    with make_sandbox().sandbox.create(env={"KEY": secret("TEST_API_KEY")}) as session:
        result = session.run_code("import os\nk = os.environ['KEY']\nprint(k)\nk")
        assert "sk-cell-secret-value-123" not in result.stdout + (result.text or "")
        failed = session.run_code("raise ValueError(k)")
        assert (
            failed.error is not None and "sk-cell-secret-value-123" not in failed.error.value + failed.error.traceback
        )


def test_each_cell_is_one_audit_event_with_the_codes_hash_and_its_number(make_sandbox: Callable[..., Any]) -> None:
    built = make_sandbox()
    with built.sandbox.create(feature="notebook") as session:
        session.run_code("x = 1")
        session.run_code("x + 1")
        with pytest.raises(SandboxError) as refused:
            session.run_code("x", language="cobol")
        assert refused.value.code == INVALID_OPTION and "not a cell language" in refused.value.message
    cells = [e for e in built.events if e.kind == "cell"]
    assert [(e.cell, e.code_sha256, e.session_id) for e in cells] == [
        (1, code_sha256("x = 1"), session.id),
        (2, hashlib.sha256(b"x + 1").hexdigest(), session.id),
    ]
    assert all(e.feature == "notebook" and e.error is None for e in cells)
    assert [e.kind for e in built.events if e.cell == 3] == ["refused"]


def test_closing_the_session_ends_the_interpreter(make_sandbox: Callable[..., Any]) -> None:
    session = make_sandbox().sandbox.create()
    session.run_code("x = 1")
    session.close()
    with pytest.raises(SandboxError):
        session.run_code("x")


async def test_cells_on_async_sandbox(async_sandbox: AsyncSandbox) -> None:
    async with async_sandbox.create() as session:
        await session.run_code("import math\nr = 2")
        result = await session.run_code("math.pi * r ** 2")
        assert result.ok and result.text is not None and result.text.startswith("12.56")


class _WithoutCells(LocalDriver):
    """The local driver, declaring neither cells nor background processes."""

    @hookimpl
    def mainsdk_driver_capabilities(self) -> Capabilities:
        return attrs.evolve(super().mainsdk_driver_capabilities(), cells=False, background=False)


def test_a_driver_that_does_not_declare_cells_or_background_refuses_them(
    make_sandbox: Callable[..., Any], local_config: str
) -> None:
    config = load_config_text(local_config)
    built = make_sandbox(driver=_WithoutCells(permissions=config.permissions))
    with built.sandbox.create() as session:
        with pytest.raises(SandboxError) as cell:
            session.run_code("1")
        assert cell.value.code == INVALID_OPTION and "Capabilities.cells" in cell.value.message
        with pytest.raises(SandboxError) as started:
            session.start("python3", ["-c", "1"])
        assert started.value.code == INVALID_OPTION and "Capabilities.background" in started.value.message
    assert [e.kind for e in built.events if e.cell == 1] == ["refused"]


def test_a_cell_cannot_disarm_the_time_limit_or_forge_its_duration(make_sandbox: Callable[..., Any]) -> None:
    built = make_sandbox()
    with built.sandbox.create() as session:
        # Rebinding what the watchdog calls, ignoring SIGINT: the interpreter still ends at timeout + grace.
        stubborn = (
            "import os, signal, time\nos._exit = os.kill = lambda *a: None\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)"
        )
        started = time.monotonic()
        result = session.run_code(stubborn, timeout="1s")
        assert result.stop == "timeout" and not result.state_kept and time.monotonic() - started < 15
        assert result.duration >= 1.0  # the app's own clock: the kernel's frame never sets it


def test_a_thread_spamming_forged_results_cannot_end_a_later_cell(make_sandbox: Callable[..., Any]) -> None:
    # Every millisecond for 5 s, into every descriptor the interpreter holds (its result pipe among them): a
    # forged result line for cell 2, and the old kernel's frame when its token was in reach. The end of cell 2
    # is the supervisor's own view of the executor's main thread, so cell 2 still takes its 3 s and its output.
    spam = (
        "import json, os, sys, threading, time\nkernel = sys._getframe(1).f_locals\n"
        "line = json.dumps({'cell': 2, 'results': [], 'results_dropped': 0, 'error': None}).encode() + b'\\n'\n"
        "def spam():\n    end = time.time() + 5\n    while time.time() < end:\n"
        "        if 'mark_out' in kernel:\n"
        "            os.write(kernel['frame_out'], kernel['mark_out'] + line)\n"
        "            os.write(kernel['frame_err'], kernel['end_err'])\n"
        "        for name in os.listdir('/proc/self/fd'):\n            if int(name) > 2:\n"
        "                try:\n                    os.write(int(name), line)\n                except OSError:\n"
        "                    pass\n        time.sleep(0.001)\n"
        "threading.Thread(target=spam, daemon=True).start()"
    )
    with make_sandbox().sandbox.create() as session:
        session.run_code(spam)
        started = time.monotonic()
        second = session.run_code("import time\ntime.sleep(3)\nprint('MARK-2')")
        assert time.monotonic() - started >= 2.9 and second.duration >= 2.9
        assert "MARK-2" in second.stdout and second.state_kept


class _Tampering(LocalDriver):
    """The local driver, rewriting what the app sends a cell kernel on its way into the box (a broken channel)."""

    @hookimpl
    async def mainsdk_driver_exec(self, box: Any, command: Command, output: OutputSink) -> ExecOutcome:
        if command.input is None:
            return await super().mainsdk_driver_exec(box, command, output)
        source, tampered = command.input, InputStream()

        async def rewrite() -> None:
            async for chunk in source:
                tampered.send(chunk.replace(b"'app'", b"'evil'"))
            tampered.close()

        pump = asyncio.ensure_future(rewrite())
        try:
            return await super().mainsdk_driver_exec(box, attrs.evolve(command, input=tampered), output)
        finally:
            pump.cancel()


def test_code_the_kernel_did_not_get_from_the_app_is_an_error_never_a_result(
    make_sandbox: Callable[..., Any], local_config: str
) -> None:
    config = load_config_text(local_config)
    built = make_sandbox(driver=_Tampering(permissions=config.permissions))
    with built.sandbox.create() as session:
        assert session.run_code("1 + 1").text == "2"
        with pytest.raises(SandboxError) as caught:
            session.run_code("'app'")
        assert caught.value.code == DRIVER_UNAVAILABLE and "SHA-256" in caught.value.message
        assert caught.value.ran is None and not caught.value.retryable
        assert session.run_code("2 + 2").restarted  # the kernel that ran other code was ended
    cells = [(e.cell, e.error) for e in built.events if e.kind == "cell"]
    assert cells == [(1, None), (2, DRIVER_UNAVAILABLE), (3, None)]


def test_the_supervisor_holding_the_token_is_out_of_the_cells_reach(make_sandbox: Callable[..., Any]) -> None:
    # Undumpable (and, here, hidden by /proc's hidepid): no memory, environment or descriptor of it opens.
    probe = (
        "import os\nppid = os.getppid()\nopened = []\n"
        "for name in ('mem', 'environ', 'fd/0', 'fd/1', 'syscall'):\n    try:\n"
        "        open(f'/proc/{ppid}/{name}', 'rb').close()\n        opened.append(name)\n"
        "    except OSError:\n        pass\nopened"
    )
    with make_sandbox().sandbox.create() as session:
        assert session.run_code(probe).text == "[]"


def test_a_raising_listener_sees_nothing_more_and_the_cell_ends_as_it_would(make_sandbox: Callable[..., Any]) -> None:
    seen: list[bytes] = []

    def listener(stream: str, data: bytes) -> None:
        seen.append(data)
        raise RuntimeError("listener down")

    built = make_sandbox()
    with built.sandbox.create() as session:
        with pytest.raises(RuntimeError) as caught:
            session.run_code(
                "import time\nprint('one', flush=True)\ntime.sleep(0.3)\nprint('two')\nv = 5", on_output=listener
            )
        assert getattr(caught.value, "ran", None) is True and len(seen) == 1
        assert session.run_code("v").text == "5"  # the cell ran to its end, in the same interpreter
    assert [(e.cell, e.error) for e in built.events if e.kind == "cell"] == [(1, "RuntimeError"), (2, None)]


async def test_a_cell_the_caller_cancels_takes_its_interpreter_and_never_answers_the_next(
    async_sandbox: AsyncSandbox,
) -> None:
    async with async_sandbox.create() as session:
        await session.run_code("x = 1")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(session.run_code("import time\ntime.sleep(3)\n'late'"), 0.5)
        after = await asyncio.wait_for(session.run_code("'next'"), 20)
        assert after.text == "'next'" and after.restarted


async def test_closing_the_session_while_a_cell_runs_ends_the_cell_with_0008(async_sandbox: AsyncSandbox) -> None:
    session = await async_sandbox.create()
    await session.run_code("x = 1")
    running = asyncio.ensure_future(session.run_code("import time\ntime.sleep(60)"))
    await asyncio.sleep(0.5)
    await session.close()
    with pytest.raises(SandboxError) as caught:
        await asyncio.wait_for(running, 20)
    assert caught.value.code == NO_SESSION
