"""Record mode against a real provider on loopback: the cassette is scrubbed and replays identically."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mainsdk_conformance.cassette import (
    SCRUBBED,
    CassetteError,
    authored_meta,
    find_credentials,
    hand_set,
    keep_on_record,
    load,
    mark_edited,
)
from mainsdk_conformance.profiles import Profile
from mainsdk_conformance.replay import ReplayServer
from standin import ACCESS_TOKEN, API_KEY, BINARY, StandIn, envelope

MULTIPART = b'--b1\r\nContent-Disposition: form-data; name="file"; filename="/work/a.txt"\r\n\r\nhello\r\n--b1--\r\n'


@pytest.fixture
def provider() -> Iterator[StandIn]:
    standin = StandIn()
    yield standin
    standin.close()


def profile_for(provider: StandIn) -> Profile:
    return Profile(
        name="standin",
        upstreams={"api": provider.url, "sandbox": provider.url},
        api="v2",
        lane_headers=("E2b-Sandbox-Id",),
        lane_paths=(r"^/sandboxes/([^/?]+)",),
        command_paths=(r"^/process\.Process/Start$",),
        credential_env=("STANDIN_KEY",),
    )


def session(server: ReplayServer) -> list[Any]:
    """What a driver does: create, run a command and kill it mid-stream, read and write files, delete."""
    seen: list[Any] = []
    api, sandbox = server.url("api"), server.url("sandbox")
    with httpx.Client() as client:
        created = client.post(
            f"{api}/v2/sandboxes", json={"templateID": "base", "timeout": 30}, headers={"X-API-KEY": API_KEY}
        )
        seen.append((created.status_code, created.headers["content-type"], created.content))
        token = created.json()["envdAccessToken"]
        envd = {"E2b-Sandbox-Id": "sbx1", "X-Access-Token": token}
        first_frame = threading.Event()
        chunks: list[bytes] = []

        def run() -> None:
            with client.stream(
                "POST",
                f"{sandbox}/process.Process/Start",
                content=envelope(0, {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "sleep 60"]}}),
                headers={**envd, "Content-Type": "application/connect+json"},
            ) as stream:
                for chunk in stream.iter_raw():
                    chunks.append(chunk)
                    first_frame.set()

        runner = threading.Thread(target=run)
        runner.start()
        assert first_frame.wait(5)
        # The deadline: kill the command; only then does the stream end.
        killed = client.post(
            f"{sandbox}/process.Process/SendSignal",
            json={"process": {"pid": 7}, "signal": "SIGNAL_SIGKILL"},
            headers=envd,
        )
        runner.join(10)
        seen.append(b"".join(chunks))
        seen.append((killed.status_code, killed.content))
        got = client.get(f"{sandbox}/files", params={"path": "/work/b.bin"}, headers=envd)
        seen.append((got.status_code, got.content))
        wrote = client.post(
            f"{sandbox}/files", content=MULTIPART, headers={**envd, "Content-Type": "multipart/form-data; boundary=b1"}
        )
        seen.append((wrote.status_code, wrote.content))
        deleted = client.delete(f"{api}/sandboxes/sbx1", headers={"X-API-KEY": API_KEY})
        seen.append(deleted.status_code)
    return seen


def test_record_mode_writes_a_scrubbed_cassette_that_replays_identically(provider: StandIn, tmp_path: Path) -> None:
    profile = profile_for(provider)
    path = tmp_path / "TestRun" / "test_record.json"
    recorder = ReplayServer.recorder(profile, path, secrets=[API_KEY])
    recorder.start()
    try:
        live = session(recorder)
    finally:
        recorder.stop()
    recorder.save()
    # The driver saw the provider's own answers, token and all.
    assert json.loads(live[0][2])["envdAccessToken"] == ACCESS_TOKEN
    assert live[3] == (200, BINARY) and live[5] == 204
    assert [r[2].get("X-Api-Key") or r[2].get("X-API-KEY") for r in provider.requests if r[1] == "/v2/sandboxes"] == [
        API_KEY
    ]

    text = path.read_text()
    assert API_KEY not in text and ACCESS_TOKEN not in text and find_credentials(json.loads(text)) == []
    cassette = load(path)
    # The provider is a stand-in on loopback, so what it answered is authored, and says so.
    assert (cassette.meta["provider"], cassette.meta["made"], cassette.meta["api"]) == ("standin", "authored", "v2")
    assert cassette.meta["how"] == f"recorded against a stand-in on this machine ({provider.url})"
    create, start, kill, read, write, delete = cassette.interactions
    assert create["request"]["headers"]["X-API-KEY"] == SCRUBBED
    assert create["response"]["body"] == {
        "json": {"sandboxID": "sbx1", "envdAccessToken": SCRUBBED, "templateID": "base"},
        "newline": True,
    }
    assert start["request"]["headers"]["X-Access-Token"] == SCRUBBED
    assert start["request"]["body"] == {
        "connect": [{"flags": 0, "json": {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "sleep 60"]}}}]
    }
    frames = start["response"]["body"]["connect"]
    assert [f["flags"] for f in frames] == [0, 0, 0, 2]
    assert frames[2]["after"] == 2  # the end came after the kill, the second request of sbx1
    assert write["request"]["body"]["multipart"] == [
        {"name": "file", "filename": "/work/a.txt", "content_type": None, "text": "hello"}
    ]
    assert read["response"]["body"]["base64"] and delete["response"]["status"] == 204 and kill["upstream"] == "sandbox"

    replayer = ReplayServer.replayer(profile, path)
    provider.close()  # replay never reaches the provider
    replayer.start()
    try:
        replayed = session(replayer)
    finally:
        replayer.stop()
    assert replayer.problems(final=True) == []
    scrubbed_create = live[0][2].replace(ACCESS_TOKEN.encode(), SCRUBBED.encode())
    assert replayed == [(live[0][0], live[0][1], scrubbed_create), *live[1:]]
    assert replayer.commands_sent() == 1


# --- Record safety and labels ------------------------------------------------------------------------------------


def _cassette(tmp_path: Path, meta: dict[str, Any], interactions: list[dict[str, Any]] | None = None) -> Path:
    path = tmp_path / "c.json"
    base = {"provider": "p", "api": "v1", "date": "2026-11-30"}
    path.write_text(
        json.dumps({"format": "mainsdk-cassette/1", "meta": base | meta, "interactions": interactions or []})
    )
    return path


GET = {"request": {"method": "GET", "path": "/x"}, "response": {"status": 200}}


def test_recording_keeps_authored_faults_and_records_other_hand_edits_again(tmp_path: Path) -> None:
    fault = {**GET, "fault": {"kind": "reset"}}
    by_hand = {"made": "authored", "edited": ["fault: 503 at create", "stdout: by hand"]}
    kept = keep_on_record(_cassette(tmp_path, by_hand, [GET]))
    assert kept is not None and "fault: 503 at create" in kept and "cannot reproduce" in kept
    assert "stdout: by hand" not in kept
    faulty = keep_on_record(_cassette(tmp_path, {"made": "authored"}, [GET, fault]))
    assert faulty is not None and "faults (reset)" in faulty
    # A hand-set answer a live provider can give is an expectation to record again, not a cassette to skip.
    edited = _cassette(tmp_path, {"made": "authored", "edited": ["stdout: by hand"]}, [GET])
    assert keep_on_record(edited) is None
    assert hand_set(edited) == ["stdout: by hand"]
    assert hand_set(_cassette(tmp_path, {"made": "recorded", "edited": ["stdout: x"]}, [GET])) == []


def test_recording_may_replace_plain_authored_and_recorded_cassettes(tmp_path: Path) -> None:
    assert keep_on_record(_cassette(tmp_path, {"made": "authored"}, [GET])) is None
    # A real provider's reset, recorded as the fault it was, is a recording: the next recording may replace it.
    assert keep_on_record(_cassette(tmp_path, {"made": "recorded"}, [{**GET, "fault": {"kind": "reset"}}])) is None
    assert keep_on_record(tmp_path / "absent.json") is None


def test_edited_must_be_a_list_of_what_was_changed(tmp_path: Path) -> None:
    with pytest.raises(CassetteError, match=r"meta\.edited must be a list"):
        load(_cassette(tmp_path, {"made": "authored", "edited": "stdout"}))
    assert load(_cassette(tmp_path, {"made": "authored", "edited": ["stdout: x"]})).meta["edited"] == ["stdout: x"]


def test_labels_of_a_cassette_derived_from_a_recording_are_its_own() -> None:
    recorded: dict[str, Any] = {
        "provider": "p",
        "api": "v2",
        "date": "2026-11-30",
        "made": "recorded",
        "sdk": "e2b 2.63.0",
    }
    meta = authored_meta(recorded, test="test_503", how="from the documented errors", edited=["fault: 503"])
    assert meta == {
        "provider": "p",
        "api": "v2",
        "date": "2026-11-30",
        "made": "authored",
        "test": "test_503",
        "how": "from the documented errors",
        "edited": ["fault: 503"],
    }
    # mark_edited on a recording without any note (E2B's finish.py crashed there with KeyError 'note').
    mark_edited(recorded, "stdout: what the policy gives")
    mark_edited(recorded, "stdout: what the policy gives")
    assert recorded["edited"] == ["stdout: what the policy gives"] and recorded["made"] == "recorded"


def test_a_provider_elsewhere_is_recorded_and_one_on_this_machine_is_a_stand_in(tmp_path: Path) -> None:
    def made(url: str) -> tuple[str, str | None]:
        profile = Profile(name="p", upstreams={"api": url}, api="v1")
        meta = ReplayServer.recorder(profile, tmp_path / "c.json").cassette.meta
        return meta["made"], meta.get("how")

    assert made("https://api.vercel.com") == ("recorded", None)
    for url in (
        "http://127.0.0.1:9",
        "http://localhost:80",
        "http://[::1]:9",
        "http://127.3.4.5",
        "http://a.localhost",
    ):
        assert made(url)[0] == "authored", url
