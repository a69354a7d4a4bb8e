"""The plugin, run as a driver's test run would use it (pytester): skips, expected failures, overrides, replay."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from mainsdk.figures import wrapper

STUB = '''
import pytest
from mainsdk import Capabilities
from mainsdk.hookspecs import hookimpl
from mainsdk_conformance import ConformanceTarget

pytest_plugins = ["mainsdk_conformance.plugin"]


class Stub:
    """Declares capabilities and refuses to start: enough for the suite's refusal tests."""

    @hookimpl
    def mainsdk_driver_capabilities(self):
        return Capabilities(isolation="weak", languages=frozenset({"python"}), sessions=False)

    @hookimpl
    def mainsdk_network_policy(self, hosts):
        return None

    @hookimpl
    async def mainsdk_driver_start(self, spec):
        raise RuntimeError("the stub starts nothing")

    # Never reached (nothing starts), but every driver has the required hooks: checked at load.
    @hookimpl
    async def mainsdk_driver_exec(self, box, command, output):
        raise RuntimeError("the stub runs nothing")

    @hookimpl
    async def mainsdk_driver_collect(self, box, max_bytes):
        raise RuntimeError("the stub collects nothing")

    @hookimpl
    async def mainsdk_driver_stop(self, box):
        raise RuntimeError("the stub stops nothing")


@pytest.fixture
def conformance_target():
    return ConformanceTarget(driver_id="stub", driver=lambda config: Stub(), expected_failures=EXPECTED)
'''


def run_suite(pytester: pytest.Pytester, expected: dict[str, str], module: str, *args: str) -> Any:
    pytester.makeconftest(STUB.replace("EXPECTED", repr(expected)))
    pytester.makepyfile(test_conformance=module)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rsxX", *args)


STAR = "from mainsdk_conformance.suite import *  # noqa: F403\n"


def test_a_test_needing_a_capability_the_driver_lacks_is_skipped_saying_which(pytester: pytest.Pytester) -> None:
    result = run_suite(pytester, {}, STAR, "-k", "TestSessions or test_node_prints or unknown_language")
    result.assert_outcomes(passed=1, skipped=17)
    result.stdout.fnmatch_lines(["*driver stub declares no language node*", "*driver stub declares no sessions*"])


def test_a_test_needing_cells_in_a_language_the_driver_lacks_is_skipped_saying_which(
    pytester: pytest.Pytester,
) -> None:
    # Cells declared, in no language: the suite's interpreter tests (requires_cells_language("python")) skip.
    declared = "sessions=True, cells=True, cells_languages=frozenset()"
    pytester.makeconftest(STUB.replace("sessions=False", declared).replace("EXPECTED", "{}"))
    pytester.makepyfile(test_conformance=STAR)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", "-k", "second_interpreter")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*driver stub declares no cells in python (Capabilities.cells_languages)*"])


def test_a_cells_language_the_kernel_does_not_have_is_a_mistake_in_the_test() -> None:
    from mainsdk_conformance.marks import requires_cells_language

    with pytest.raises(ValueError, match="'node' is not a cell language"):
        requires_cells_language("node")


def test_an_expected_failure_that_passes_is_reported(pytester: pytest.Pytester) -> None:
    expected = {"TestErrors::test_an_unknown_language_is_refused": "believed broken"}
    result = run_suite(pytester, expected, STAR, "-k", "test_an_unknown_language_is_refused")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*XPASS(strict)*expected to fail on driver stub: believed broken*"])


def test_an_expected_failure_runs_and_shows_as_xfail(pytester: pytest.Pytester) -> None:
    expected = {"TestRun::test_python_prints": "the stub starts nothing"}
    result = run_suite(pytester, expected, STAR, "-k", "test_python_prints")
    result.assert_outcomes(xfailed=1)


def test_an_expected_failure_naming_no_suite_test_is_an_error(pytester: pytest.Pytester) -> None:
    result = run_suite(pytester, {"TestRun::test_pyhton_prints": "typo"}, STAR, "-k", "unknown_language")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*expected_failures names TestRun::test_pyhton_prints, not tests of the suite*"])


def test_overriding_a_suite_test_is_refused(pytester: pytest.Pytester) -> None:
    module = (
        "from mainsdk_conformance.suite import TestErrors\n\n"
        "class TestMine(TestErrors):\n"
        "    def test_an_unknown_language_is_refused(self, conformance):\n"
        "        pass  # the SQLAlchemy way of disabling a test: refused here\n"
    )
    result = run_suite(pytester, {}, module)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*overrides the conformance test TestErrors::test_an_unknown_language_is_refused*"])


def test_a_subclass_that_overrides_nothing_runs_the_suite_tests(pytester: pytest.Pytester) -> None:
    module = "from mainsdk_conformance.suite import TestErrors\n\nclass TestMine(TestErrors):\n    pass\n"
    result = run_suite(pytester, {}, module, "-k", "TestMine and unknown_language")
    result.assert_outcomes(passed=1)


# --- A replayed driver, end to end ------------------------------------------------------------------------------

HTTP_DRIVER = '''
import asyncio, dataclasses, json, time
import httpx, pytest
from mainsdk import Capabilities
from mainsdk.driver import Collected, ExecOutcome
from mainsdk.errors import DRIVER_UNAVAILABLE, SandboxError
from mainsdk.hookspecs import hookimpl
from mainsdk_conformance import ConformanceTarget
from mainsdk_conformance.profiles import Profile

pytest_plugins = ["mainsdk_conformance.plugin"]
PROFILE = Profile(name="toy", upstreams={"api": "https://toy.invalid"}, api="v1",
                  lane_paths=(r"^/boxes/([^/]+)",), command_paths=(r"^/boxes/[^/]+/run$",))


@dataclasses.dataclass(frozen=True)
class ToyBox:
    id: str


class Toy:
    """A provider driver in miniature: retries a safe create, never a command; outages are 0006."""

    def __init__(self, base):
        self.base = base

    @hookimpl
    def mainsdk_driver_capabilities(self):
        return Capabilities(isolation="microvm", languages=frozenset({"python"}))

    @hookimpl
    def mainsdk_network_policy(self, hosts):
        return {"allow": list(hosts)}

    @hookimpl
    async def mainsdk_driver_start(self, spec):
        async with httpx.AsyncClient(base_url=self.base) as client:
            for attempt in range(3):
                answer = await client.post("/boxes", json={"timeout": spec.limits.timeout})
                if answer.status_code == 429 and attempt < 2:
                    await asyncio.sleep(float(answer.headers.get("retry-after", "1")))
                    continue
                if answer.status_code >= 400:
                    raise SandboxError(DRIVER_UNAVAILABLE, f"create answered {answer.status_code}")
                return ToyBox(answer.json()["id"])  # the hook returns a Box: core reads its ``id``

    @hookimpl
    async def mainsdk_driver_exec(self, box, command, output):
        started = time.monotonic()
        async def stream():
            async with httpx.AsyncClient(base_url=self.base, timeout=None) as client:
                async with client.stream("POST", f"/boxes/{box.id}/run", json={"args": list(command.args)}) as answer:
                    if answer.status_code >= 400:
                        raise SandboxError(DRIVER_UNAVAILABLE, f"run answered {answer.status_code}")
                    async for line in answer.aiter_lines():
                        event = json.loads(line)
                        if "stdout" in event:
                            output.stdout(event["stdout"].encode())
                        if "exit" in event:
                            return event["exit"]
        try:
            code = await asyncio.wait_for(stream(), command.timeout)
        except TimeoutError:
            return ExecOutcome(exit_code=None, stop="timeout", duration=time.monotonic() - started)
        except httpx.HTTPError as exc:
            raise SandboxError(DRIVER_UNAVAILABLE, f"the run failed: {exc!r}") from exc
        return ExecOutcome(exit_code=code, duration=time.monotonic() - started)

    @hookimpl
    async def mainsdk_driver_collect(self, box, max_bytes):
        return Collected()

    @hookimpl
    async def mainsdk_driver_stop(self, box):
        async with httpx.AsyncClient(base_url=self.base) as client:
            await client.delete(f"/boxes/{box.id}")


@pytest.fixture
def conformance_profile():
    return PROFILE


@pytest.fixture
def conformance_target(conformance_replay):
    return ConformanceTarget(driver_id="toy", driver=lambda config: Toy(conformance_replay.url()))
'''

CREATE = {
    "request": {"method": "POST", "path": "/boxes", "body": {"json": {"timeout": 10.0}}},
    "response": {"status": 201, "body": {"json": {"id": "b1"}}},
}
DELETE = {"request": {"method": "DELETE", "path": "/boxes/b1"}, "response": {"status": 204}}


def run_request(args: list[str]) -> dict[str, Any]:
    return {"method": "POST", "path": "/boxes/b1/run", "body": {"json": {"args": args}}}


def lines(*events: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": 200,
        "headers": {"Content-Type": "application/x-ndjson"},
        "body": {"ndjson": [{"json": e} for e in events]},
    }


PRINT = ["-E", "-s", "-c", wrapper(), "print('fault')"]  # a python run's command (mainsdk.figures)
CASSETTES: dict[str, list[dict[str, Any]]] = {
    "TestRun/test_the_exit_code_and_stderr_come_back": [
        CREATE,
        {"request": run_request(["-c", "other code"]), "response": lines({"exit": 0})},
        DELETE,
    ],
    "TestFaults/test_429_with_retry_after_is_retried_after_the_wait": [
        {"request": CREATE["request"], "response": {"status": 429, "headers": {"Retry-After": "1"}}},
        CREATE,
        {"request": run_request(PRINT), "response": lines({"stdout": "fault\n"}, {"exit": 0})},
        DELETE,
    ],
    "TestFaults/test_503_is_0006_and_retryable": [{"request": CREATE["request"], "response": {"status": 503}}],
    "TestFaults/test_a_reset_mid_stream_is_0006_and_the_command_is_not_sent_again": [
        CREATE,
        {
            "request": run_request(PRINT),
            "response": lines({"stdout": "fa"}, {"exit": 0}),
            "fault": {"kind": "reset", "after_frames": 1},
        },
        DELETE,
    ],
    "TestFaults/test_a_sandbox_that_vanished_mid_run_is_0006": [
        CREATE,
        {"request": run_request(PRINT), "response": {"status": 404, "body": {"json": {"error": "sandbox not found"}}}},
        {"request": DELETE["request"], "response": {"status": 404}},
    ],
    "TestFaults/test_a_response_past_the_deadline_stops_the_run_at_its_time_limit": [
        {
            "request": {"method": "POST", "path": "/boxes", "body": {"json": {"timeout": 1.0}}},
            "response": CREATE["response"],
        },
        {"request": run_request(PRINT), "response": lines({"exit": 0}), "fault": {"kind": "delay", "seconds": 3}},
        DELETE,
    ],
}


def test_a_replayed_driver_runs_the_fault_tests_and_a_mismatch_fails_naming_the_nearest(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(HTTP_DRIVER)
    pytester.makepyfile(test_conformance=STAR)
    for name, interactions in CASSETTES.items():
        path = Path(pytester.path) / "cassettes" / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"provider": "toy", "api": "v1", "date": "2026-11-29", "made": "authored"}
        path.write_text(json.dumps({"format": "mainsdk-cassette/1", "meta": meta, "interactions": interactions}))
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-k", "TestFaults or test_the_exit_code_and_stderr_come_back"
    )
    result.assert_outcomes(passed=5, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*POST api:/boxes/b1/run is not in the cassette*nearest recorded: #1 POST api:/boxes/b1/run*"
            "body: /args/0: recorded '-c', got '-E'*",
        ]
    )


# --- Quality gates: the values a failing assert compared, a watchdog on a hanging driver -------------------------

LIAR = '''
import threading, time
import pytest
from mainsdk import Capabilities
from mainsdk.driver import Collected, ExecOutcome
from mainsdk.hookspecs import hookimpl
from mainsdk_conformance import ConformanceTarget

pytest_plugins = ["mainsdk_conformance.plugin"]
RELEASE = threading.Event()


class Box:
    id = "box-1"


class Liar:
    """Runs nothing; prints BEHAVIOUR instead."""

    @hookimpl
    def mainsdk_driver_capabilities(self):
        return Capabilities(isolation="weak", languages=frozenset({"python"}))

    @hookimpl
    def mainsdk_network_policy(self, hosts):
        return None

    @hookimpl
    async def mainsdk_driver_start(self, spec):
        return Box()

    @hookimpl
    async def mainsdk_driver_exec(self, box, command, output):
        if HANG:
            RELEASE.wait(60)  # blocks the event loop: core's own deadline cannot fire, only the watchdog
        output.stdout(b"3\\n")
        return ExecOutcome(exit_code=0, duration=0.01)

    @hookimpl
    async def mainsdk_driver_collect(self, box, max_bytes):
        return Collected()

    @hookimpl
    async def mainsdk_driver_stop(self, box):
        return None


def pytest_runtest_logreport(report):
    if report.when == "call":
        RELEASE.set()  # let the hung loop go, so the sandbox closes in teardown


@pytest.fixture
def conformance_target():
    return ConformanceTarget(driver_id="liar", driver=lambda config: Liar())
'''


def test_a_failing_suite_assert_shows_the_values_it_compared(pytester: pytest.Pytester) -> None:
    # Before: the suite's modules were not rewritten, so a third party saw a bare AssertionError.
    pytester.makeconftest(LIAR.replace("HANG", "False"))
    pytester.makepyfile(test_conformance=STAR)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "test_python_prints")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*AssertionError: assert ('3\\n', '', 0, None) == ('2\\n', '', 0, None)*"])


def test_a_hanging_driver_fails_the_test_within_its_watchdog(pytester: pytest.Pytester) -> None:
    # Before: nothing watched a suite test, so a driver blocking its event loop hung the run (here for 60 s).
    pytester.makeconftest(LIAR.replace("HANG", "True"))
    pytester.makepyfile(test_conformance=STAR)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-k", "test_python_prints", "--conformance-timeout", "2", "--durations=0", timeout=50
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*WatchdogTimeout*its call ran past the conformance watchdog (2 s); the driver hangs*",
            "*in mainsdk_driver_exec*",  # the stack of the loop's thread, where the driver hangs
        ]
    )
    [line] = [
        line
        for line in result.stdout.lines
        if line.endswith(" call     test_conformance.py::TestRun::test_python_prints")
    ]
    assert float(line.split("s", 1)[0]) < 30, line


BARE = '''
import pytest
from mainsdk import Capabilities
from mainsdk.hookspecs import hookimpl
from mainsdk_conformance import ConformanceTarget

pytest_plugins = ["mainsdk_conformance.plugin"]


class Bare:
    """Declares its isolation and nothing else, and starts nothing."""

    @hookimpl
    def mainsdk_driver_capabilities(self):
        return Capabilities(isolation="namespace")

    @hookimpl
    def mainsdk_network_policy(self, hosts):
        return None

    @hookimpl
    async def mainsdk_driver_start(self, spec):
        raise RuntimeError("the bare driver starts nothing")

    @hookimpl
    async def mainsdk_driver_exec(self, box, command, output):
        raise RuntimeError("unreachable")

    @hookimpl
    async def mainsdk_driver_collect(self, box, max_bytes):
        raise RuntimeError("unreachable")

    @hookimpl
    async def mainsdk_driver_stop(self, box):
        return None


@pytest.fixture
def conformance_target():
    return ConformanceTarget(driver_id="bare", driver=lambda config: Bare())
'''


def test_a_driver_declaring_only_its_isolation_has_every_capability_gated_test_skipped(
    pytester: pytest.Pytester,
) -> None:
    # Before: a bare Capabilities claimed python, node, bash and a memory limit, so those tests ran and failed.
    # Every suite test needs a language (python unless it names another), so the whole suite is skipped.
    pytester.makeconftest(BARE)
    pytester.makepyfile(test_conformance=STAR)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    outcomes = result.parseoutcomes()
    assert set(outcomes) == {"skipped"}, outcomes
    assert outcomes["skipped"] >= 80  # the whole suite
    result.stdout.fnmatch_lines(["*driver bare declares no language python*"])
    skips = [line for line in result.stdout.lines if line.startswith("SKIPPED")]
    assert skips and all("driver bare declares" in line or "driver bare does not declare" in line for line in skips)


# --- Record mode re-checks what was set by hand -------------------------------------------------------------------

GREETING_TEST = """
import httpx, pytest
from mainsdk_conformance.profiles import Profile


@pytest.fixture
def conformance_profile():
    return Profile(name="toy", upstreams={"api": "https://toy.invalid"}, api="v1")


def test_greeting(conformance_replay):
    assert httpx.get(conformance_replay.url("api") + "/greeting").text == "hello\\n"
"""


def _greeting_cassette(folder: Path, edited: list[str]) -> Path:
    path = folder / "cassettes" / "test_greeting" / "test_greeting.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"provider": "toy", "api": "v1", "date": "2026-11-29", "made": "authored", "edited": edited}
    answer = {"status": 200, "headers": {"content-type": "text/plain"}, "body": {"text": "hello\n"}}
    interactions = [{"upstream": "api", "request": {"method": "GET", "path": "/greeting"}, "response": answer}]
    path.write_text(json.dumps({"format": "mainsdk-cassette/1", "meta": meta, "interactions": interactions}))
    return path


@pytest.mark.parametrize(("live", "outcome"), [("hello\n", "passed"), ("goodbye\n", "failed")])
def test_record_mode_records_a_hand_set_cassette_again_and_flags_one_the_provider_does_not_reproduce(
    pytester: pytest.Pytester, live: str, outcome: str
) -> None:
    # The hand-set answer (stdout a stand-in without the provider's network could not give) is an expectation
    # the live recording must meet: it was skipped by record mode, so it stayed hand-set forever.
    body = live.encode()

    class Provider(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    provider = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Provider)
    threading.Thread(target=provider.serve_forever, daemon=True).start()
    try:
        pytester.makepyfile(test_greeting=GREETING_TEST)
        path = _greeting_cassette(Path(pytester.path), ["stdout: what the provider answers, set by hand"])
        before = path.read_text()
        upstream = f"api=http://127.0.0.1:{provider.server_address[1]}"
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "-p", "mainsdk_conformance.plugin", "--conformance-record",
            "--conformance-upstream", upstream,
        )  # fmt: skip
    finally:
        provider.shutdown()
        provider.server_close()
    result.assert_outcomes(**{outcome: 1})
    if outcome == "passed":
        meta = json.loads(path.read_text())["meta"]
        assert meta["rechecked"] == ["stdout: what the provider answers, set by hand"]
        assert "edited" not in meta  # what is there now is what the (stand-in) provider answered
    else:
        assert path.read_text() == before  # kept as it was, and flagged
        result.stdout.fnmatch_lines(["*did not reproduce what was set by hand*authored cassette is kept*"])


def test_record_mode_still_keeps_a_hand_written_fault(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_greeting=GREETING_TEST)
    _greeting_cassette(Path(pytester.path), ["fault: 503 at create"])
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "mainsdk_conformance.plugin", "-rs", "--conformance-record",
        "--conformance-upstream", "api=http://127.0.0.1:9",
    )  # fmt: skip
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*recording keeps the cassette*fault: 503 at create*"])
