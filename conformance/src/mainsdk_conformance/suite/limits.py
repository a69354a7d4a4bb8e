"""Stops at the time, memory, output and cost limits, and the output cut and redacted."""

from __future__ import annotations

import time
from decimal import Decimal

from mainsdk import secret
from mainsdk.errors import COST, INVALID_OPTION

from mainsdk_conformance.marks import requires
from mainsdk_conformance.suite._helpers import DEADLINE_GRACE, FAKE_KEY_CODE, REDACTED, refused
from mainsdk_conformance.target import OTHER_SECRET, SECRET, SECRET_VALUES, Conformance

MB = 1024 * 1024


class TestLimits:
    """Killed at its time, memory, output and cost limits; a stop is returned, not raised."""

    def test_an_endless_loop_stops_at_the_time_limit(self, conformance: Conformance) -> None:
        result = conformance.sandbox().run("while True: pass", limits={"timeout": "1s"})
        assert (result.stop, result.stop_code, result.exit_code) == ("timeout", "MAIN-SANDBOX-0002", None)
        assert 0.9 <= result.duration < 1 + DEADLINE_GRACE

    @requires("language:bash")
    def test_a_sleeping_program_stops_at_the_time_limit(self, conformance: Conformance) -> None:
        result = conformance.sandbox().run("sleep 30", "bash", limits={"timeout": "1s"})
        assert (result.stop, result.exit_code) == ("timeout", None)
        assert 0.9 <= result.duration < 1 + DEADLINE_GRACE

    @requires("memory_limit")
    def test_code_cannot_hold_more_than_the_memory_limit(self, conformance: Conformance) -> None:
        result = conformance.sandbox().run(
            "b = bytearray(300 * 1024 * 1024)\nprint('survived')", limits={"memory": "64MB"}
        )
        assert "survived" not in result.stdout and result.exit_code != 0

    @requires("memory_limit")
    def test_passing_the_memory_limit_stops_with_memory(self, conformance: Conformance) -> None:
        result = conformance.sandbox().run(
            "b = bytearray(300 * 1024 * 1024)\nprint('survived')", limits={"memory": "64MB"}
        )
        assert (result.stop, result.stop_code) == ("memory", "MAIN-SANDBOX-0003")
        assert "survived" not in result.stdout

    @requires("memory_limit", "memory_limit_tree")
    def test_the_memory_limit_holds_for_the_whole_process_tree(self, conformance: Conformance) -> None:
        # Eight processes of 24 MiB each under a 64 MiB limit: a per-process limit lets all of them through.
        code = (
            "import os, time\nkids = []\n"
            "for _ in range(8):\n    pid = os.fork()\n"
            "    if pid == 0:\n        b = bytearray(24 * 1024 * 1024)\n"
            "        for i in range(0, len(b), 4096): b[i] = 1\n"
            "        time.sleep(2); os._exit(0)\n"
            "    kids.append(pid)\n"
            "held = sum(os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) == 0 for k in kids)\n"
            "print('held', held)\n"
        )
        result = conformance.sandbox().run(code, limits={"memory": "64MB"})
        assert "held 8" not in result.stdout
        assert (result.stop, result.stop_code) == ("memory", "MAIN-SANDBOX-0003")

    def test_output_is_cut_exactly_at_the_limit_and_the_code_stopped(self, conformance: Conformance) -> None:
        started = time.monotonic()
        result = conformance.sandbox().run(
            "import sys, time\nsys.stdout.write('x' * (10 * 1024 * 1024)); sys.stdout.flush()\n"
            "time.sleep(30)\nprint('end')"
        )
        assert (result.stop, result.stop_code) == ("output", "MAIN-SANDBOX-0004")
        assert result.stdout == "x" * MB and result.stderr == ""
        assert time.monotonic() - started < 10, "the code kept running after its output passed the limit"

    def test_stdout_and_stderr_share_the_output_limit(self, conformance: Conformance) -> None:
        code = (
            "import sys, time\nfor _ in range(64):\n    sys.stdout.write('o' * 16384); sys.stderr.write('e' * 16384)\n"
            "sys.stdout.flush()\ntime.sleep(30)\n"  # still running at the stop, as above
        )
        result = conformance.sandbox().run(code, limits={"output": "256KB"})
        assert result.stop == "output" and len(result.stdout) + len(result.stderr) == 256 * 1024
        assert set(result.stdout) <= {"o"} and set(result.stderr) <= {"e"}

    def test_a_limit_above_the_config_is_refused(self, conformance: Conformance) -> None:
        built = conformance.build()
        error = refused(built, lambda: built.sandbox.run("print(1)", limits={"timeout": "1h"}), INVALID_OPTION)
        assert "sandbox.limits.timeout" in error.message
        error = refused(built, lambda: built.sandbox.run("print(1)", limits={"memory": "1GB"}), INVALID_OPTION)
        assert "sandbox.limits.memory" in error.message

    def test_an_unknown_limit_is_refused(self, conformance: Conformance) -> None:
        built = conformance.build()
        refused(built, lambda: built.sandbox.run("print(1)", limits={"cpu": "2"}), INVALID_OPTION)

    def test_the_worst_case_cost_is_checked_before_the_run(self, conformance: Conformance) -> None:
        # $0.1 a second for 10 seconds is $1, over the config's $0.5 and the call's $0.05.
        built = conformance.build({"sandbox": {"price": "$0.1", "limits": {"max-cost": "$0.5"}}})
        error = refused(built, lambda: built.sandbox.run("print(1)"), COST)
        assert error.status == 402
        refused(built, lambda: built.sandbox.run("print(1)", limits={"timeout": "2s"}, max_cost="$0.05"), COST)

    def test_a_run_within_its_max_cost_runs_and_is_charged_by_the_second(self, conformance: Conformance) -> None:
        sandbox = conformance.sandbox({"sandbox": {"price": "$0.001"}})
        result = sandbox.run("print(1)", limits={"timeout": "2s"}, max_cost="$0.01")
        assert result.stdout == "1\n"
        assert result.cost == (Decimal("0.001") * Decimal(str(round(result.duration, 3)))).normalize()


class TestOutput:
    """Output is cut at limits.output and redacted for secret values and known key formats."""

    def test_a_secret_value_is_redacted_even_written_a_byte_at_a_time(self, conformance: Conformance) -> None:
        code = "import os, sys\nfor c in os.environ['K']:\n    sys.stdout.write(c); sys.stdout.flush()\nprint()"
        result = conformance.sandbox().run(code, env={"K": secret(SECRET)})
        assert result.stdout == f"{REDACTED}\n"

    def test_a_secret_on_stderr_is_redacted(self, conformance: Conformance) -> None:
        code = "import os, sys\nprint('k=' + os.environ['K'], file=sys.stderr)"
        result = conformance.sandbox().run(code, env={"K": secret(OTHER_SECRET)})
        assert result.stderr == f"k={REDACTED}\n"

    def test_a_known_key_format_is_redacted_without_being_a_secret(self, conformance: Conformance) -> None:
        assert conformance.sandbox().run(FAKE_KEY_CODE).stdout == f"{REDACTED}\n"

    def test_output_cut_inside_a_secret_shows_none_of_it(self, conformance: Conformance) -> None:
        # It sleeps after writing, so the output stop always ends a running command (replays see the same kill).
        code = (
            "import os, sys, time\nsys.stdout.write('x' * 1020 + os.environ['K']); sys.stdout.flush()\ntime.sleep(30)"
        )
        result = conformance.sandbox().run(code, env={"K": secret(SECRET)}, limits={"output": "1KB"})
        assert result.stop == "output" and result.stdout == "x" * 1020 + REDACTED
        assert SECRET_VALUES[SECRET][:4] not in result.stdout
