"""The replay server, driven by a real httpx client: exact answers, strict matching, order, faults."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
from mainsdk_conformance.cassette import CassetteError, decode_body, envelope
from mainsdk_conformance.profiles import E2B, Profile
from mainsdk_conformance.replay import ReplayServer

ONE = Profile(name="test", upstreams={"api": "https://provider.invalid"}, lane_paths=(r"^/boxes/([^/?]+)",))
START = {"flags": 0, "json": {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo hi"]}}}
FRAMES: list[dict[str, Any]] = [
    {"flags": 0, "json": {"event": {"start": {"pid": 7}}}},
    {"flags": 0, "json": {"event": {"data": {"stdout": "aGkK"}}}, "at": 0.3},
    {"flags": 0, "json": {"event": {"end": {"exitCode": 0, "exited": True, "status": "exit status 0"}}}},
    {"flags": 2, "json": {}},
]


def write(path: Path, interactions: list[dict[str, Any]], provider: str = "test") -> Path:
    meta = {"provider": provider, "api": "v1", "date": "2026-11-29", "made": "authored"}
    path.write_text(json.dumps({"format": "mainsdk-cassette/1", "meta": meta, "interactions": interactions}))
    return path


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[ReplayServer] = []

    def start(interactions: list[dict[str, Any]], profile: Profile = ONE) -> ReplayServer:
        server = ReplayServer.replayer(profile, write(tmp_path / f"c{len(started)}.json", interactions, profile.name))
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def test_a_replayed_session_answers_byte_for_byte_as_recorded(serve: Any) -> None:
    create = {"json": {"sandboxID": "sbx1", "domain": "e2b.app"}, "style": "spaced", "newline": True}
    binary = {"base64": base64.b64encode(bytes(range(256))).decode()}
    logs = {"ndjson": [{"json": {"stream": "stdout", "data": "a"}}, {"json": {"stream": "stderr", "data": "b"}}]}
    interactions = [
        {
            "upstream": "api",
            "request": {"method": "POST", "path": "/v2/sandboxes", "body": {"json": {"templateID": "base"}}},
            "response": {
                "status": 201,
                "headers": {"Content-Type": "application/json", "X-Trace": "t1"},
                "body": create,
            },
        },
        {
            "upstream": "sandbox",
            "request": {
                "method": "POST",
                "path": "/process.Process/Start",
                "headers": {"E2b-Sandbox-Id": "sbx1", "Content-Type": "application/connect+json"},
                "body": {"connect": [START]},
            },
            "response": {
                "status": 200,
                "headers": {"Content-Type": "application/connect+json"},
                "body": {"connect": FRAMES},
            },
        },
        {
            "upstream": "sandbox",
            "request": {
                "method": "GET",
                "path": "/files",
                "query": [["path", "/work/b.bin"]],
                "headers": {"E2b-Sandbox-Id": "sbx1"},
            },
            "response": {"status": 200, "headers": {"Content-Type": "application/octet-stream"}, "body": binary},
        },
        {
            "upstream": "api",
            "request": {"method": "GET", "path": "/sandboxes/sbx1/logs"},
            "response": {"status": 200, "headers": {"Content-Type": "application/x-ndjson"}, "body": logs},
        },
        {"upstream": "api", "request": {"method": "DELETE", "path": "/sandboxes/sbx1"}, "response": {"status": 204}},
    ]
    server = serve(interactions, E2B)
    api, sandbox = server.url("api"), server.url("sandbox")
    envd = {"E2b-Sandbox-Id": "sbx1", "X-Access-Token": "anything: credentials are never matched"}
    with httpx.Client() as client:
        created = client.post(f"{api}/v2/sandboxes", json={"templateID": "base"}, headers={"X-API-KEY": "k"})
        assert (created.status_code, created.headers["x-trace"]) == (201, "t1")
        assert created.content == b'{"sandboxID": "sbx1", "domain": "e2b.app"}\n' == decode_body(create)
        arrivals = []
        started = time.monotonic()
        with client.stream(
            "POST",
            f"{sandbox}/process.Process/Start",
            content=envelope(0, b'{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]}}'),
            headers={**envd, "Content-Type": "application/connect+json"},
        ) as stream:
            assert stream.headers["transfer-encoding"] == "chunked"
            for chunk in stream.iter_raw():
                arrivals.append((time.monotonic() - started, chunk))
        assert b"".join(c for _, c in arrivals) == decode_body({"connect": FRAMES})
        assert [c for _, c in arrivals] == [
            envelope(f["flags"], json.dumps(f["json"], separators=(",", ":")).encode()) for f in FRAMES
        ]
        assert arrivals[1][0] >= 0.3 > arrivals[0][0]  # the recorded pace
        got = client.get(f"{sandbox}/files", params={"path": "/work/b.bin"}, headers=envd)
        assert got.content == bytes(range(256))
        assert (
            client.get(f"{api}/sandboxes/sbx1/logs").content
            == b'{"stream":"stdout","data":"a"}\n{"stream":"stderr","data":"b"}\n'
        )
        assert client.delete(f"{api}/sandboxes/sbx1").status_code == 204
    assert server.problems(final=True) == []


def test_a_cassette_holding_a_token_is_rejected(tmp_path: Path) -> None:
    interaction = {
        "request": {"method": "POST", "path": "/v2/sandboxes"},
        "response": {"status": 201, "body": {"json": {"sandboxID": "s", "envdAccessToken": "d7f1c2a9"}}},
    }
    with pytest.raises(CassetteError) as caught:
        ReplayServer.replayer(E2B, write(tmp_path / "token.json", [interaction], "e2b"))
    assert "/interactions/0/response/body/json/envdAccessToken" in str(caught.value)


def test_an_unknown_request_fails_naming_it_and_the_nearest(serve: Any) -> None:
    server = serve(
        [
            {
                "request": {"method": "POST", "path": "/boxes", "body": {"json": {"timeout": 30, "template": "base"}}},
                "response": {"status": 201},
            },
            {"request": {"method": "GET", "path": "/health"}, "response": {"status": 200}},
        ]
    )
    with httpx.Client() as client:
        answer = client.post(f"{server.url()}/boxes", json={"template": "base", "timeout": 10})
    assert answer.status_code == 599 and "nearest recorded" in answer.json()["message"]
    [problem] = server.problems(final=False)
    assert "POST api:/boxes is not in the cassette" in problem
    assert "nearest recorded: #0 POST api:/boxes" in problem and "/timeout: recorded 30, got 10" in problem


def test_the_requests_of_one_sandbox_must_come_in_order(serve: Any) -> None:
    ok = {"status": 200}
    server = serve(
        [
            {"request": {"method": "POST", "path": "/boxes/a/run"}, "response": ok},
            {"request": {"method": "POST", "path": "/boxes/b/run"}, "response": ok},
            {"request": {"method": "POST", "path": "/boxes/a/stop"}, "response": ok},
            {"request": {"method": "POST", "path": "/boxes/b/stop"}, "response": ok},
        ]
    )
    with httpx.Client(base_url=server.url()) as client:
        # Another sandbox's requests may interleave differently; this sandbox's may not.
        assert client.post("/boxes/b/run").status_code == 200
        assert client.post("/boxes/a/stop").status_code == 599
        assert client.post("/boxes/a/run").status_code == 200
        assert client.post("/boxes/a/stop").status_code == 200
        assert client.post("/boxes/b/stop").status_code == 200
    [problem] = server.problems(final=True)
    assert "POST api:/boxes/a/stop came out of order for sandbox a" in problem
    assert "#0 POST api:/boxes/a/run comes first" in problem


def test_a_recorded_request_that_never_came_fails_at_the_end(serve: Any) -> None:
    server = serve([{"request": {"method": "DELETE", "path": "/boxes/a"}, "response": {"status": 204}}])
    assert server.problems(final=False) == []
    [problem] = server.problems(final=True)
    assert "#0 DELETE api:/boxes/a never came" in problem


def test_a_missing_cassette_fails_the_first_request_saying_how_to_make_it(tmp_path: Path) -> None:
    server = ReplayServer.replayer(E2B, tmp_path / "TestRun" / "test_x.json")
    server.start()
    try:
        with httpx.Client() as client:
            assert client.post(f"{server.url()}/v2/sandboxes").status_code == 599
    finally:
        server.stop()
    [problem] = server.problems(final=True)
    assert "there is no cassette" in problem and "mainsdk-conformance record --driver e2b" in problem


def test_429_with_retry_after_and_503_are_answered_as_recorded(serve: Any) -> None:
    server = serve(
        [
            {
                "request": {"method": "POST", "path": "/boxes"},
                "response": {"status": 429, "headers": {"Retry-After": "1"}},
            },
            {
                "request": {"method": "POST", "path": "/boxes"},
                "response": {"status": 503, "body": {"json": {"error": "busy"}}},
            },
            {"request": {"method": "POST", "path": "/boxes"}, "response": {"status": 201}},
        ]
    )
    with httpx.Client(base_url=server.url()) as client:
        first = client.post("/boxes")
        assert (first.status_code, first.headers["retry-after"]) == (429, "1")
        second = client.post("/boxes")  # too soon: reported
        assert (second.status_code, second.json()) == (503, {"error": "busy"})
        assert client.post("/boxes").status_code == 201
    [violation] = server.retry_after_violations()
    assert "after a 429 that said Retry-After: 1" in violation
    assert server.cassette.has_status(429, header="retry-after") and server.problems(final=True) == []


def test_a_reset_fault_closes_the_connection_mid_stream(serve: Any) -> None:
    server = serve(
        [
            {
                "request": {"method": "POST", "path": "/process.Process/Start"},
                "response": {
                    "status": 200,
                    "headers": {"Content-Type": "application/connect+json"},
                    "body": {"connect": FRAMES},
                },
                "fault": {"kind": "reset", "after_frames": 1},
            }
        ]
    )
    received = b""
    with (
        httpx.Client() as client,
        pytest.raises(httpx.HTTPError),
        client.stream("POST", f"{server.url()}/process.Process/Start") as stream,
    ):
        for chunk in stream.iter_raw():
            received += chunk
    assert received == decode_body({"connect": FRAMES[:1]})
    assert server.commands_sent() == 0  # the test profile names no command paths


def test_a_delay_fault_holds_the_answer_past_a_clients_deadline(serve: Any) -> None:
    server = serve(
        [
            {
                "request": {"method": "GET", "path": "/slow"},
                "response": {"status": 200},
                "fault": {"kind": "delay", "seconds": 1.5},
            }
        ]
    )
    with httpx.Client(base_url=server.url()) as client:
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            client.get("/slow", timeout=0.5)
        assert time.monotonic() - started < 1.5


def test_a_frame_waits_for_the_request_that_caused_it(serve: Any) -> None:
    # Recorded: the stream ended only after the kill (the second request of sandbox a) had come.
    frames = [FRAMES[0], {**FRAMES[2], "after": 2}, FRAMES[3]]
    server = serve(
        [
            {
                "request": {"method": "POST", "path": "/boxes/a/start"},
                "response": {
                    "status": 200,
                    "headers": {"Content-Type": "application/connect+json"},
                    "body": {"connect": frames},
                },
            },
            {"request": {"method": "POST", "path": "/boxes/a/kill"}, "response": {"status": 200}},
        ]
    )
    got: list[bytes] = []
    with httpx.Client(base_url=server.url()) as client:
        with client.stream("POST", "/boxes/a/start") as stream:
            chunks = stream.iter_raw()
            got.append(next(chunks))
            killer = threading.Timer(0.4, lambda: httpx.post(f"{server.url()}/boxes/a/kill"))
            started = time.monotonic()
            killer.start()
            got.extend(chunks)
            assert time.monotonic() - started >= 0.35
        killer.join()
    assert b"".join(got) == decode_body({"connect": frames})
    assert server.problems(final=True) == []


def test_a_replayed_answer_holds_its_times_moved_so_that_the_session_starts_now(serve: Any) -> None:
    # A cassette is replayed long after it was made: a driver that measures a provider's cap from the server's
    # start time (E2B's startedAt) must see a session that started now, not one an hour or a week old.
    listed = [
        {"sandboxID": "sbx1", "startedAt": "2026-01-02T03:04:05Z", "endAt": "2026-01-02T03:10:05.250+00:00"},
        {"sandboxID": "sbx2", "startedAt": "2026-01-02T03:05:05.123456789Z"},
    ]
    interactions = [
        {
            "upstream": "api",
            "request": {"method": "GET", "path": "/v2/sandboxes"},
            "response": {"status": 200, "headers": {"Content-Type": "application/json"}, "body": {"json": listed}},
        }
    ]
    server = serve(interactions)
    before = time.time()
    answer = httpx.get(server.url("api") + "/v2/sandboxes").json()
    assert server.problems(final=True) == []
    from datetime import datetime

    started = datetime.fromisoformat(answer[0]["startedAt"]).timestamp()
    assert before - 5 <= started <= time.time() + 1  # the earliest recorded time is now
    ends = datetime.fromisoformat(answer[0]["endAt"]).timestamp()
    assert ends - started == pytest.approx(360.25, abs=0.01)  # every time moved by the same offset, form kept
    assert answer[0]["endAt"].endswith("+00:00") and len(answer[0]["endAt"]) == len(listed[0]["endAt"])
    assert len(answer[1]["startedAt"]) == len(listed[1]["startedAt"]) and answer[1]["startedAt"].endswith("Z")
    second = datetime.fromisoformat(answer[1]["startedAt"].replace("123456789Z", "123456Z")).timestamp()
    assert second - started == pytest.approx(60.123456, abs=0.001)


def test_a_replayed_answer_holds_its_epoch_millisecond_times_moved_by_the_same_offset(serve: Any) -> None:
    # Vercel says a session's times as milliseconds since the epoch; the driver measures the plan's cap from
    # startedAt, so a cassette replayed 45 minutes after it was made must still be a session that started now.
    profile = attrs.evolve(ONE, epoch_ms_keys=("startedAt", "createdAt"))
    session = {"id": "s1", "createdAt": 1767322445000, "startedAt": 1767322446500, "memory": 1767322440000}
    interactions = [
        {
            "upstream": "api",
            "request": {"method": "GET", "path": "/v2/sandboxes/s1"},
            "response": {"status": 200, "headers": {"Content-Type": "application/json"}, "body": {"json": session}},
        }
    ]
    server = serve(interactions, profile)
    before = time.time()
    answer = httpx.get(server.url("api") + "/v2/sandboxes/s1").json()
    assert server.problems(final=True) == []
    assert before - 5 <= answer["createdAt"] / 1000 <= time.time() + 1
    assert answer["startedAt"] - answer["createdAt"] == 1500
    assert answer["memory"] == session["memory"]  # a number under another key is the provider's, never moved


def test_a_named_secret_is_matched_by_name_where_it_was_recorded_and_nowhere_else(tmp_path: Path) -> None:
    """The cassette holds ``[scrubbed:NAME]``; replay scrubs each request the same way before matching it, so a
    driver that sends the value in the recorded field matches, and one that puts it anywhere else does not."""
    value = "egk-5c4b3a29-conformance"
    recorded = {"network": {"rules": {"a.test": [{"transform": {"headers": {"X-Api-Key": "[scrubbed:EGRESS_KEY]"}}}]}}}
    interactions = [
        {"request": {"method": "POST", "path": "/boxes", "body": {"json": recorded}}, "response": {"status": 201}}
    ]
    path = write(tmp_path / "named.json", interactions)
    right = {"network": {"rules": {"a.test": [{"transform": {"headers": {"X-Api-Key": value}}}]}}}
    wrong_field = {"network": {"rules": {"a.test": [{"transform": {"headers": {"X-Key": value}}}]}}}
    other_value = {"network": {"rules": {"a.test": [{"transform": {"headers": {"X-Api-Key": "another"}}}]}}}
    for body, matches in ((right, True), (wrong_field, False), (other_value, False)):
        server = ReplayServer.replayer(ONE, path, named={"EGRESS_KEY": value})
        server.start()
        try:
            with httpx.Client() as client:
                answer = client.post(f"{server.url()}/boxes", json=body)
        finally:
            server.stop()
        assert (answer.status_code == 201) is matches, body
        assert value not in answer.text and all(value not in problem for problem in server.problems(final=False))


def test_a_recorded_egress_header_is_scrubbed_and_replay_still_tells_which_value_it_was(tmp_path: Path) -> None:
    """Recorded through E2B's profile: the known value is ``[scrubbed:NAME]`` in the saved cassette; a replayed
    create with that value matches, one with another value does not, and neither is echoed."""
    body = {"network": {"rules": {"a.test": [{"transform": {"headers": {"X-Key": "tok-1"}}}]}}, "ok": 1}
    path = tmp_path / "egress.json"
    recorder = ReplayServer.recorder(E2B, path, upstreams={"api": "http://127.0.0.1:9"}, known={"K1": "tok-1"})
    create = {"method": "POST", "path": "/v2/sandboxes", "body": {"json": body}}
    recorder.cassette.interactions.append({"upstream": "api", "request": create, "response": {"status": 201}})
    recorder.save()
    text = path.read_text()
    assert "tok-1" not in text and "[scrubbed:K1]" in text
    for value, matches in (("tok-1", True), ("tok-2", False)):
        sent = {"network": {"rules": {"a.test": [{"transform": {"headers": {"X-Key": value}}}]}}, "ok": 1}
        server = ReplayServer.replayer(E2B, path, known={"K1": "tok-1"})
        server.start()
        try:
            with httpx.Client() as client:
                answer = client.post(f"{server.url('api')}/v2/sandboxes", json=sent)
        finally:
            server.stop()
        assert (answer.status_code == 201) is matches, value
        assert "tok-" not in answer.text


def test_a_cassette_with_a_value_in_a_secret_field_is_refused_naming_where(tmp_path: Path) -> None:
    body = {"network": {"rules": {"a.test": [{"transform": {"headers": {"X-Key": "written-by-hand"}}}]}}}
    interaction = {"request": {"method": "POST", "path": "/v2/sandboxes", "body": {"json": body}}}
    with pytest.raises(CassetteError) as caught:
        ReplayServer.replayer(E2B, write(tmp_path / "raw.json", [interaction], "e2b"))
    assert "interactions[0].request holds a value in a secret field" in str(caught.value)
    assert "written-by-hand" not in str(caught.value)
    marked = {"network": {"rules": {"a.test": [{"transform": {"headers": {"X-Key": "[scrubbed:K]"}}}]}}}
    interaction["request"]["body"] = {"json": marked}
    ReplayServer.replayer(E2B, write(tmp_path / "marked.json", [interaction], "e2b"))  # a mark is what it must hold
