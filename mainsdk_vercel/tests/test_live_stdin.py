"""A live stdin (``Command.input``): chunks the app sends while a Vercel command runs reach it, in order.

Against the loopback stand-in, whose ``cmd/{id}/stdin`` keeps the REST reference's rules (docs "Write to
command stdin": attached commands only, in order, ``offset`` skips what was received and a later one is a 409,
504 after a time when the command is not reading), with the real driver and a real httpx client.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mainsdk.driver import BoxSpec, Command, InputStream, RunLimits

from mainsdk_vercel import vercel_sandbox_driver

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "conformance"))
Simulator: Any = importlib.import_module("simulator").Simulator
LIMITS = RunLimits(timeout=20.0, memory=64 << 20, output=1 << 20, files=1 << 20, disk=64 << 20)


@pytest.fixture
def standin() -> Iterator[Any]:
    sim = Simulator()
    sim.start()
    yield sim
    sim.stop()


class Sink:
    """A command's output as it comes, with an event per arrival."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.err = bytearray()
        self.arrived = asyncio.Event()

    def stdout(self, data: bytes) -> None:
        self.out += data
        self.arrived.set()

    def stderr(self, data: bytes) -> None:
        self.err += data

    def host_refused(self, host: str) -> None:
        pass

    async def until(self, text: bytes) -> None:
        while text not in self.out:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), 10)


def test_a_session_exec_of_cat_receives_chunks_sent_while_it_runs(standin: Any) -> None:
    async def scenario() -> tuple[bytes, int | None, list[dict[str, Any]]]:
        driver = vercel_sandbox_driver(token=standin.token, project="prj_x", base_url=standin.url)
        box = await driver.mainsdk_driver_start(
            BoxSpec(id="ses_0123456789abcdef01234567", limits=LIMITS, idle=60.0, session=True)
        )
        try:
            stream = InputStream()
            sink = Sink()
            # Command.stdin first, then what the app sends while cat runs: each line comes back before the next
            # is sent, so it went through a stdin that stayed open.
            run = asyncio.create_task(
                driver.mainsdk_driver_exec(
                    box, Command("bash", ("-c", "cat"), stdin=b"given\n", input=stream, timeout=20), sink
                )
            )
            await sink.until(b"given\n")
            for line in (b"one\n", b"two\n", b"three\n"):
                stream.send(line)
                await sink.until(line)
            stream.close()
            outcome = await asyncio.wait_for(run, 10)
            writes = [r for r in standin.requests if r["path"].endswith("/stdin")]
            return bytes(sink.out), outcome.exit_code, writes
        finally:
            await driver.mainsdk_driver_stop(box)

    out, code, writes = asyncio.run(scenario())
    assert (out, code) == (b"given\none\ntwo\nthree\n", 0)
    bodies = [json.loads(w["body"]) for w in writes]
    # One write a chunk, each at the offset of what cat already had, then the close.
    assert [base64.b64decode(b.get("data", "")) for b in bodies] == [b"given\n", b"one\n", b"two\n", b"three\n", b""]
    assert [b["offset"] for b in bodies] == [0, 6, 10, 14, 20]
    assert bodies[-1].get("close") is True


def test_the_stand_in_keeps_the_stdin_endpoints_rules(standin: Any) -> None:
    standin.stdin_timeout = 1.0  # the documented 30 s, shortened

    def post(path: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(
            standin.url + path, json=body, headers={"authorization": f"Bearer {standin.token}"}, timeout=30
        )

    created = post("/v3/sandboxes", {"projectId": "p", "timeout": 60000}).json()
    session = created["session"]["id"]
    httpx.get(
        f"{standin.url}/v2/sandboxes/{created['sandbox']['name']}",
        headers={"authorization": f"Bearer {standin.token}"},
    )  # read until running

    def start(attach: bool, script: str) -> str:
        body = {"command": "bash", "args": ["-c", script], "attachStdin": attach}  # in the image's WORKDIR
        return str(post(f"/v2/sandboxes/sessions/{session}/cmd", body).json()["command"]["id"])

    def stdin(cmd: str, **body: Any) -> httpx.Response:
        if "data" in body:
            body["data"] = base64.b64encode(body["data"]).decode()
        return post(f"/v2/sandboxes/sessions/{session}/cmd/{cmd}/stdin", body)

    plain = start(False, "sleep 20")
    assert stdin(plain, data=b"x").json()["error"]["code"] == "command_stdin_unavailable"  # not attached: 400
    reader = start(True, "cat > /dev/null")
    assert stdin(reader, data=b"abc", offset=0).json()["bytesWritten"] == 3
    assert stdin(reader, data=b"abcdef", offset=0).json()["bytesWritten"] == 6  # a resend: "abc" skipped
    assert stdin(reader, data=b"x", offset=9).status_code == 409  # past what the command received
    assert stdin(reader).json()["bytesWritten"] == 6  # no data, no close: writes nothing, says how much
    assert stdin(reader, close=True, offset=6).status_code == 200
    assert stdin(reader, data=b"late", offset=6).status_code == 400  # closed
    stalled = start(True, "sleep 20")  # never reads: a pipe's worth is taken, then the write times out
    late = stdin(stalled, data=b"y" * 600_000, offset=0)  # 800 KB of base64: under the 1 MB body limit
    assert late.status_code == 504 and 0 < late.json()["error"]["bytesWritten"] < 600_000
    assert post(f"/v2/sandboxes/sessions/{session}/cmd/{stalled}/stdin", {"data": "A" * (1 << 20)}).status_code == 413
