"""A live stdin (``Command.input``) on the local driver: the app's chunks reach the running command, in order."""

from __future__ import annotations

import asyncio
import hashlib

from mainsdk import AsyncSandbox
from mainsdk.driver import Command, InputStream

ECHO = "import sys\nfor line in sys.stdin:\n    print('got', line.strip(), flush=True)\nprint('eof')"


class Sink:
    """The command's output as it comes."""

    def __init__(self) -> None:
        self.out = b""
        self.err = b""

    def stdout(self, data: bytes) -> None:
        self.out += data

    def stderr(self, data: bytes) -> None:
        self.err += data

    def host_refused(self, host: str) -> None:
        raise AssertionError(host)


async def _seen(sink: Sink, needle: bytes, seconds: float = 20.0) -> None:
    end = asyncio.get_running_loop().time() + seconds
    while needle not in sink.out:
        assert asyncio.get_running_loop().time() < end, f"{needle!r} never came"
        await asyncio.sleep(0.005)


async def test_chunks_sent_while_the_command_runs_arrive_in_order_and_closing_ends_it(
    async_sandbox: AsyncSandbox,
) -> None:
    async with async_sandbox.create() as session:
        stream, sink = InputStream(), Sink()
        command = Command("python3", ("-c", ECHO), stdin=b"first\n", input=stream, timeout=30)
        task = asyncio.ensure_future(
            session._runtime.lifecycle.exec_unlimited(session._runtime.opened.box, command, sink)
        )
        await _seen(sink, b"got first\n")  # the initial stdin comes first
        for word in ("a", "b", "c"):
            stream.send(word.encode() + b"\n")
            await _seen(sink, f"got {word}\n".encode())  # answered while it runs
            assert not task.done()
        stream.close()
        outcome = await asyncio.wait_for(task, 20)
        assert outcome.exit_code == 0 and sink.out == b"got first\ngot a\ngot b\ngot c\neof\n"


async def test_a_chunk_larger_than_a_pipe_arrives_whole(async_sandbox: AsyncSandbox) -> None:
    data = bytes(range(256)) * 8192  # 2 MiB: the client waits for room in the pipe many times
    code = "import sys, hashlib\nprint(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())"
    async with async_sandbox.create() as session:
        stream, sink = InputStream(), Sink()
        command = Command("python3", ("-c", code), input=stream, timeout=30)
        task = asyncio.ensure_future(
            session._runtime.lifecycle.exec_unlimited(session._runtime.opened.box, command, sink)
        )
        stream.send(data[:1000])
        stream.send(data[1000:])
        stream.close()
        outcome = await asyncio.wait_for(task, 20)
        assert outcome.exit_code == 0 and sink.out.decode().strip() == hashlib.sha256(data).hexdigest()


async def test_a_command_that_ends_without_reading_drops_what_comes_after(async_sandbox: AsyncSandbox) -> None:
    async with async_sandbox.create() as session:
        stream, sink = InputStream(), Sink()
        command = Command("python3", ("-c", "print('bye')"), input=stream, timeout=30)
        outcome = await session._runtime.lifecycle.exec_unlimited(session._runtime.opened.box, command, sink)
        stream.send(b"nobody reads this\n")  # dropped, no error
        stream.close()
        assert outcome.exit_code == 0 and sink.out == b"bye\n"
        assert (await session.run("python3", ["-c", "print(2)"])).stdout == "2\n"  # the session goes on
