"""Running code: the three languages, what a result holds, and the seed's isolation guarantees."""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

import pytest
from mainsdk import Capabilities

from mainsdk_conformance.marks import requires
from mainsdk_conformance.target import Conformance

APP_MARKER = "_mainsdk_conformance_app_marker"
APP_FILE = "/tmp/mainsdk-conformance-app-file.txt"  # a fixed path: the code sent must be the same on every run
APP_FILE_CONTENT = "app-only-content"
SEGFAULT_CODE = "import ctypes; ctypes.string_at(0)"  # reads address 0: SIGSEGV in any CPython


class TestRun:
    """A run returns what the code printed, its exit code and how it was isolated."""

    def test_python_prints(self, conformance: Conformance, conformance_capabilities: Capabilities) -> None:
        result = conformance.sandbox().run("print(1 + 1)", "python", feature="notebook")
        assert (result.stdout, result.stderr, result.exit_code, result.stop) == ("2\n", "", 0, None)
        assert (result.driver, result.language, result.isolation) == (
            conformance.driver_id,
            "python",
            conformance_capabilities.isolation,
        )
        assert result.id.startswith("run_") and result.duration > 0 and result.files == ()
        price = conformance_capabilities.price_per_second
        assert result.cost == (price * Decimal(str(round(result.duration, 3)))).normalize()

    @requires("language:node")
    def test_node_prints(self, conformance: Conformance) -> None:
        result = conformance.sandbox().run("console.log(6 * 7)", "node")
        assert (result.stdout, result.exit_code, result.language) == ("42\n", 0, "node")

    @requires("language:bash")
    def test_bash_prints_and_exits(self, conformance: Conformance) -> None:
        result = conformance.sandbox().run("echo $((6 * 7)); exit 3", "bash")
        assert (result.stdout, result.exit_code, result.stop) == ("42\n", 3, None)

    def test_the_exit_code_and_stderr_come_back(self, conformance: Conformance) -> None:
        result = conformance.sandbox().run("import sys; print('oops', file=sys.stderr); sys.exit(4)")
        assert (result.stdout, result.stderr, result.exit_code, result.stop) == ("", "oops\n", 4, None)

    def test_text_is_utf8(self, conformance: Conformance) -> None:
        assert conformance.sandbox().run("print('h\\u00e9 \\u2713')").stdout == "hé ✓\n"

    def test_code_over_the_argv_limit_runs(self, conformance: Conformance) -> None:
        # Core sends code above 100 KB on stdin; the driver must pass stdin through.
        code = "x = 1\n" * 30000 + "print(x + 1)"
        assert conformance.sandbox().run(code).stdout == "2\n"

    def test_the_async_twin_runs(self, conformance: Conformance) -> None:
        async def main() -> str:
            sandbox, _ = conformance.async_sandbox()
            try:
                return (await sandbox.run("print(40 + 2)")).stdout
            finally:
                await sandbox.aclose()

        assert asyncio.run(main()) == "42\n"

    @requires("reports_signals")
    def test_a_python_segfault_is_a_crash_not_a_success(self, conformance: Conformance) -> None:
        # The shell's convention on every driver: killed by signal N exits 128 + N, and the result names it.
        result = conformance.sandbox().run(SEGFAULT_CODE)
        assert (result.exit_code, result.signal, result.stop, result.ok) == (139, "SIGSEGV", None, False)

    @requires("reports_signals", "language:bash")
    def test_bash_killing_itself_reports_the_signal(self, conformance: Conformance) -> None:
        sandbox = conformance.sandbox()
        killed = sandbox.run("echo before; kill -9 $$; echo after", "bash")
        assert (killed.stdout, killed.exit_code, killed.signal, killed.stop) == ("before\n", 137, "SIGKILL", None)
        crashed = sandbox.run("kill -SEGV $$", "bash")
        assert (crashed.exit_code, crashed.signal, crashed.stop) == (139, "SIGSEGV", None)
        # A plain non-zero exit is not a signal, even when its number looks like one.
        plain = sandbox.run("exit 139", "bash")
        assert (plain.exit_code, plain.signal, plain.ok) == (139, None, False)

    @requires("reports_signals")
    def test_a_run_stopped_at_its_time_limit_reports_the_stop_not_a_signal(self, conformance: Conformance) -> None:
        # The sandbox ended it: ``stop`` says why; how a driver kills at a limit is not the code's signal.
        result = conformance.sandbox().run("while True: pass", limits={"timeout": "1s"})
        assert (result.stop, result.exit_code, result.signal, result.ok) == ("timeout", None, None, False)

    @requires("reports_signals", "sessions")
    def test_a_session_command_that_crashes_reports_the_signal(self, conformance: Conformance) -> None:
        with conformance.sandbox().create() as session:
            crashed = session.run("python3", ["-c", SEGFAULT_CODE])
            assert (crashed.exit_code, crashed.signal, crashed.stop, crashed.ok) == (139, "SIGSEGV", None, False)
            after = session.run("python3", ["-c", "print('alive')"])
            assert (after.stdout, after.exit_code, after.signal, after.ok) == ("alive\n", 0, None, True)

    @requires("live")
    def test_runs_in_parallel_threads_do_not_mix(self, conformance: Conformance) -> None:
        # Live only: replayed, the parallel boxes would race for the recorded sandboxes.
        sandbox = conformance.sandbox()
        with ThreadPoolExecutor(4) as pool:
            outs = list(pool.map(lambda i: sandbox.run(f"print({i} * 2)").stdout, range(6)))
        assert outs == [f"{i * 2}\n" for i in range(6)]


class TestIsolation:
    """Guarantees, whatever the driver: not in the app's process, no app values, only the files passed."""

    def test_code_never_runs_in_the_apps_process(
        self, conformance: Conformance, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(builtins, APP_MARKER, True, raising=False)
        code = (
            "import builtins, sys\n"
            f"print(hasattr(builtins, {APP_MARKER!r}), 'mainsdk' in sys.modules, '_pytest' in sys.modules)"
        )
        assert conformance.sandbox().run(code).stdout == "False False False\n"

    def test_the_environment_holds_only_what_is_given(
        self, conformance: Conformance, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("MAINSDK_CONFORMANCE_APP_ONLY", "app-only-value")
        result = conformance.sandbox().run(
            "import json, os; print(json.dumps(sorted(os.environ)))", env={"GIVEN": "given-value"}
        )
        names = set(json.loads(result.stdout))
        assert "GIVEN" in names and "MAINSDK_CONFORMANCE_APP_ONLY" not in names
        assert names - {"GIVEN"} <= conformance.target.baseline_env, "names the box set that are not in baseline_env"

    def test_the_work_folder_holds_only_the_files_passed_and_out_is_empty(self, conformance: Conformance) -> None:
        code = "import os; print(sorted(os.listdir('.')), os.listdir('../out'), sorted(os.listdir('sub')))"
        result = conformance.sandbox().run(code, files={"data.csv": "a\nb\n", "sub/x.txt": "x"})
        assert result.stdout == "['data.csv', 'sub'] [] ['x.txt']\n"

    def test_files_passed_in_are_byte_exact(self, conformance: Conformance) -> None:
        blob = bytes(range(256)) * 4
        code = "import hashlib; print(hashlib.sha256(open('b.bin', 'rb').read()).hexdigest(), open('t.txt').read())"
        result = conformance.sandbox().run(code, files={"b.bin": blob, "t.txt": "h\u00e9"})
        assert result.stdout == f"{hashlib.sha256(blob).hexdigest()} hé\n"

    def test_the_apps_files_are_not_readable(self, conformance: Conformance) -> None:
        app_file = Path(APP_FILE)
        app_file.write_text(APP_FILE_CONTENT)
        try:
            code = f"try:\n    print(open({APP_FILE!r}).read())\nexcept OSError as e:\n    print(type(e).__name__)\n"
            result = conformance.sandbox().run(code)
        finally:
            app_file.unlink(missing_ok=True)
        assert APP_FILE_CONTENT not in result.stdout and result.exit_code == 0
