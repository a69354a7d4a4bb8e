"""A command's live stdin (``Command.input``) on E2B: each chunk the app sends while it runs reaches it, then EOF.

The driver starts the command with envd's ``stdin: true`` and forwards each chunk with ``SendInput``, closing
with ``CloseStdin`` (e2b-dev/infra ``packages/envd/spec/process/process.proto``, ``internal/services/process/
input.go``). Replayed from ``cassettes/input/``, authored by ``authoring/packages.py`` from this module's own
scenario against ``fake_e2b.py``, where ``cat`` really ran and envd's rules hold: input to a process started
without stdin, or whose stdin is closed, is refused (``handler.go`` ``WriteStdin``).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from e2b_replay import KEY, key, provider
from mainsdk.driver import BoxSpec, Command, InputStream, RunLimits
from mainsdk_conformance.replay import ReplayServer

from mainsdk_e2b import e2b_sandbox_driver

CASSETTES = Path(__file__).parent / "cassettes" / "input"
LIMITS = RunLimits(timeout=30.0, memory=0, output=1 << 20, files=1 << 20, disk=0)


class Seen:
    """An output sink that keeps what came, and when each chunk came."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.err = bytearray()

    def stdout(self, data: bytes) -> None:
        self.out += data

    def stderr(self, data: bytes) -> None:
        self.err += data

    def host_refused(self, host: str) -> None:
        raise AssertionError(host)


async def _until(condition: Any, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def cat_reads_its_live_stdin(server: ReplayServer, key: str = KEY) -> dict[str, Any]:
    """A session's ``cat``, given its first bytes up front, then two chunks while it runs, then EOF."""

    async def scenario() -> dict[str, Any]:
        driver = e2b_sandbox_driver(api_key=key, api_url=server.url("api"), sandbox_url=server.url("sandbox"))
        spec = BoxSpec(id="ses_0123456789abcdef01234567", limits=LIMITS, idle=60.0, tenant="default", session=True)
        box = await driver.mainsdk_driver_start(spec)
        seen: dict[str, Any] = {}
        try:
            stream, sink = InputStream(), Seen()
            command = Command("cat", stdin=b"zero\n", timeout=20.0, input=stream)
            task = asyncio.ensure_future(driver.mainsdk_driver_exec(box, command, sink))
            # Each chunk is echoed back before the next is sent: it reached cat while cat ran.
            seen["given"] = await _until(lambda: sink.out == b"zero\n")
            stream.send(b"one\n")
            seen["one"] = await _until(lambda: sink.out == b"zero\none\n")
            stream.send(b"two\n")
            seen["two"] = await _until(lambda: sink.out == b"zero\none\ntwo\n")
            seen["running"] = not task.done()
            stream.close()
            outcome = await asyncio.wait_for(task, 15)
            seen["outcome"] = (outcome.exit_code, outcome.stop, bytes(sink.out), bytes(sink.err))
        finally:
            await driver.mainsdk_driver_stop(box)
        return seen

    return asyncio.run(scenario())


def test_a_session_command_receives_the_chunks_sent_while_it_runs() -> None:
    with provider("cat_reads_its_live_stdin", folder=CASSETTES) as server:
        seen = cat_reads_its_live_stdin(server, key())
    assert server.problems(final=True) == []
    assert seen["given"] and seen["one"] and seen["two"] and seen["running"]
    assert seen["outcome"] == (0, None, b"zero\none\ntwo\n", b"")  # EOF after close: cat ended by itself
    data = json.loads((CASSETTES / "cat_reads_its_live_stdin.json").read_text())
    paths = [i["request"]["path"] for i in data["interactions"]]
    starts = [i for i in data["interactions"] if i["request"]["path"] == "/process.Process/Start"]
    assert starts[0]["request"]["body"]["connect"][0]["json"]["stdin"] is True
    assert "exec 3<&0" in starts[0]["request"]["body"]["connect"][0]["json"]["process"]["args"][-1]
    # Start, then the given bytes and each chunk as one SendInput, then CloseStdin: no file upload for stdin.
    assert paths.count("/process.Process/SendInput") == 3 and paths.count("/process.Process/CloseStdin") == 1
    assert "/files" not in paths
