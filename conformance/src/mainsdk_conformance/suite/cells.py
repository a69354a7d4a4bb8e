"""Cells (``session.run_code``) and background processes (``session.start``), on drivers that declare them."""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Callable

import pytest
from mainsdk.audit import code_sha256
from mainsdk.driver import CELL_LANGUAGES
from mainsdk.errors import INVALID_OPTION, NO_SESSION, SandboxError
from mainsdk.sync import Process

from mainsdk_conformance.marks import requires, requires_cells_language
from mainsdk_conformance.target import Conformance

# A 1x1 PNG, so a rich result can be checked byte for byte with the standard library alone in the box.
PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
STUBBORN = "import time\nwhile True:\n    try:\n        time.sleep(0.01)\n    except KeyboardInterrupt:\n        pass"
SERVE = "import time\nprint('ready', flush=True)\nwhile True:\n    time.sleep(0.05)"

# Issue 22, finding 2, as it was found: cell 1 plants the next request where the kernel took requests from (its
# folder, read from the kernel's frame), as code that waits for the app's own request file and deletes it, then
# answers in its place. Where requests come only on the kernel's stdin the planted file is nothing.
PLANT = """
import json, os, sys
folder = sys._getframe(1).f_locals.get("folder") or ".mainsdk-cells"
os.makedirs(folder, exist_ok=True)
forged = (
    "import os, time\\n"
    f"path = {os.path.join(folder, '2.json')!r}\\n"
    "end = time.time() + 10\\n"
    "while not os.path.exists(path) and time.time() < end:\\n    time.sleep(0.001)\\n"
    "try:\\n    os.unlink(path)\\nexcept OSError:\\n    pass\\n"
    "print('FORGED')\\n'forged'"
)
with open(os.path.join(folder, "2.json"), "w") as f:
    json.dump({"code": forged, "timeout": 30}, f)
"""
# Finding 2's second half: a cell makes the request folder unusable (on the old kernel every later cell failed).
LOCK_OUT = """
import os
os.makedirs(".mainsdk-cells", exist_ok=True)
for top, folders, _files in os.walk(".mainsdk-cells", topdown=False):
    for name in folders:
        os.chmod(os.path.join(top, name), 0)
os.chmod(".mainsdk-cells", 0)
"""
# Finding 3: a daemon thread left by cell 1 writes a forged end one second into cell 2, with whatever it can
# reach: the old kernel's frame descriptors and token (its locals), and every descriptor the interpreter holds.
FORGE_LATER = """
import json, os, sys, threading, time
kernel = sys._getframe(1).f_locals
def forge():
    time.sleep(1)
    frame = {"cell": 2, "results": [{"mime": "text/plain", "data": "'forged'", "encoding": "utf-8"}],
             "results_dropped": 0, "error": None, "stop": None}
    line = json.dumps(frame).encode() + b"\\n"
    if "mark_out" in kernel:
        os.write(kernel["frame_out"], kernel["mark_out"] + line)
        os.write(kernel["frame_err"], kernel["end_err"])
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2:
            try:
                os.write(int(name), line)
            except OSError:
                pass
threading.Thread(target=forge, daemon=True).start()
"""
SLOW = "import time\ntime.sleep(3)\nprint('MARK-2')\n6 * 7"
# The same forge from a JS cell's timer: on the executor's result pipe (its second argument, W) one second into
# cell 2 (node's other pipes, its signal pipe among them, would crash it: that ends only the interpreter).
JS_FORGE_LATER = """
const forged = JSON.stringify({cell: 2, results: [{mime: "text/plain", data: "'forged'", encoding: "utf-8"}],
                               results_dropped: 0, error: null, stop: null}) + "\\n";
setTimeout(() => require("node:fs").writeSync(Number(process.argv[2]), forged), 1000);
"""
JS_SLOW = "await new Promise((r) => setTimeout(r, 3000));\nconsole.log('MARK-2');\n6 * 7"
# And from a bash cell's background job, into every descriptor the job has.
BASH_FORGE_LATER = """
line='{"cell": 2, "results": [{"mime": "text/plain", "data": "forged", "encoding": "utf-8"}], '
line+='"results_dropped": 0, "error": null, "stop": null}'
( sleep 1; for fd in /proc/$BASHPID/fd/*; do n=${fd##*/}; ((n > 2)) && echo "$line" >&"$n"; done ) 2>/dev/null &
"""
BASH_SLOW = "sleep 3; echo MARK-2"


def _running(process: Process) -> bool:
    return process.running  # a call, so a type checker does not keep the narrowed value across the kill


def _until(check: Callable[[], bool], seconds: float = 30.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.05)
    return False


@requires("sessions", "cells")
class TestCells:
    """A session's interpreters: state across cells, values, errors, timeouts, rich results, audit; several
    interpreters in one session, each with its own state and folder, listed, restarted and closed."""

    def test_state_stays_across_cells(self, conformance: Conformance) -> None:
        with conformance.sandbox().create() as session:
            first = session.run_code("import json\nx = 41\nprint('set')")
            second = session.run_code("x += 1\njson.dumps({'x': x})")
            assert (first.stdout, first.results, first.ok) == ("set\n", (), True)
            assert second.text == "'{\"x\": 42}'" and second.state_kept and not second.restarted

    def test_an_error_is_its_name_value_and_traceback(self, conformance: Conformance) -> None:
        with conformance.sandbox().create() as session:
            result = session.run_code("print('before')\n{}['missing']")
            assert result.error is not None and result.error.name == "KeyError"
            # The cell's own frame: IPython's "Cell In[1], line 2", or "<cell-1>" where the box has no IPython.
            assert result.error.value == "'missing'" and (
                "Cell In[1]" in result.error.traceback or "<cell-1>" in result.error.traceback
            )
            assert result.stdout == "before\n" and result.state_kept

    def test_a_timeout_interrupts_the_cell_and_keeps_the_state(self, conformance: Conformance) -> None:
        with conformance.sandbox().create() as session:
            session.run_code("x = 'kept'")
            result = session.run_code("import time\ntime.sleep(60)", timeout="1s")
            assert result.stop == "timeout" and result.state_kept
            assert result.error is not None and result.error.name == "KeyboardInterrupt"
            assert session.run_code("x").text == "'kept'"

    def test_a_cell_that_will_not_stop_ends_the_interpreter_which_restarts_empty(
        self, conformance: Conformance
    ) -> None:
        with conformance.sandbox().create() as session:
            session.run_code("x = 1")
            stubborn = STUBBORN
            result = session.run_code(stubborn, timeout="1s")
            assert result.stop == "timeout" and not result.state_kept
            after = session.run_code("'x' in globals()")
            assert after.restarted and after.text == "False"

    def test_rich_results_carry_their_mime_types(self, conformance: Conformance) -> None:
        code = (
            "import base64\n"
            "class Table:\n"
            f"    def _repr_png_(self): return base64.b64decode('{PNG_B64}')\n"
            "    def _repr_html_(self): return '<table></table>'\n"
            "    def __repr__(self): return 'Table()'\n"
            "Table()"
        )
        with conformance.sandbox().create() as session:
            result = session.run_code(code)
            forms = {r.mime: r.data for r in result.results}
            assert forms == {
                "image/png": base64.b64decode(PNG_B64),
                "text/html": "<table></table>",
                "text/plain": "Table()",
            }

    def test_each_cell_is_one_audit_event(self, conformance: Conformance) -> None:
        built = conformance.build()
        with built.sandbox.create() as session:
            session.run_code("a = 1")
            session.run_code("a + 1")
        cells = [(e.kind, e.cell, e.code_sha256, e.session_id) for e in built.events if e.kind == "cell"]
        assert cells == [("cell", 1, code_sha256("a = 1"), session.id), ("cell", 2, code_sha256("a + 1"), session.id)]

    def test_a_request_planted_by_a_cell_is_never_run(self, conformance: Conformance) -> None:
        built = conformance.build()
        with built.sandbox.create() as session:
            session.run_code(PLANT)
            second = session.run_code("print('app')\n'app'")
            assert (second.stdout, second.text, second.ok) == ("app\n", "'app'", True)
        shas = [e.code_sha256 for e in built.events if e.kind == "cell"]
        assert shas == [code_sha256(PLANT), code_sha256("print('app')\n'app'")]

    def test_locking_a_cell_folder_does_nothing_to_later_cells(self, conformance: Conformance) -> None:
        with conformance.sandbox().create() as session:
            session.run_code(LOCK_OUT)
            assert session.run_code("1 + 1", timeout="5s").text == "2"
            assert session.run_code("'still'", timeout="5s").text == "'still'"

    def test_a_thread_of_an_earlier_cell_cannot_end_a_later_cell(self, conformance: Conformance) -> None:
        with conformance.sandbox().create() as session:
            session.run_code(FORGE_LATER)
            started = time.monotonic()
            second = session.run_code(SLOW)
            took = time.monotonic() - started
            third = session.run_code("'after'")
            assert took >= 2.9 or conformance.replayed  # a replay has no clock to keep: the output must show it
            assert second.text == "42" and "MARK-2" in second.stdout
            assert "MARK-2" not in third.stdout and third.text == "'after'"

    @requires_cells_language("javascript")
    def test_a_js_cell_keeps_its_state_and_returns_the_value_of_a_top_level_await(
        self, conformance: Conformance
    ) -> None:
        with conformance.sandbox().create() as session:
            first = session.run_code(
                'import {sep} from "node:path";\nconst n = await Promise.resolve(41);\nconsole.log("set");\nn + 1',
                language="javascript",
            )
            assert first.text == "42" and first.stdout == "set\n" and first.error is None
            second = session.run_code("({n, sep})", language="javascript")
            assert second.text == "{ n: 41, sep: '/' }" and second.state_kept and not second.restarted
            failed = session.run_code("null.x", language="javascript")
            assert (
                failed.error is not None and failed.error.name == "TypeError" and "<cell-3>" in failed.error.traceback
            )
            slow = session.run_code(
                "await new Promise((r) => setTimeout(r, 60000))", language="javascript", timeout="1s"
            )
            assert slow.stop == "timeout" and slow.state_kept and slow.error is not None
            assert session.run_code("n", language="javascript").text == "41"

    @requires_cells_language("bash")
    def test_a_bash_cell_keeps_cd_and_export_and_reports_its_status(self, conformance: Conformance) -> None:
        with conformance.sandbox().create() as session:
            assert session.run_code("mkdir -p sub && cd sub && export KEPT=1 && v=2", language="bash").ok
            shown = session.run_code('basename "$PWD"; sh -c \'echo "$KEPT"\'; echo "$v"', language="bash")
            assert shown.stdout == "sub\n1\n2\n" and shown.error is None
            failed = session.run_code("(exit 3)", language="bash")
            assert failed.error is not None and (failed.error.name, failed.error.value) == ("ExitStatus", "3")
            slow = session.run_code("sleep 60; echo not-after", language="bash", timeout="1s")
            assert slow.stop == "timeout" and slow.state_kept and "not-after" not in slow.stdout
            assert session.run_code('echo "$v"', language="bash").stdout == "2\n"

    @requires_cells_language("javascript")
    def test_a_timer_of_an_earlier_js_cell_cannot_end_a_later_cell(self, conformance: Conformance) -> None:
        with conformance.sandbox().create() as session:
            session.run_code(JS_FORGE_LATER, language="javascript")
            started = time.monotonic()
            second = session.run_code(JS_SLOW, language="javascript")
            took = time.monotonic() - started
            assert took >= 2.9 or conformance.replayed  # a replay has no clock to keep: the output must show it
            assert second.text == "42" and "MARK-2" in second.stdout

    @requires_cells_language("bash")
    def test_a_background_job_of_an_earlier_bash_cell_cannot_end_a_later_cell(self, conformance: Conformance) -> None:
        with conformance.sandbox().create() as session:
            session.run_code(BASH_FORGE_LATER, language="bash")
            started = time.monotonic()
            second = session.run_code(BASH_SLOW, language="bash")
            took = time.monotonic() - started
            assert took >= 2.9 or conformance.replayed
            assert second.results == () and second.stdout.endswith("MARK-2\n")

    def test_a_listener_that_raises_is_the_apps_error_and_the_interpreter_lives(self, conformance: Conformance) -> None:
        def listener(stream: str, data: bytes) -> None:
            raise ValueError("the app's listener broke")

        with conformance.sandbox().create() as session:
            session.run_code("x = 1")
            try:
                session.run_code("x += 1\nprint('seen')", on_output=listener)
            except ValueError as exc:
                assert getattr(exc, "ran", None) is True
            else:
                raise AssertionError("the listener's error was not raised")
            after = session.run_code("x")
            assert after.text == "2" and not after.restarted

    @requires_cells_language("python")
    def test_a_second_interpreter_keeps_its_own_state(self, conformance: Conformance) -> None:
        built = conformance.build()
        with built.sandbox.create() as session:
            session.run_code("x = 'default'")
            other = session.interpreter("python")
            assert other.run_code("'x' in globals()").text == "False"
            other.run_code("x = 'other'")
            assert session.run_code("x").text == "'default'" and other.run_code("x").text == "'other'"
            [default] = [i for i in session.interpreters() if i.default]
            assert default.id != other.id and (other.language, other.cwd, other.default) == ("python", None, False)
        cells = [(e.cell, e.interpreter, e.language) for e in built.events if e.kind == "cell"]
        assert cells == [
            (1, default.id, "python"),
            (2, other.id, "python"),
            (3, other.id, "python"),
            (4, default.id, "python"),
            (5, other.id, "python"),
        ]

    @requires_cells_language("python")
    def test_interpreters_are_listed_restarted_and_closed(self, conformance: Conformance) -> None:
        with conformance.sandbox().create() as session:
            assert session.interpreters() == []  # the default one opens with the first cell
            session.run_code("kept = 1")
            [default] = session.interpreters()
            named = session.interpreter(name="scratch")
            assert session.interpreters() == [default, named] and named.name == "scratch"
            named.run_code("y = 2")
            named.restart()
            after = named.run_code("'y' in globals()")
            assert after.text == "False" and not after.restarted  # asked for: not reported as a death
            named.close()
            assert named.closed and session.interpreters() == [default]
            with pytest.raises(SandboxError) as closed:
                named.run_code("1")
            assert closed.value.code == NO_SESSION and named.id in closed.value.message
            assert session.run_code("kept").text == "1"
            reused = session.interpreter(name="scratch")  # the name is free again once its holder closed
            assert reused.id != named.id

    @requires_cells_language("python")
    def test_an_interpreter_runs_in_its_folder(self, conformance: Conformance) -> None:
        with conformance.sandbox().create() as session:
            session.write("data/numbers.txt", "1 2 3")
            here = session.run_code("import os\nos.getcwd()").text
            inside = session.interpreter(cwd="data")
            found = inside.run_code("import os\nprint(os.getcwd())\nsum(map(int, open('numbers.txt').read().split()))")
            assert here is not None and found.text == "6"
            assert found.stdout.strip() == os.path.join(here.strip("'"), "data")

    @requires_cells_language("python")
    def test_run_code_in_a_language_uses_its_default_interpreter(self, conformance: Conformance) -> None:
        with conformance.sandbox().create() as session:
            session.run_code("z = 3", language="python")
            assert session.run_code("z").text == "3"
            [default] = session.interpreters()
            assert (default.language, default.default) == ("python", True)

    @requires_cells_language("python")
    def test_closing_the_session_closes_every_interpreter(self, conformance: Conformance) -> None:
        session = conformance.sandbox().create()
        session.run_code("a = 1")
        other = session.interpreter()
        other.run_code("b = 2")
        session.close()
        assert other.closed and session.interpreters() == []
        with pytest.raises(SandboxError) as closed:
            other.run_code("b")
        assert closed.value.code == NO_SESSION

    def test_bad_interpreter_arguments_are_refused_before_anything_runs(self, conformance: Conformance) -> None:
        built = conformance.build()
        declared = conformance.capabilities().cells_languages
        with built.sandbox.create() as session:
            session.interpreter(name="taken")
            calls: list[tuple[Callable[[], object], str]] = [
                (lambda: session.interpreter("cobol"), "'cobol' is not a cell language"),
                (lambda: session.interpreter(cwd=3), "cwd: must be a folder"),  # type: ignore[arg-type]
                (lambda: session.interpreter(name=""), "name: is empty"),
                (lambda: session.interpreter(name="taken"), "named 'taken'"),
                # "node" is javascript's alias now (one vocabulary, issue 35): a name no language has is refused.
                (lambda: session.run_code("1", language="ruby"), "'ruby' is not a cell language"),
            ]
            for language in (language for language in CELL_LANGUAGES if language not in declared):
                # Named with the driver: a language the kernel has, which this driver's cells do not run.
                said = f"the {conformance.driver_id!r} driver runs cells in"
                calls.append((lambda language=language: session.interpreter(language), said))  # type: ignore[misc]
                calls.append((lambda language=language: session.run_code("1", language), said))  # type: ignore[misc]
            for call, said in calls:
                with pytest.raises(SandboxError) as refused:
                    call()
                assert refused.value.code == INVALID_OPTION and said in refused.value.message
            assert [i.name for i in session.interpreters()] == ["taken"]
        assert not [e for e in built.events if e.kind == "cell"]  # a refused cell is audited as refused


@requires("sessions", "background")
class TestBackground:
    """Background processes: output so far, wait with a timeout, kill the whole tree, die with the session."""

    def test_output_so_far_wait_and_kill(self, conformance: Conformance) -> None:
        with conformance.sandbox().create() as session:
            process = session.start("python3", ["-c", SERVE])
            assert _until(lambda: "ready" in process.output()[0])
            assert _running(process)
            with pytest.raises(TimeoutError, match="still runs"):  # never None, whose .stdout would be a trap
                process.wait(timeout=0.1)
            assert session.run("python3", ["-c", "print('alongside')"]).stdout == "alongside\n"
            killed = process.kill()
            assert not process.running and killed.signal == "SIGKILL" and "ready" in killed.stdout

    def test_wait_returns_the_result(self, conformance: Conformance) -> None:
        with conformance.sandbox().create() as session:
            process = session.start("python3", ["-c", "import sys; print('out'); sys.exit(4)"])
            result = process.wait(timeout=30)
            assert (result.stdout, result.exit_code) == ("out\n", 4)

    def test_closing_the_session_ends_every_process(self, conformance: Conformance) -> None:
        session = conformance.sandbox().create()
        processes = [session.start("python3", ["-c", SERVE]) for _ in range(2)]
        assert _until(lambda: all("ready" in p.output()[0] for p in processes))
        session.close()
        assert not any(p.running for p in processes)
