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

from mainsdk_conformance.cassette import authored_meta, mark_edited  # noqa: E402
from mainsdk_conformance.profiles import VERCEL  # noqa: E402
from mainsdk_conformance.target import NetworkHosts  # noqa: E402
from mainsdk_vercel.driver import MARGIN, WRAPPER  # noqa: E402
from mainsdk_vercel.packages import KERNEL_INSTALL  # noqa: E402

# The placeholder ids the conftest replays with (imported by path: the tests are no package).
_conftest = importlib.import_module("conftest")
PROJECT: str = _conftest.PROJECT
TEAM: str = _conftest.TEAM
sys.path.insert(0, str(HERE.parent))
_recording = importlib.import_module("recording")  # the driver's own cassettes' record mode
AUTHOR_ENV: str = _recording.AUTHOR_ENV


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
            data["meta"]["api"] = "v3 create, v2 sessions"
            data["meta"]["how"] = (
                "recorded against tests/conformance/simulator.py, "
                "written from vercel-sandbox 0.10.0 and @vercel/sandbox"
            )
        _hold_abandoned_streams(data)
        if simulated:
            _unpace_kernel_installs(data)
        if durations:
            _pace(data, durations)
        _rewrap(data)
        _save(path, data)
    if (CASSETTES / "TestNetwork").exists():
        _network()
    if (CASSETTES / "TestRun" / "test_python_prints.json").exists():
        _faults()  # recording skips the fault tests (a provider cannot fail on cue): they are written here


_LOGS = re.compile(r"^/v2/sandboxes/sessions/[^/]+/cmd/([^/]+)/logs$")
_WAIT = re.compile(r"^/v2/sandboxes/sessions/[^/]+/cmd/([^/]+)$")
HELD = "authored: Vercel keeps a command's log stream open until the command ends, here at the kill"
PACED = "authored: Vercel answers the wait when the command exits; it ran this long in the simulator"


KERNEL_UNPACED = (
    "pace: the cell kernel's install commands answer at once (their lines' arrival times dropped): installing "
    "IPython offline took its time on the authoring host, which each replay would wait again"
)


def _unpace_kernel_installs(data: dict[str, Any]) -> None:
    """Drop the ``at`` of every line of a command installing the cell kernel's set (``KERNEL_INSTALL``)."""
    for interaction in data["interactions"]:
        request = interaction["request"]
        if KERNEL_INSTALL not in (((request.get("body") or {}).get("json") or {}).get("args") or []):
            continue
        lines = ((interaction.get("response") or {}).get("body") or {}).get("ndjson") or []
        if [line.pop("at") for line in lines if "at" in line]:
            mark_edited(data["meta"], KERNEL_UNPACED)


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


_CMD = re.compile(r"^/v2/sandboxes/sessions/[^/]+/cmd$")


def _stream_command(interaction: dict[str, Any]) -> str | None:
    """The command a stream belongs to: a logs path names it; a ``cmd`` run's first line carries it."""
    request = interaction["request"]
    match = _LOGS.match(request["path"])
    if match:
        return match.group(1)
    if request["method"] == "POST" and _CMD.match(request["path"]):
        lines = ((interaction.get("response") or {}).get("body") or {}).get("ndjson") or []
        first = (lines[0].get("json") or {}) if lines else {}
        command = first.get("command") if isinstance(first, dict) else None
        return str(command["id"]) if isinstance(command, dict) and command.get("id") else None
    return None


def _hold_abandoned_streams(data: dict[str, Any]) -> None:
    """Keep open, until the kill, a stream the driver stopped reading (a timeout, a cancel, the output limit).

    The recorder writes no time for the end of a stream, only for its frames,
    so a stream the driver hung up on would replay as ending at once. A last,
    empty line held until the next request of the sandbox (the kill) keeps it
    open as it was. Streams are a command run with ``wait`` and its logs.
    """
    steps = _lane_steps(data)
    for index, interaction in enumerate(data["interactions"]):
        body = (interaction.get("response") or {}).get("body") or {}
        cmd_id = _stream_command(interaction)
        if cmd_id is None or interaction.get("fault") or body.get("end_newline") is False:
            continue
        following = _held_until(data, index, steps, cmd_id)
        if following is None:
            continue  # the stream ended with the command: the driver went on to the next step
        lines = body.setdefault("ndjson", [])
        if lines and lines[-1].get("note") == HELD:
            continue
        lines.append({"json": {"stream": "stdout", "data": ""}, "after": steps[following][1], "note": HELD})
        interaction["response"]["body"] = body
        if data["meta"].get("made") == "recorded":
            mark_edited(data["meta"], "held: a stream the driver hung up on, kept open until its kill")


def _finished(interaction: dict[str, Any]) -> bool:
    """Whether a ``cmd`` run's stream ends with the command and its exit code (it ran to its end)."""
    lines = ((interaction.get("response") or {}).get("body") or {}).get("ndjson") or []
    last = (lines[-1].get("json") or {}) if lines else {}
    command = last.get("command") if isinstance(last, dict) else None
    return isinstance(command, dict) and command.get("exitCode") is not None and len(lines) > 1


def _held_until(data: dict[str, Any], index: int, steps: list[tuple[str, int]], cmd_id: str) -> int | None:
    """The request of the sandbox a stream the driver hung up on was held open until, or None if it ended.

    A logs stream the driver left is followed at once by its command's kill. A ``cmd`` run that never
    ended (a cell's interpreter, a background process) stays open while other requests of the sandbox come
    (cell files, other commands), until the kill of that command, or else the sandbox's stop.
    """
    interaction = data["interactions"][index]
    lane = steps[index][0]
    later = [j for j in range(index + 1, len(steps)) if steps[j][0] == lane]
    if not later:
        return None
    kill = f"/cmd/{cmd_id}/kill"
    if _LOGS.match(interaction["request"]["path"]):
        nxt = data["interactions"][later[0]]["request"]
        return later[0] if nxt["method"] == "POST" and nxt["path"].endswith(kill) else None
    if _finished(interaction):
        return None
    for j in later:
        path = data["interactions"][j]["request"]["path"]
        if path.endswith(kill) or path.endswith("/stop"):
            return j
    return None


REWRAPPED = (
    "request: the wrapper script as driver.py sends it now (WRAPPER; a kept cassette is not re-recorded); "
    "the answer is as authored"
)


UNCWD = (
    "request: each command without cwd, as driver.py sends it now (it starts in the image's WORKDIR and the "
    "wrapper goes to its folder); the answer is as authored"
)


def _rewrap(data: dict[str, Any]) -> None:
    """Put the driver's current ``WRAPPER`` in a kept cassette's commands (and the answers that echo them).

    A cassette record mode keeps (edited by hand, a fault) is not recorded again when the wrapper changes; its
    code and answers stay as they were authored, and only the fixed script in front of the code is brought
    up to date, saying so in ``meta.edited``.
    """
    changed = False

    def fix(args: Any) -> None:
        nonlocal changed
        old = isinstance(args, list) and len(args) > 1 and args[0] == "-c" and str(args[1]).startswith("root=$0 ")
        if old and args[1] != WRAPPER:
            args[1] = WRAPPER
            changed = True

    for interaction in data["interactions"]:
        request = interaction["request"]
        if request["method"] == "POST" and _CMD.match(request["path"]):
            fix(((request.get("body") or {}).get("json") or {}).get("args"))
        for line in ((interaction.get("response") or {}).get("body") or {}).get("ndjson") or []:
            command = (line.get("json") or {}).get("command") if isinstance(line.get("json"), dict) else None
            if isinstance(command, dict):
                fix(command.get("args"))
        answer = ((interaction.get("response") or {}).get("body") or {}).get("json")
        if isinstance(answer, dict) and isinstance(answer.get("command"), dict):
            fix(answer["command"].get("args"))
    if changed:
        mark_edited(data["meta"], REWRAPPED)
    # A command is sent with no cwd now (the image's WORKDIR: no managed image has /vercel/sandbox, which the
    # wrapper makes): a kept cassette's commands are brought up to date the same way.
    moved = False
    for interaction in data["interactions"]:
        request = interaction["request"]
        body = (request.get("body") or {}).get("json")
        if request["method"] == "POST" and _CMD.match(request["path"]) and isinstance(body, dict) and "cwd" in body:
            del body["cwd"]
            moved = True
    if moved:
        mark_edited(data["meta"], UNCWD)


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
    """Replace the code's stdout in an authored run (the log lines of the first command's stream) with ``text``.

    A live recording is the provider's own answer: it is left as it is.
    """
    data = _load(path)
    if data["meta"].get("made") == "recorded":
        return
    frames = data["interactions"][_find(data, "POST", "/cmd")]["response"]["body"]["ndjson"]
    frames[1:-1] = [{"json": {"stream": "stdout", "data": text}}]
    mark_edited(data["meta"], "stdout: what Vercel's egress policy gives (the stand-in has no internet)")
    _save(path, data)


def _network() -> None:
    """The output Vercel's egress firewall gives the suite's reach code: the given host reached, others refused.

    The suite reaches hosts where the driver declares host filtering: for
    Vercel HTTPS on 443, where its firewall matches the TLS SNI
    (providers.md). The stand-in has no firewall to tell names apart (and no
    internet), so that output is written here (``meta.edited``); what is
    checked for real is the ``networkPolicy`` the driver sends, matched strictly.
    """
    hosts = NetworkHosts()
    folder = CASSETTES / "TestNetwork"
    if (folder / "test_one_host.json").exists():
        _set_stdout(folder / "test_one_host.json", f"{hosts.allowed} reached\n{hosts.denied} refused\n")
    if (folder / "test_a_wildcard_host.json").exists():
        _set_stdout(folder / "test_a_wildcard_host.json", f"{hosts.under_wildcard} reached\n{hosts.denied} refused\n")


def _running_at_create(data: dict[str, Any]) -> None:
    """The create answered ``running`` at once, as the service may: no read of the sandbox while it boots.

    The faults are about what follows the create; the boot's poll is covered by the recorded cassettes.
    """
    create = _find(data, "POST", "/v3/sandboxes")
    answer = data["interactions"][create]["response"]["body"]["json"]
    answer["session"]["status"] = answer["sandbox"]["status"] = "running"
    data["interactions"] = [
        x
        for x in data["interactions"]
        if not (x["request"]["method"] == "GET" and re.fullmatch(r"/v2/sandboxes/[^/]+", x["request"]["path"]))
    ]


def _faults() -> None:
    folder = CASSETTES / "TestFaults"
    # The faults' code is print('fault'): the plain run of TestRun, with that code and its output.
    base = _load(CASSETTES / "TestRun" / "test_python_prints.json")
    text = json.dumps(base).replace(json.dumps("print(1 + 1)"), json.dumps("print('fault')"))
    base = json.loads(text)
    _running_at_create(base)
    create = _find(base, "POST", "/v3/sandboxes")
    cmd = _find(base, "POST", "/cmd")
    read = _find(base, "POST", "/fs/read")
    stop = _find(base, "POST", "/stop")
    frames = base["interactions"][cmd]["response"]["body"]["ndjson"]
    frames[1:-1] = [{"json": {"stream": "stdout", "data": "fault\n"}}]
    # The faults' labels are their own, whatever the plain run was made by (never a recording's "recorded").
    base["meta"] = authored_meta(
        base["meta"],
        test="",
        how="derived by hand from TestRun/test_python_prints, its create answered running at once",
    )
    base["meta"].pop("edited", None)
    session = base["interactions"][cmd]["request"]["path"].removesuffix("/cmd")
    cmd_id = frames[0]["json"]["command"]["id"]

    def keep(data: dict[str, Any], *indexes: int) -> dict[str, Any]:
        out = copy.deepcopy(data)
        out["interactions"] = [copy.deepcopy(data["interactions"][i]) for i in indexes]
        return out

    def save(path: Path, data: dict[str, Any], fault: str) -> None:
        data["meta"]["test"] = path.stem
        data["meta"]["fault"] = fault
        data["meta"]["edited"] = [f"fault: {fault}"]
        _save(path, data)

    def follow(data: dict[str, Any], at: int) -> None:
        """Insert, at ``at``, the requests that follow a started command whose stream broke: logs, then wait."""
        logs = {
            "upstream": "api",
            "request": {"method": "GET", "path": f"{session}/cmd/{cmd_id}/logs", "query": [["teamId", TEAM]]},
            "response": {
                "status": 200,
                "headers": {"content-type": "application/x-ndjson"},
                "body": {
                    "ndjson": [
                        {"json": {"stream": "stdout", "data": "fa"}},
                        {"json": {"stream": "stdout", "data": "ult\n"}},
                    ]
                },
            },
        }
        finished = copy.deepcopy(frames[-1]["json"])
        wait = {
            "upstream": "api",
            "request": {
                "method": "GET",
                "path": f"{session}/cmd/{cmd_id}",
                "query": [["teamId", TEAM], ["wait", "true"]],
            },
            "response": {"status": 200, "headers": {"content-type": "application/json"}, "body": {"json": finished}},
        }
        data["interactions"][at:at] = [logs, wait]

    everything = list(range(len(base["interactions"])))
    # 429 at create (the concurrency limit), with Retry-After: 1; then the same create succeeds.
    data = keep(base, *everything)
    refused = copy.deepcopy(data["interactions"][create])
    refused["response"] = _error(429, "too_many_requests", "Too many concurrent sandboxes", {"retry-after": "1"})
    data["interactions"].insert(create, refused)
    save(folder / "test_429_with_retry_after_is_retried_after_the_wait.json", data, "429 with Retry-After at create")
    # 503 at create: not idempotent, so not retried.
    data = keep(base, create)
    data["interactions"][0]["response"] = _error(503, "internal_server_error", "Service unavailable")
    save(folder / "test_503_is_0006_and_retryable.json", data, "503 at create")
    # The command request reset before any answer: it may have started, so it is never sent again; no id to
    # kill it by, so the sandbox is stopped.
    data = keep(base, create, cmd, stop)
    data["interactions"][1].pop("response")
    data["interactions"][1]["fault"] = {"kind": "reset"}
    save(
        folder / "test_a_reset_mid_stream_is_0006_and_the_command_is_not_sent_again.json",
        data,
        "connection reset on the command request",
    )
    # 404 on the command: the sandbox vanished mid-run. 404 is no proof it stopped (a 404 names a command or a
    # file too), so the driver still stops it, and the stop answers 404 as well.
    data = keep(base, create, cmd, stop)
    data["interactions"][1]["response"] = _error(404, "sandbox_not_found", "Sandbox not found")
    data["interactions"][2]["response"] = _error(404, "sandbox_not_found", "Sandbox not found")
    save(folder / "test_a_sandbox_that_vanished_mid_run_is_0006.json", data, "404 mid-run")
    # The command's answer comes 5 s late: the driver cannot address it, so it stops the sandbox.
    data = keep(base, create, cmd, stop)
    data["interactions"][0]["request"]["body"]["json"]["timeout"] = int((1 + MARGIN) * 1000)  # the test's 1 s limit
    data["interactions"][1]["fault"] = {"kind": "delay", "seconds": 5}
    save(
        folder / "test_a_response_past_the_deadline_stops_the_run_at_its_time_limit.json",
        data,
        "the command's answer 5 s past a 1 s limit",
    )
    _own_faults(base, keep, save, follow, everything, create, cmd, read, stop)


def _own_faults(
    base: dict[str, Any],
    keep: Any,
    save: Any,
    follow: Any,
    everything: list[int],
    create: int,
    cmd: int,
    read: int,
    stop: int,
) -> None:
    for name, status, code, message, extra in (
        ("create_401", 401, "unauthorized", "Not authorized", {}),
        ("create_402", 402, "payment_required", "Billing limit reached", {}),
        ("create_403", 403, "forbidden", "Not authorized: Trying to access resource under scope", {}),
        ("create_403_invalid_token", 403, "forbidden", "Not authorized", {"invalidToken": True}),
    ):
        data = keep(base, create)
        data["interactions"][0]["response"] = _error(status, code, message)
        data["interactions"][0]["response"]["body"]["json"]["error"].update(extra)
        save(OWN / f"{name}.json", data, f"{status} {code}{' invalidToken' if extra else ''} at create")
    # 410 on the command: the session stopped (its timeout). Known stopped: no stop is sent.
    data = keep(base, create, cmd)
    data["interactions"][1]["response"] = _error(410, "sandbox_stopped", "Sandbox is stopped")
    save(OWN / "stopped_mid_run.json", data, "410 sandbox_stopped on the command")
    # The command's stream cut after its first line and "fa": followed by its logs (replayed from the start,
    # "fa" skipped) and its wait, never sent again.
    data = keep(base, *everything)
    run = data["interactions"][cmd]
    run["response"]["body"]["ndjson"][1:-1] = [
        {"json": {"stream": "stdout", "data": "fa"}},
        {"json": {"stream": "stdout", "data": "ult\n"}},
    ]
    run["fault"] = {"kind": "reset", "after_frames": 2}
    follow(data, cmd + 1)
    save(OWN / "cut_log_stream.json", data, "the command's stream cut after 2 lines; followed by logs and wait")
    # A command-level 404 is not the sandbox gone: the cut stream's logs answer 404 command_not_found, the kill
    # too; the driver still stops the sandbox (never left billed).
    data = keep(base, create, cmd, stop)
    run = data["interactions"][1]
    run["response"]["body"]["ndjson"][1:-1] = [{"json": {"stream": "stdout", "data": "fa"}}]
    run["fault"] = {"kind": "reset", "after_frames": 2}
    follow(data, 2)
    del data["interactions"][3]  # no wait: the logs already failed
    data["interactions"][2]["response"] = _error(404, "command_not_found", "Command not found")
    kill = {
        "upstream": "api",
        "request": {
            "method": "POST",
            "path": data["interactions"][2]["request"]["path"].removesuffix("/logs") + "/kill",
            "query": [["teamId", TEAM]],
            "body": {"json": {"signal": 15}},
        },
        "response": _error(404, "command_not_found", "Command not found"),
    }
    data["interactions"].insert(3, kill)
    save(OWN / "command_404_still_stops.json", data, "404 command_not_found on logs and kill; the sandbox is stopped")
    # 429 at create with a Retry-After past what the driver waits (10 s): reported at once, create sent once.
    data = keep(base, create)
    data["interactions"][0]["response"] = _error(
        429, "too_many_requests", "Too many concurrent sandboxes", {"retry-after": "120"}
    )
    save(OWN / "create_429_retry_after_120.json", data, "429 at create, Retry-After: 120")
    # 429 with Retry-After: 1 on the command: refused without acting, so sent again after the wait.
    data = keep(base, *everything)
    refused = copy.deepcopy(data["interactions"][cmd])
    refused["response"] = _error(429, "too_many_requests", "Rate limit exceeded", {"retry-after": "1"})
    data["interactions"].insert(cmd, refused)
    save(OWN / "cmd_429_retry_after_1.json", data, "429 with Retry-After: 1 on the command request")
    # 503 on the command: a command is never sent twice, so it is 0006; the sandbox is stopped.
    data = keep(base, create, cmd, stop)
    data["interactions"][1]["response"] = _error(503, "internal_server_error", "Service unavailable")
    save(OWN / "cmd_503.json", data, "503 on the command request")
    # 503 on the wait (a read, idempotent) of a command whose stream broke: retried, and the run succeeds.
    data = keep(base, *everything)
    run = data["interactions"][cmd]
    run["response"]["body"]["ndjson"][1:-1] = []
    run["fault"] = {"kind": "reset", "after_frames": 1}
    follow(data, cmd + 1)
    failed = copy.deepcopy(data["interactions"][cmd + 2])
    failed["response"] = _error(503, "internal_server_error", "Service unavailable")
    data["interactions"].insert(cmd + 2, failed)
    save(
        OWN / "wait_503_then_ok.json",
        data,
        "the stream cut after the command's first line; 503 on its wait, then its answer",
    )


def record() -> tuple[int, dict[str, float]]:
    """Run the suite in record mode against the simulator; the exit status and each command's run time."""
    import pytest

    sim = importlib.import_module("simulator").Simulator()
    sim.start()
    # The simulator's account: its token, and the placeholder project and team the cassettes replay with.
    os.environ.update(VERCEL_TOKEN=sim.token, VERCEL_PROJECT_ID=PROJECT, VERCEL_TEAM_ID=TEAM)
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


def record_packages() -> int:
    """Author ``tests/cassettes/packages/`` by running ``tests/test_packages.py`` through the stand-in."""
    import pytest

    # The token test_packages.py replays with (not a secret): the stand-in takes it.
    sim = importlib.import_module("simulator").Simulator(token="replay-token-not-a-secret")
    sim.start()
    os.environ[AUTHOR_ENV] = sim.url
    args = [a for a in sys.argv[1:] if a != "--packages"]
    try:
        status = int(pytest.main([str(HERE.parent / "test_packages.py"), "-q", *args]))
    finally:
        sim.stop()
        os.environ.pop(AUTHOR_ENV, None)
    _finish_packages()
    return status


def _finish_packages() -> None:
    for path in sorted((OWN / "packages").glob("*.json")):
        data = _load(path)
        _hold_abandoned_streams(data)
        _unpace(data)
        _save(path, data)


def finish_own() -> None:
    """After a live recording of the driver's own cassettes (recording.py): placeholders back, installs unpaced."""
    changed = _recording.finish_own(OWN, os.environ.get("VERCEL_PROJECT_ID"), os.environ.get("VERCEL_TEAM_ID"))
    for path in changed:
        print("placeholders put back:", path.relative_to(HERE.parent))
    _finish_packages()


UNPACED = "pace: each frame's arrival time (at) dropped, so the install does not make the replay wait; order kept"


def _unpace(data: dict[str, Any]) -> None:
    """Drop the frames' ``at``: an offline install of pandas takes its time again in every replay otherwise.

    ``after`` (which request a frame waited for) stays, so the order of a cell's answers is still replayed.
    """
    for interaction in data["interactions"]:
        for line in ((interaction.get("response") or {}).get("body") or {}).get("ndjson") or []:
            line.pop("at", None)
    edited = data["meta"].setdefault("edited", [])
    if UNPACED not in edited:
        edited.append(UNPACED)


if __name__ == "__main__":
    if "--packages" in sys.argv:
        sys.exit(record_packages())
    if "--finish" in sys.argv:
        finish(simulated=False)
        finish_own()
    else:
        _, durations = record()
        finish(simulated=True, durations=durations)
