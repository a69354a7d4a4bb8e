"""Author the conformance cassettes: record the suite against ``simulator.py``, then mark and finish them.

    python mainsdk_vercel/tests/conformance/author.py            # record every cassette anew, then finish
    python mainsdk_vercel/tests/conformance/author.py --finish   # only the finishing step (also after a live run)

Finishing: ``meta.made`` becomes ``authored`` (for simulator recordings), the
project and team ids become the placeholders the conftest replays with, the
network tests get the output Vercel's egress policy gives (the simulator has
no internet), and the fault cassettes are derived from their plain recording,
each fault written as Vercel documents it.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
CASSETTES = HERE / "cassettes"
OWN = HERE.parent / "cassettes"  # the driver's own fault tests (tests/test_faults.py)
sys.path.insert(0, str(HERE))

from mainsdk_conformance.profiles import VERCEL  # noqa: E402
from mainsdk_conformance.target import NetworkHosts  # noqa: E402
from mainsdk_vercel.driver import MARGIN  # noqa: E402

# The placeholder ids the conftest replays with (imported by path: the tests are no package).
_conftest = importlib.import_module("conftest")
PROJECT: str = _conftest.PROJECT
TEAM: str = _conftest.TEAM


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _save(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "status": status,
        "headers": {"content-type": "application/json", **(headers or {})},
        "body": {"json": {"error": {"code": code, "message": message}}},
    }


def _find(data: dict[str, Any], method: str, suffix: str, nth: int = 0) -> int:
    hits = [
        i
        for i, x in enumerate(data["interactions"])
        if x["request"]["method"] == method and x["request"]["path"].endswith(suffix)
    ]
    return hits[nth]


def _ids(value: Any, project: str | None, team: str | None) -> Any:
    text = json.dumps(value)
    if project:
        text = text.replace(json.dumps(project)[1:-1], PROJECT)
    if team:
        text = text.replace(json.dumps(team)[1:-1], TEAM)
    return json.loads(text)


def finish(simulated: bool, durations: dict[str, float] | None = None) -> None:
    """Mark, fix the ids, hold abandoned log streams, pace long commands; then the network output and faults."""
    project, team = os.environ.get("VERCEL_PROJECT_ID"), os.environ.get("VERCEL_TEAM_ID")
    for path in sorted(CASSETTES.rglob("*.json")):
        data = _ids(_load(path), project, team)
        if simulated:
            data["meta"]["made"] = "authored"
            data["meta"]["api"] = "v1"
            data["meta"]["how"] = (
                "recorded against tests/conformance/simulator.py, written from the v1 docs and vercel 0.5.9"
            )
        _hold_abandoned_streams(data)
        if durations:
            _pace(data, durations)
        _save(path, data)
    if (CASSETTES / "TestNetwork").exists():
        _network()
    if (CASSETTES / "TestFaults").exists():
        _faults()


_LOGS = re.compile(r"^/v1/sandboxes/[^/]+/cmd/([^/]+)/logs$")
_WAIT = re.compile(r"^/v1/sandboxes/[^/]+/cmd/([^/]+)$")
HELD = "authored: Vercel keeps a command's log stream open until the command ends, here at the kill"
PACED = "authored: Vercel answers the wait when the command exits; it ran this long in the simulator"


def _lane_steps(data: dict[str, Any]) -> list[tuple[str, int]]:
    """Each interaction's sandbox and its place among that sandbox's requests (1-based), as replay counts them."""
    counts: dict[str, int] = {}
    steps = []
    for interaction in data["interactions"]:
        request = interaction["request"]
        lane = VERCEL.lane(request["path"], request.get("headers") or {})
        counts[lane] = counts.get(lane, 0) + 1
        steps.append((lane, counts[lane]))
    return steps


def _next_in_lane(data: dict[str, Any], index: int, steps: list[tuple[str, int]]) -> int | None:
    lane = steps[index][0]
    return next((j for j in range(index + 1, len(steps)) if steps[j][0] == lane), None)


def _hold_abandoned_streams(data: dict[str, Any]) -> None:
    """Keep open, until the kill, a log stream the driver stopped reading (a timeout, a cancel, the output limit).

    The recorder writes no time for the end of a stream, only for its frames,
    so a stream the driver hung up on would replay as ending at once and the
    driver would go on to wait for the exit code. A last, empty line held
    until the next request of the sandbox (the kill) keeps it open as it was.
    """
    steps = _lane_steps(data)
    for index, interaction in enumerate(data["interactions"]):
        match = _LOGS.match(interaction["request"]["path"])
        body = (interaction.get("response") or {}).get("body") or {}
        if not match or interaction.get("fault") or body.get("end_newline") is False:
            continue
        following = _next_in_lane(data, index, steps)
        if following is None:
            continue
        nxt = data["interactions"][following]["request"]
        if nxt["method"] != "POST" or nxt["path"] != interaction["request"]["path"].removesuffix("/logs") + "/kill":
            continue  # the stream ended with the command: the driver went on to the exit code, or the next step
        lines = body.setdefault("ndjson", [])
        if lines and lines[-1].get("note") == HELD:
            continue
        lines.append({"json": {"stream": "stdout", "data": ""}, "after": steps[following][1], "note": HELD})
        interaction["response"]["body"] = body


def _pace(data: dict[str, Any], durations: dict[str, float]) -> None:
    """Answer a wait as late as the command ran (over 0.2 s), minus the log stream's own time."""
    steps = _lane_steps(data)
    for index, interaction in enumerate(data["interactions"]):
        match = _LOGS.match(interaction["request"]["path"])
        if not match or match.group(1) not in durations:
            continue
        following = _next_in_lane(data, index, steps)
        if following is None:
            continue
        wait = data["interactions"][following]
        found = _WAIT.match(wait["request"]["path"])
        if not found or found.group(1) != match.group(1) or wait.get("fault"):
            continue
        lines = ((interaction.get("response") or {}).get("body") or {}).get("ndjson") or []
        streamed = max((float(line.get("at", 0)) for line in lines), default=0.0)
        late = round(durations[match.group(1)] - streamed, 2)
        if late > 0.2:
            wait["fault"] = {"kind": "delay", "seconds": late}
            wait["note"] = PACED


def _set_stdout(path: Path, text: str) -> None:
    """Replace the code's stdout in a recorded run (the first command's logs) with ``text``."""
    data = _load(path)
    logs = data["interactions"][_find(data, "GET", "/logs")]
    logs["response"]["body"] = {"ndjson": [{"json": {"stream": "stdout", "data": text}}]}
    data["meta"]["edited"] = "stdout: what Vercel's egress policy gives (the simulator has no internet)"
    _save(path, data)


def _network() -> None:
    """The output Vercel's egress policy gives the suite's code: given hosts answer, others do not.

    Replayed, the suite's hosts are names under ``.test`` on port 8080 that the
    code only names; what is checked for real is the policy the driver sends
    (the create's ``networkPolicy``, matched strictly). The output is written
    from Vercel's documented policy, like the fault cassettes.
    """
    hosts = NetworkHosts()
    folder = CASSETTES / "TestNetwork"
    if (folder / "test_one_host.json").exists():
        _set_stdout(folder / "test_one_host.json", f"{hosts.allowed} reached\n{hosts.denied} refused\n")
    if (folder / "test_a_wildcard_host.json").exists():
        _set_stdout(folder / "test_a_wildcard_host.json", f"{hosts.under_wildcard} reached\n{hosts.denied} refused\n")


def _faults() -> None:
    folder = CASSETTES / "TestFaults"
    # The faults' code is print('fault'): the plain run of TestRun, with that code and its output.
    base = _load(CASSETTES / "TestRun" / "test_python_prints.json")
    text = json.dumps(base).replace(json.dumps("print(1 + 1)"), json.dumps("print('fault')"))
    base = json.loads(text)
    logs_body = base["interactions"][_find(base, "GET", "/logs")]["response"]["body"]
    logs_body["ndjson"] = [{"json": {"stream": "stdout", "data": "fault\n"}}]
    base["meta"]["made"] = "authored"
    create = _find(base, "POST", "/v1/sandboxes")
    stop = _find(base, "POST", "/stop")
    cmd = _find(base, "POST", "/cmd")
    logs = _find(base, "GET", "/logs")

    def keep(data: dict[str, Any], *indexes: int) -> dict[str, Any]:
        out = copy.deepcopy(data)
        out["interactions"] = [copy.deepcopy(data["interactions"][i]) for i in indexes]
        return out

    everything = list(range(len(base["interactions"])))
    # 429 at create (the concurrency limit), with Retry-After: 1; then the same create succeeds.
    data = keep(base, *everything)
    refused = copy.deepcopy(data["interactions"][create])
    refused["response"] = _error(429, "too_many_requests", "Too many concurrent sandboxes", {"retry-after": "1"})
    data["interactions"].insert(create, refused)
    data["meta"]["fault"] = "429 with Retry-After at create"
    _save(folder / "test_429_with_retry_after_is_retried_after_the_wait.json", data)
    # 503 at create: not idempotent, so not retried.
    data = keep(base, create)
    data["interactions"][0]["response"] = _error(503, "internal_server_error", "Service unavailable")
    data["meta"]["fault"] = "503 at create"
    _save(folder / "test_503_is_0006_and_retryable.json", data)
    # The command request reset before any answer: it may have started, so it is never sent again.
    data = keep(base, create, create + 1, cmd, stop)
    data["interactions"][2].pop("response")
    data["interactions"][2]["fault"] = {"kind": "reset"}
    data["meta"]["fault"] = "connection reset on the command request"
    _save(folder / "test_a_reset_mid_stream_is_0006_and_the_command_is_not_sent_again.json", data)
    # 404 on the logs: the sandbox vanished mid-run; nothing to stop.
    data = keep(base, create, create + 1, cmd, logs)
    data["interactions"][3]["response"] = _error(404, "sandbox_not_found", "Sandbox not found")
    data["meta"]["fault"] = "404 mid-run"
    _save(folder / "test_a_sandbox_that_vanished_mid_run_is_0006.json", data)
    # The command's answer comes 5 s late: the driver cannot address it, so it stops the sandbox.
    data = keep(base, create, create + 1, cmd, stop)
    data["interactions"][0]["request"]["body"]["json"]["timeout"] = int((1 + MARGIN) * 1000)  # the test's 1 s limit
    data["interactions"][2]["fault"] = {"kind": "delay", "seconds": 5}
    data["meta"]["fault"] = "the command's answer 5 s past a 1 s limit"
    _save(folder / "test_a_response_past_the_deadline_stops_the_run_at_its_time_limit.json", data)
    _own_faults(base, keep, everything, create, cmd, logs, stop)


def _own_faults(
    base: dict[str, Any], keep: Any, everything: list[int], create: int, cmd: int, logs: int, stop: int
) -> None:
    for status, code, message in (
        (401, "forbidden", "Not authorized"),
        (402, "payment_required", "Billing limit reached"),
        (403, "forbidden", "Project not accessible"),
    ):
        data = keep(base, create)
        data["interactions"][0]["response"] = _error(status, code, message)
        data["meta"]["fault"] = f"{status} at create"
        _save(OWN / f"create_{status}.json", data)
    # 410 mid-run: the sandbox stopped (its timeout) while the command's logs were read.
    data = keep(base, create, create + 1, cmd, logs)
    data["interactions"][3]["response"] = _error(410, "sandbox_stopped", "Sandbox is stopped")
    data["meta"]["fault"] = "410 mid-run"
    _save(OWN / "stopped_mid_run.json", data)
    # The log stream cut after its first line; the reconnect replays from the start.
    data = keep(base, *everything)
    first = data["interactions"][logs]
    lines = first["response"]["body"]["ndjson"]
    whole = [{"json": {"stream": "stdout", "data": "fa"}}, {"json": {"stream": "stdout", "data": "ult\n"}}]
    assert "".join(x["json"]["data"] for x in lines) == "fault\n", lines
    first["response"]["body"]["ndjson"] = copy.deepcopy(whole)
    first["fault"] = {"kind": "reset", "after_frames": 1}
    again = copy.deepcopy(first)
    again.pop("fault")
    data["interactions"].insert(logs + 1, again)
    data["meta"]["fault"] = "log stream cut after one line; the reconnect replays it from the start"
    _save(OWN / "cut_log_stream.json", data)
    # 429 at create with a Retry-After past what the driver waits (10 s): reported at once, create sent once.
    data = keep(base, create)
    data["interactions"][0]["response"] = _error(
        429, "too_many_requests", "Too many concurrent sandboxes", {"retry-after": "120"}
    )
    data["meta"]["fault"] = "429 at create, Retry-After: 120"
    _save(OWN / "create_429_retry_after_120.json", data)
    # 429 with Retry-After: 1 on the command: refused without acting, so sent again after the wait.
    data = keep(base, *everything)
    refused = copy.deepcopy(data["interactions"][cmd])
    refused["response"] = _error(429, "too_many_requests", "Rate limit exceeded", {"retry-after": "1"})
    data["interactions"].insert(cmd, refused)
    data["meta"]["fault"] = "429 with Retry-After: 1 on the command request"
    _save(OWN / "cmd_429_retry_after_1.json", data)
    # 503 on the command: a command is never sent twice, so it is 0006; the sandbox is stopped.
    data = keep(base, create, create + 1, cmd, stop)
    data["interactions"][2]["response"] = _error(503, "internal_server_error", "Service unavailable")
    data["meta"]["fault"] = "503 on the command request"
    _save(OWN / "cmd_503.json", data)
    # 503 on the wait (a read, idempotent): retried, and the run succeeds.
    wait = _find(base, "GET", base["interactions"][logs]["request"]["path"].removesuffix("/logs"))
    data = keep(base, *everything)
    failed = copy.deepcopy(data["interactions"][wait])
    failed["response"] = _error(503, "internal_server_error", "Service unavailable")
    data["interactions"].insert(wait, failed)
    data["meta"]["fault"] = "503 on the wait for the exit code, then its answer"
    _save(OWN / "wait_503_then_ok.json", data)


def record() -> tuple[int, dict[str, float]]:
    """Run the suite in record mode against the simulator; the exit status and each command's run time."""
    import pytest

    sim = importlib.import_module("simulator").Simulator()
    sim.start()
    os.environ.setdefault("VERCEL_TOKEN", "simulator-token")
    try:
        status = int(
            pytest.main(
                [
                    str(HERE),
                    "--conformance-record",
                    "--conformance-upstream",
                    f"api={sim.url}",
                    "-p",
                    "no:cacheprovider",
                    "-q",
                    *sys.argv[1:],
                ]
            )
        )
        return status, sim.durations()
    finally:
        sim.stop()


if __name__ == "__main__":
    if "--finish" in sys.argv:
        finish(simulated=False)
    else:
        _, durations = record()
        finish(simulated=True, durations=durations)
