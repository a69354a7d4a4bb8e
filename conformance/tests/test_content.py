"""Cassettes by content: the kernel kept by name, uploads by digest, large output gzipped; replay still strict.

Recorded through the real record mode from a provider on loopback that echoes what it is sent (as Vercel's
command answers carry their arguments), then replayed by a real httpx client.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import shlex
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mainsdk_conformance.cassette import (
    DIGEST_OVER,
    Payloads,
    body_meaning,
    decode_body,
    encode_body,
    known_payloads,
    load,
)
from mainsdk_conformance.profiles import Profile
from mainsdk_conformance.replay import UNMATCHED_STATUS, ReplayServer

KERNEL = "# the kernel: a comment\nimport sys\n" + "".join(f"print('line {n}', file=sys.stderr)\n" for n in range(400))
EDITED = KERNEL.replace("# the kernel: a comment", "# the kernel: a comment, edited")
WHEEL = bytes(range(256)) * 40  # 10,240 bytes: over DIGEST_OVER, far under the old 256 KiB
OUTPUT = b"x" * (1 << 20)
TOKEN = "3d03663a24773fc8b8a2cc445074af6c"


class Echo(http.server.BaseHTTPRequestHandler):
    """A provider that answers a command with the command it was sent, an upload with ok, /out with 1 MiB."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, body: bytes, kind: str = "application/json") -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        data = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/cmd":
            self._answer(json.dumps({"command": json.loads(data)}).encode())
        else:
            self._answer(b'{"ok":true}')

    def do_GET(self) -> None:
        self._answer(OUTPUT, "text/plain")


@pytest.fixture
def provider() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def session(base: str, kernel: str, wheel: bytes = WHEEL) -> list[httpx.Response]:
    """What a driver sends: the kernel as an argument, in a shell line, on stdin after a token; a wheel upload."""
    files = {"file": ("/tmp/wheels/x-1.0-py3-none-any.whl", wheel)}
    with httpx.Client() as client:
        return [
            client.post(f"{base}/cmd", json={"args": ["-I", "-u", "-c", kernel]}),
            client.post(f"{base}/cmd", json={"args": ["-l", "-c", f"exec python3 -c {shlex.quote(kernel)}"]}),
            client.post(f"{base}/input", json={"stdin": base64.b64encode(f"{TOKEN}\n{kernel}".encode()).decode()}),
            client.post(f"{base}/files", files=files),
            client.get(f"{base}/out"),
        ]


def record(provider: str, path: Path) -> list[httpx.Response]:
    profile = Profile(name="echo", upstreams={"api": provider}, api="v1")
    server = ReplayServer.recorder(profile, path, payloads=Payloads({"kernel": KERNEL.encode()}))
    server.start()
    try:
        answers = session(server.url(), KERNEL)
    finally:
        server.stop()
    server.save()
    return answers


def replay(path: Path, kernel: str, sent: str, wheel: bytes = WHEEL) -> tuple[list[httpx.Response], list[str]]:
    profile = Profile(name="echo", upstreams={"api": "https://provider.invalid"}, api="v1")
    server = ReplayServer.replayer(profile, path, payloads=Payloads({"kernel": kernel.encode()}))
    server.start()
    try:
        answers = session(server.url(), sent, wheel)
    finally:
        server.stop()
    return answers, server.problems(final=True)


def test_a_cassette_holds_the_kernel_by_name_and_uploads_by_digest_never_their_bytes(
    provider: str, tmp_path: Path
) -> None:
    path = tmp_path / "c.json"
    record(provider, path)
    text = path.read_text()
    assert "print('line" not in text and KERNEL[:200] not in text  # neither plain, escaped nor shell-quoted
    assert base64.b64encode(WHEEL[:300]).decode()[:40] not in text
    cassette = load(path)
    requests = [i["request"].get("body") for i in cassette.interactions]
    assert requests[0]["json"]["args"][3] == "[payload:kernel]"
    assert requests[1]["json"]["args"][2] == "exec python3 -c [payload:kernel:sh]"
    assert base64.b64decode(requests[2]["json"]["stdin"]) == f"{TOKEN}\n[payload:kernel]".encode()
    part = requests[3]["multipart"][0]
    assert (part["sha256"], part["size"]) == (hashlib.sha256(WHEEL).hexdigest(), len(WHEEL))
    # The echo is kept by name too; the megabyte of output gzipped, and given back byte for byte.
    assert cassette.interactions[0]["response"]["body"]["json"]["command"]["args"][3] == "[payload:kernel]"
    out = cassette.interactions[4]["response"]["body"]
    assert set(out) == {"gzip"} and decode_body(out) == OUTPUT
    assert len(text) < 12_000


def test_a_kernel_edit_replays_the_cassette_unchanged_and_the_echo_is_the_edited_kernel(
    provider: str, tmp_path: Path
) -> None:
    path = tmp_path / "c.json"
    recorded = [answer.content for answer in record(provider, path)]
    before = path.read_bytes()
    answers, problems = replay(path, EDITED, EDITED)
    assert problems == [] and [a.status_code for a in answers] == [200] * 5
    assert answers[0].json() == {"command": {"args": ["-I", "-u", "-c", EDITED]}}
    assert answers[4].content == recorded[4] == OUTPUT
    assert path.read_bytes() == before
    # The kernel as it was: the same answers, byte for byte, as the provider gave them.
    answers, problems = replay(path, KERNEL, KERNEL)
    assert problems == [] and [a.content for a in answers] == recorded


def test_replay_checks_the_kernel_is_the_current_one_and_the_upload_by_hash(provider: str, tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    record(provider, path)
    # A driver sending another kernel than the app's (here the one recorded, after an edit) matches nothing.
    answers, problems = replay(path, EDITED, KERNEL)
    assert [a.status_code for a in answers[:3]] == [UNMATCHED_STATUS] * 3
    assert "recorded '[payload:kernel]', got '[sha256:" in problems[0]
    # One byte of the wheel changed: its digest differs, and replay says so.
    changed = WHEEL[:-1] + b"\x00"
    answers, problems = replay(path, KERNEL, KERNEL, changed)
    assert answers[3].status_code == UNMATCHED_STATUS
    recorded = f"recorded {hashlib.sha256(WHEEL).hexdigest()!r}, got {hashlib.sha256(changed).hexdigest()!r}"
    assert any("POST api:/files is not in the cassette" in p and recorded in p for p in problems)


def test_a_long_json_string_is_kept_by_digest_and_a_short_one_as_it_is() -> None:
    headers = {"content-type": "application/json"}
    long = "y" * (DIGEST_OVER + 1)
    stored = encode_body(json.dumps({"cmd": "/bin/bash", "args": [long]}).encode(), headers, request=True)
    assert stored is not None and stored["json"]["cmd"] == "/bin/bash"
    assert stored["json"]["args"] == [f"[sha256:{hashlib.sha256(long.encode()).hexdigest()}, {len(long)} bytes]"]
    other = encode_body(json.dumps({"cmd": "/bin/bash", "args": [long[:-1] + "z"]}).encode(), headers, request=True)
    assert body_meaning(stored) != body_meaning(other)


def test_the_known_payloads_are_the_kernel_core_delivers_now(monkeypatch: pytest.MonkeyPatch) -> None:
    from mainsdk import kernel_start

    _, args, stdin = kernel_start.kernel_command("t" * 32, {"language": "python"})
    payloads = known_payloads()
    assert payloads.mark_text(args[-1]) == "[payload:kernel-loader]"
    assert payloads.mark_bytes(stdin) == b"t" * 32 + b'\n[payload:kernel]{"language": "python"}\n'
    files = dict(kernel_start.kernel_files())
    files["loader.py"] = files["loader.py"].replace("\n", "\n# edited\n", 1)
    monkeypatch.setattr(kernel_start, "kernel_files", lambda: files)
    edited = kernel_start.kernel_command("t" * 32, {"language": "python"})
    assert known_payloads().mark_bytes(edited[2]).startswith(b"t" * 32 + b"\n[payload:kernel]")
    assert known_payloads().mark_text(edited[1][-1]) == "[payload:kernel-loader]"
