"""After ``author.py``: correct what the stand-in cannot answer, trim the big streams, write the fault cassettes.

    python mainsdk_e2b/tests/authoring/finish.py

- Network: the stand-in has no internet, so the two tests that reach a given
  host get the answer E2B's egress policy gives (given host reached, others refused).
- Output: the 10 MB stream is cut to the first frames past the 1 MB limit (what the driver reads).
- Faults: derived from ``TestRun/test_python_prints``, per E2B's documented errors.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CASSETTES = HERE.parent / "conformance" / "cassettes"
sys.path.insert(0, str(HERE.parents[1] / "src"))

from mainsdk.driver import Command  # noqa: E402
from mainsdk.engine import code_command  # noqa: E402
from mainsdk_conformance.cassette import authored_meta, mark_edited  # noqa: E402
from mainsdk_e2b.driver import shell_line  # noqa: E402


def load(name: str) -> dict[str, Any]:
    return json.loads((CASSETTES / name).read_text())


def save(name: str, data: dict[str, Any]) -> None:
    path = CASSETTES / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def frames(interaction: dict[str, Any]) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = interaction["response"]["body"]["connect"]
    return frames


def set_stdout(interaction: dict[str, Any], text: str) -> None:
    """Replace a command's output frames with one stdout frame holding ``text``."""
    kept = [f for f in frames(interaction) if "data" not in (f.get("json") or {}).get("event", {})]
    data = {"flags": 0, "json": {"event": {"data": {"stdout": base64.b64encode(text.encode()).decode()}}}}
    kept.insert(1, data)
    interaction["response"]["body"]["connect"] = kept


def start_of(data: dict[str, Any]) -> dict[str, Any]:
    return next(i for i in data["interactions"] if i["request"]["path"] == "/process.Process/Start")


def fix_network() -> None:
    """The first host the code tries is the one given: reached; the others refused (the suite's reach_code)."""
    for name in ("TestNetwork/test_one_host.json", "TestNetwork/test_a_wildcard_host.json"):
        data = load(name)
        start = start_of(data)
        code = start["request"]["body"]["connect"][0]["json"]["process"]["args"][2]
        hosts = json.loads(re.search(r"for host in (\[.*?\]):", code).group(1))  # type: ignore[union-attr]
        set_stdout(start, "".join(f"{h} {'reached' if i == 0 else 'refused'}\n" for i, h in enumerate(hosts)))
        # Structured, and safe on a recorded cassette (which has no note): recording then keeps this one.
        mark_edited(data["meta"], "stdout: set to what the egress policy allows (the stand-in has no network)")
        save(name, data)


def trim_output() -> None:
    for name in (
        "TestLimits/test_output_is_cut_exactly_at_the_limit_and_the_code_stopped.json",
        "TestLimits/test_stdout_and_stderr_share_the_output_limit.json",
    ):
        data = load(name)
        stream = frames(start_of(data))
        kept, total, limit = [], 0, 1024 * 1024 + 65536
        for frame in stream:
            event = (frame.get("json") or {}).get("event", {})
            if "data" in event:
                if total > limit:
                    continue
                total += len(base64.b64decode(next(iter(event["data"].values()))))
            kept.append(frame)
        start_of(data)["response"]["body"]["connect"] = kept
        save(name, data)


def faults() -> None:
    base = load("TestRun/test_python_prints.json")
    line = shell_line(code_command("python", "print('fault')", 10.0, {}))
    assert isinstance(line, str)
    base["interactions"] = [copy.deepcopy(i) for i in base["interactions"]]
    start = start_of(base)
    start["request"]["body"]["connect"][0]["json"]["process"]["args"][2] = line
    set_stdout(start, "fault\n")
    create, _, listdir, kill = base["interactions"]
    sandbox_id = create["response"]["body"]["json"]["sandboxID"]
    note = "authored by hand from E2B's documented errors and the SDK's source (e2b 2.63.0)"

    def cassette(test: str, interactions: list[dict[str, Any]]) -> None:
        # Authored, whatever the base was made by: never the base's labels (a recording's "recorded").
        meta = authored_meta(base["meta"], test=test, how=note, edited=["fault: written by hand (see how)"])
        data = {"format": base["format"], "meta": meta}
        data["interactions"] = interactions
        save(f"TestFaults/{test}.json", data)

    def answer(of: dict[str, Any], status: int, body: Any, headers: dict[str, str] | None = None) -> dict[str, Any]:
        out = copy.deepcopy(of)
        out["response"] = {"status": status, "headers": {"content-type": "application/json", **(headers or {})}}
        out["response"]["body"] = {"json": body}
        return out

    limited = answer(create, 429, {"code": 429, "message": "rate limit exceeded"}, {"Retry-After": "1"})
    cassette("test_429_with_retry_after_is_retried_after_the_wait", [limited, create, start, listdir, kill])

    busy = answer(create, 503, {"code": 503, "message": "service temporarily unavailable"})
    # The SDK retries a 503 three times itself (ConnectionConfig.retries): four answers, then the driver's 0006.
    cassette("test_503_is_0006_and_retryable", [copy.deepcopy(busy) for _ in range(4)])

    reset = copy.deepcopy(start)
    reset["fault"] = {"kind": "reset", "after_frames": 1}
    # After a transport failure the SDK probes envd's /health; E2B's proxy answers 502 for a sandbox it lost.
    health = answer(start, 502, {"code": 502, "message": "The sandbox was not found"})
    health["request"] = {k: v for k, v in health["request"].items() if k != "body"} | {
        "method": "GET",
        "path": "/health",
    }
    cassette("test_a_reset_mid_stream_is_0006_and_the_command_is_not_sent_again", [create, reset, health, kill])

    gone = answer(start, 404, {"code": 404, "message": f"The sandbox {sandbox_id} was not found"})
    kill_gone = answer(kill, 404, {"code": 404, "message": f"sandbox {sandbox_id} not found"})
    cassette("test_a_sandbox_that_vanished_mid_run_is_0006", [create, gone, kill_gone])

    late = copy.deepcopy(start)
    late["fault"] = {"kind": "delay", "seconds": 5}
    delayed_create = copy.deepcopy(create)
    delayed_create["request"]["body"]["json"]["timeout"] = 61
    late["request"]["body"]["connect"][0]["json"]["process"]["args"][2] = shell_line(
        code_command("python", "print('fault')", 1.0, {})
    )
    empty = copy.deepcopy(listdir)
    empty["response"] = {
        "status": 404,
        "headers": {"content-type": "application/json"},
        "body": {"json": {"code": "not_found", "message": "directory '/home/user/out' does not exist"}},
    }
    cassette("test_a_response_past_the_deadline_stops_the_run_at_its_time_limit", [delayed_create, late, empty, kill])


if __name__ == "__main__":
    _ = Command
    fix_network()
    trim_output()
    faults()
