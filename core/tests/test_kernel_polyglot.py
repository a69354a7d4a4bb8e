"""JavaScript, TypeScript and bash cells: the kernel's node and bash executors, run as real processes here.

The kernel is driven as in ``test_kernel.py`` (token, package, start line, one JSON request per cell), with a start line
naming the language. Every guarantee of the Python executor is checked again for each: the code's hash in the
frame, state across cells, the timeout's interrupt, and that a line forged on the result pipe by something an
earlier cell left running does not end a later cell (under both watches).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mainsdk.kernel_start import kernel_command
from test_kernel import MARK, TOKEN, Kernel, _syscall_readable, edited, watched

NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="JavaScript cells need node (.ci/run installs it)")
needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash cells need bash")


class Cells(Kernel):
    """A kernel of one language; a cell's request may carry its own env."""

    def __init__(self, language: str, files: dict[str, str] | None = None, cwd: str | None = None) -> None:
        super().__init__(files, {"language": language, "cwd": cwd, "site": []})

    def run(
        self, code: str, timeout: float = 10.0, env: dict[str, str] | None = None, grace: float = 1.0
    ) -> tuple[bytes, dict[str, Any], float]:
        started = time.monotonic()
        request: dict[str, Any] = {"code": code, "timeout": timeout, "grace": grace, "max_results": 1 << 20}
        if env is not None:
            request["env"] = env
        self.stdin.write(json.dumps(request).encode() + b"\n")
        self.stdin.flush()
        out = b""
        while not (MARK in out and out.endswith(b"\n")):
            chunk = os.read(self.stdout.fileno(), 1 << 16)
            assert chunk, f"the kernel ended with {self.proc.wait()}"
            out += chunk
        before, _, frame = out.partition(MARK)
        return before, json.loads(frame), time.monotonic() - started


def _source(watch: str) -> dict[str, str]:
    if watch != "probe" and not _syscall_readable():
        pytest.skip("this machine's Yama ptrace_scope refuses /proc/<child>/syscall: only the probe watch runs here")
    return watched(watch)


@pytest.fixture
def started() -> Iterator[list[Cells]]:
    kernels: list[Cells] = []
    yield kernels
    for running in kernels:
        if running.proc.poll() is None:
            running.proc.kill()
            running.proc.wait()


def _value(frame: dict[str, Any], mime: str = "text/plain") -> str | None:
    return next((item["data"] for item in frame["results"] if item["mime"] == mime), None)


# -- JavaScript ---------------------------------------------------------------------------------------------


@needs_node
@pytest.mark.parametrize("watch", ["syscall", "probe"])
def test_js_state_output_and_the_final_value(started: list[Cells], watch: str) -> None:
    js = Cells("javascript", _source(watch))
    started.append(js)
    code = "let x = 41; const o = {a: [1, 2]}; function f() { return x + 1 }; class C { constructor() { this.n = 3 } }"
    code += "\nconsole.log('logged'); console.error('to stderr')"
    out, frame, _ = js.run(code)
    assert out == b"logged\n" and frame["error"] is None and frame["results"] == [] and frame["watch"] == watch
    assert frame["code_sha256"] == hashlib.sha256(code.encode()).hexdigest() and frame["undumpable"] is True
    _, frame, _ = js.run("[f(), o, new C()]")
    assert _value(frame) == "[ 42, { a: [ 1, 2 ] }, C { n: 3 } ]"  # util.inspect
    assert json.loads(_value(frame, "application/json") or "") == [42, {"a": [1, 2]}, {"n": 3}]
    _, frame, _ = js.run("x = 'changed'; undefined")
    assert frame["results"] == [] and _value(js.run("x")[1]) == "'changed'"
    _, frame, _ = js.run("const big = 10n; big")
    assert _value(frame) == "10n" and _value(frame, "application/json") is None  # a BigInt is not JSON-able


@needs_node
def test_js_top_level_await_and_esm_imports(started: list[Cells], tmp_path: Path) -> None:
    package = tmp_path / "node_modules" / "y"
    package.mkdir(parents=True)
    (package / "package.json").write_text('{"name": "y", "type": "module", "exports": "./index.js"}')
    (package / "index.js").write_text("export const x = 5;\nexport default 'y-default';\n")
    (tmp_path / "local.mjs").write_text("export const here = 'local';\n")
    js = Cells("javascript", cwd=str(tmp_path))
    started.append(js)
    _, frame, _ = js.run("const v = await new Promise((r) => setTimeout(() => r(6), 20));\nv * 7")
    assert frame["error"] is None and _value(frame) == "42"
    assert _value(js.run("v")[1]) == "6"  # a declaration of an awaiting cell stays
    code = (
        'import fs from "node:fs";\nimport * as path from "node:path";\nimport yd, {x} from "y";\n'
        'import {here as h} from "./local.mjs";\n[typeof fs.readFileSync, path.sep, yd, x, h]'
    )
    _, frame, _ = js.run(code)
    assert frame["error"] is None, frame["error"]
    assert json.loads(_value(frame, "application/json") or "") == ["function", "/", "y-default", 5, "local"]
    assert js.run(code)[1]["error"] is None  # an import cell runs again
    _, frame, _ = js.run('(await import("y")).x + require("node:os").EOL.length')
    assert _value(frame) == "6"


@needs_node
def test_js_errors_are_name_value_and_the_cells_stack(started: list[Cells]) -> None:
    js = Cells("javascript")
    started.append(js)
    _, frame, _ = js.run("function g() { throw new TypeError('bad input') }\ng()")
    error = frame["error"]
    assert error["name"] == "TypeError" and error["value"] == "bad input"
    assert error["traceback"].startswith("TypeError: bad input\n") and "<cell-1>:1" in error["traceback"]
    assert "[eval]" not in error["traceback"] and "node:vm" not in error["traceback"]  # the kernel's frames cut
    assert js.run("let = ;")[1]["error"]["name"] == "SyntaxError"
    _, frame, _ = js.run("await Promise.reject(new RangeError('later'))")
    assert frame["error"]["name"] == "RangeError" and frame["error"]["value"] == "later"
    assert js.run("throw 5")[1]["error"] == {"name": "Uncaught", "value": "5", "traceback": "Uncaught 5"}
    # A stray rejection or a throw in a callback is printed; it ends neither the cell nor the interpreter.
    _, frame, _ = js.run("Promise.reject(new Error('stray')); 1")
    assert frame["error"] is None and _value(js.run("2")[1]) == "2"


@needs_node
def test_js_timeout_interrupts_and_keeps_the_state_except_a_busy_loop_after_an_await(started: list[Cells]) -> None:
    js = Cells("javascript")
    started.append(js)
    js.run("let kept = 'kept'")
    _, frame, took = js.run("while (true) {}", timeout=0.5)  # synchronous: V8 breaks it (breakOnSigint)
    assert frame["stop"] == "timeout" and frame["error"]["name"] == "Interrupted" and took < 5
    assert _value(js.run("kept")[1]) == "'kept'"
    _, frame, took = js.run("await new Promise((r) => setTimeout(r, 30000))", timeout=0.5)  # waiting
    assert frame["stop"] == "timeout" and frame["error"]["name"] == "Interrupted" and took < 5
    assert _value(js.run("kept")[1]) == "'kept'"
    # After an await the loop runs outside any vm call: only the kill at timeout + grace ends it, state and all.
    js.stdin.write(json.dumps({"code": "await 0; while (true) {}", "timeout": 0.5, "grace": 0.5}).encode() + b"\n")
    js.stdin.flush()
    assert js.proc.wait(10) == 124


@needs_node
def test_js_interrupts_hold_when_a_cell_listens_for_sigint_itself_and_a_stray_one_interrupts_nothing(
    started: list[Cells],
) -> None:
    # The executor holds node's SIGINT watchdog (no thread per cell); a cell's own SIGINT listener takes the signal
    # from it, and the executor goes back to node's per-call watchdog: every later timeout still keeps the state.
    js = Cells("javascript")
    started.append(js)
    js.run("let heard = 0")
    listens = "process.on('SIGINT', () => { heard += 1 }); await new Promise((r) => setTimeout(r, 30000))"
    _, frame, _ = js.run(listens, timeout=0.5)
    assert frame["stop"] == "timeout" and frame["error"]["name"] == "Interrupted"
    for code in ("while (true) {}", "await new Promise((r) => setTimeout(r, 30000))"):
        _, frame, took = js.run(code, timeout=0.5)
        assert frame["stop"] == "timeout" and frame["error"]["name"] == "Interrupted" and took < 5, code
    assert _value(js.run("heard")[1]) == "2"  # the waiting cells' signals reached it (a vm call's are V8's)
    # A SIGINT between cells finds nothing running: the next waiting cell runs to its end.
    quiet = Cells("javascript")
    started.append(quiet)
    quiet.run("1")
    executor = int(Path(f"/proc/{quiet.proc.pid}/task/{quiet.proc.pid}/children").read_text().split()[0])
    os.killpg(executor, signal.SIGINT)
    time.sleep(0.1)
    _, frame, _ = quiet.run("await new Promise((r) => setTimeout(() => r(7), 50))")
    assert frame["stop"] is None and frame["error"] is None and _value(frame) == "7"


# A timer one cell leaves writes a forged result line for cell 2 on the result pipe (W, the executor's second
# argument), one second into cell 2. (Not into every descriptor as the Python one does: node's own pipes, its
# signal pipe among them, would take the line and crash it, which ends nothing but the interpreter.)
JS_FORGE = """
const fs = require("node:fs");
const forged = JSON.stringify({cell: 2, results: [{mime: "text/plain", data: "'forged'", encoding: "utf-8"}],
                               results_dropped: 0, error: null}) + "\\n";
setTimeout(() => fs.writeSync(Number(process.argv[2]), forged), 1000);
"""


@needs_node
@pytest.mark.parametrize("watch", ["syscall", "probe"])
def test_js_a_line_forged_by_an_earlier_cell_does_not_end_a_later_cell(started: list[Cells], watch: str) -> None:
    js = Cells("javascript", _source(watch))
    started.append(js)
    js.run(JS_FORGE)
    out, frame, took = js.run("await new Promise((r) => setTimeout(r, 2500));\nconsole.log('MARK-2'); 6 * 7")
    assert took >= 2.4 and out.endswith(b"MARK-2\n") and _value(frame) == "42"


@needs_node
def test_js_a_cells_env_is_set_for_it_and_restored_after(started: list[Cells]) -> None:
    js = Cells("javascript")
    started.append(js)
    js.run("process.env.KEPT = 'before'")
    _, frame, _ = js.run("[process.env.CELL_ONLY, process.env.KEPT]", env={"CELL_ONLY": "one", "KEPT": "over"})
    assert json.loads(_value(frame, "application/json") or "") == ["one", "over"]
    _, frame, _ = js.run("[process.env.CELL_ONLY ?? null, process.env.KEPT]")
    assert json.loads(_value(frame, "application/json") or "") == [None, "before"]


@needs_node
def test_typescript_cells_run_where_node_strips_types_and_are_refused_clearly_elsewhere(
    started: list[Cells],
) -> None:
    assert NODE is not None
    strips = (
        subprocess.run(
            [NODE, "-p", "typeof require('node:module').stripTypeScriptTypes"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        == "function"
    )
    ts = Cells("typescript")
    started.append(ts)
    if strips:
        _, frame, _ = ts.run("interface P { n: number }\nconst p: P = { n: 2 };\nconst y: number = await p.n;\ny + 1")
        assert frame["error"] is None and _value(frame) == "3"
    else:  # no stripping, no kernel typescript package in a site folder: nothing runs, and it says why
        assert ts.proc.wait(10) == 125
        assert ts.proc.stderr is not None
        assert (
            b"TypeScript cells need node >= 22.13 (type stripping) or the kernel's typescript" in ts.proc.stderr.read()
        )


def test_a_language_whose_program_is_missing_is_refused_with_its_name(started: list[Cells], tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    _, args, stdin = kernel_command(TOKEN, {"language": "javascript"})
    proc = subprocess.run(  # noqa: PLW1510 (its status is the assertion)
        [sys.executable, *args],
        input=stdin,
        capture_output=True,
        env={**os.environ, "PATH": str(empty)},
        timeout=10,
    )
    assert proc.returncode == 125 and b"javascript cells need node on the box's PATH" in proc.stderr


# -- bash ---------------------------------------------------------------------------------------------------


@needs_bash
@pytest.mark.parametrize("watch", ["syscall", "probe"])
def test_bash_keeps_cd_variables_functions_and_exports_and_reports_the_status(
    started: list[Cells], watch: str, tmp_path: Path
) -> None:
    sh = Cells("bash", _source(watch))
    started.append(sh)
    code = f'cd {tmp_path}\nx=5; declare -A m=([k]=v); export Y=7\nf() {{ echo "f $1"; }}\necho set'
    out, frame, _ = sh.run(code)
    assert out == b"set\n" and frame["error"] is None and frame["results"] == [] and frame["watch"] == watch
    out, frame, _ = sh.run("pwd; echo $x ${m[k]} $Y; f a; bash -c 'echo child $Y'")
    assert out == f"{tmp_path}\n5 v 7\nf a\nchild 7\n".encode() and frame["error"] is None
    _, frame, _ = sh.run("echo 'a\\tb' \"$(printf 'tab\\there')\"; false")
    assert frame["error"] == {"name": "ExitStatus", "value": "1", "traceback": ""}
    out, frame, _ = sh.run("(exit 3)")
    assert frame["error"]["value"] == "3"
    out, frame, _ = sh.run('read line; echo "read=$? [$line]"; cat; echo "cat=$?"')  # stdin is /dev/null
    assert out == b"read=1 []\ncat=0\n" and frame["error"] is None
    out, _, _ = sh.run("printf '%s|' \"$x\" 'back\\\\slash' $'new\\nline'")
    assert out == b"5|back\\\\slash|new\nline|"


@needs_bash
def test_bash_exit_ends_the_interpreter_with_its_status(started: list[Cells]) -> None:
    sh = Cells("bash")
    started.append(sh)
    sh.run("x=1")
    sh.stdin.write(json.dumps({"code": "echo bye; exit 3", "timeout": 10}).encode() + b"\n")
    sh.stdin.flush()
    assert sh.proc.wait(10) == 3  # as a Python interpreter that exited: the app restarts the next cell's


@needs_bash
def test_bash_timeout_interrupts_the_foreground_job_and_the_shell_keeps_its_state(started: list[Cells]) -> None:
    sh = Cells("bash")
    started.append(sh)
    sh.run("kept=yes; g() { sleep 30; echo not-after-g; }")
    for code in ("sleep 30; echo not-after-sleep", "g; echo not-after", "while :; do :; done"):
        out, frame, took = sh.run(code, timeout=0.5)
        assert frame["stop"] == "timeout" and took < 5, code
        assert frame["error"] == {"name": "ExitStatus", "value": "130", "traceback": ""} and b"not-after" not in out
        out, frame, _ = sh.run("echo $kept")
        assert out == b"yes\n" and frame["error"] is None
    stubborn = "trap '' INT; trap - DEBUG; while :; do :; done"  # a cell that takes the interrupt away
    sh.stdin.write(json.dumps({"code": stubborn, "timeout": 0.5, "grace": 0.5}).encode() + b"\n")
    sh.stdin.flush()
    assert sh.proc.wait(10) == 124


@needs_bash
def test_bash_a_cells_env_is_set_for_it_and_restored_after(started: list[Cells], tmp_path: Path) -> None:
    sh = Cells("bash")
    started.append(sh)
    sh.run("export KEPT=before")
    out, _, _ = sh.run(
        'echo "$CELL_ONLY $KEPT"; bash -c \'echo "$CELL_ONLY"\'', env={"CELL_ONLY": "a b\tc", "KEPT": ""}
    )
    assert out == b"a b\tc \na b\tc\n"
    out, _, _ = sh.run('echo "${CELL_ONLY-unset} $KEPT"; bash -c \'echo "${KEPT}"\'')
    assert out == b"unset before\nbefore\n"
    # A name that is no shell variable's is not set (its array subscript would run a command in `-v`).
    proof = tmp_path / "never-made"
    _, frame, _ = sh.run("echo ran", env={f"x[$(touch {proof})]": "1"})
    assert frame["error"] is None and not proof.exists()


# A background job one cell leaves writes a forged result line for cell 2 into every descriptor it has.
BASH_FORGE = """
line='{"cell": 2, "results": [{"mime": "text/plain", "data": "forged", "encoding": "utf-8"}], '
line+='"results_dropped": 0, "error": null}'
( sleep 1; for fd in /proc/$BASHPID/fd/*; do n=${fd##*/}; ((n > 2)) && echo "$line" >&"$n"; done ) 2>/dev/null &
"""


@needs_bash
@pytest.mark.parametrize("watch", ["syscall", "probe"])
def test_bash_a_line_forged_by_an_earlier_cell_does_not_end_a_later_cell(started: list[Cells], watch: str) -> None:
    sh = Cells("bash", _source(watch))
    started.append(sh)
    sh.run(BASH_FORGE)
    out, frame, took = sh.run("sleep 2.5; echo MARK-2")
    assert took >= 2.4 and out.endswith(b"MARK-2\n") and frame["results"] == [] and frame["error"] is None


@pytest.mark.parametrize("language", ["javascript", "bash"])
def test_the_token_is_in_no_command_line_or_environment_an_executor_can_read(
    started: list[Cells], language: str
) -> None:
    if shutil.which("node" if language == "javascript" else "bash") is None:
        pytest.skip(f"{language} cells need its program")
    running = Cells(language)
    started.append(running)
    # The executor's own and its parent's (the supervisor's) command line and environment.
    look = "for p in $$ $PPID; do for f in cmdline environ; do tr '\\0' ' ' < /proc/$p/$f; echo; done; done"
    if language == "javascript":
        look = (
            "const fs = require('node:fs');\n[process.pid, process.ppid].flatMap((p) => ['cmdline', 'environ']"
            ".map((f) => fs.readFileSync(`/proc/${p}/${f}`, 'latin1').replaceAll('\\0', ' '))).join('\\n')"
        )
    out, frame, _ = running.run(look)
    seen = out + json.dumps(frame["results"]).encode()
    assert b"python" in seen  # the supervisor's own command line is readable ...
    assert TOKEN.encode() not in seen  # ... but never holds the token, nor does anything of the executor's
    assert frame["undumpable"] is True  # (a root test run reads its /proc anyway: a box's user cannot)


@needs_node
def test_a_node_without_the_repl_internals_runs_plain_cells_and_says_what_await_and_import_need(
    started: list[Cells],
) -> None:
    # Node 20 and 22 have both; a later node that moved them must not lose the interpreter (names pointed away).
    source = edited(
        "node_executor.js",
        ("internal/repl/await", "internal/repl/moved"),
        ("internal/deps/acorn/acorn/dist/acorn", "internal/deps/moved"),
    )
    js = Cells("javascript", source)
    started.append(js)
    assert _value(js.run("1 + 1")[1]) == "2"
    for code, what in (("await 1", "a top-level await"), ('import fs from "node:fs"', "an import statement")):
        error = js.run(code)[1]["error"]
        assert error["name"] == "KernelError" and error["value"].startswith(f"{what} in a cell needs node's "), code
    assert _value(js.run("3")[1]) == "3"


@needs_node
def test_the_node_executor_reads_the_protocols_constants_from_its_start_line(started: list[Cells]) -> None:
    # protocol.py defines TEXT_LIMIT once; node gets it as JSON in its start line, Python imports it: a kernel
    # whose protocol says 50 cuts an error's value at 50 characters on both sides.
    files = edited("protocol.py", ("TEXT_LIMIT = 64 * 1024", "TEXT_LIMIT = 50"))
    long_error = {"javascript": "throw new Error('e'.repeat(500))", "python": "raise ValueError('e' * 500)"}
    for language, code in long_error.items():
        running = Cells(language, files)
        started.append(running)
        error = running.run(code)[1]["error"]
        assert error["value"] == "e" * 50 and len(error["traceback"]) <= 50, (language, error)
