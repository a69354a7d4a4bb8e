"""The cell stream parser: a cell's output and its end frame, however the driver cuts the stream into chunks."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from mainsdk.cells import _KernelStream
from mainsdk.limits import OutputCollector

TOKEN = "0123456789abcdef0123456789abcdef"
MARK = f"\x1e{TOKEN}:".encode()
END = f"\x1e{TOKEN}:end\n".encode()


def _chunks(data: bytes, rng: random.Random) -> list[bytes]:
    out, at = [], 0
    while at < len(data):
        size = rng.choice([1, 2, 3, len(MARK) - 1, len(MARK), 64, 4096])
        out.append(data[at : at + size])
        at += size
    return out


@pytest.mark.parametrize("seed", range(40))
def test_output_and_frames_survive_any_chunking(seed: int) -> None:
    async def check() -> None:
        rng = random.Random(seed)
        # Output that looks like frames (another token, a bare \x1e, a partial mark) is output. (The real mark
        # itself cannot be in it: the cell does not know the token.)
        noise = [b"plain\n", b"\x1e", MARK[:-1], b"\x1e" + b"f" * 32 + b":{}\n", "é".encode()]
        stdout = b"".join(rng.choice(noise) for _ in range(rng.randint(0, 30)))
        stderr = b"".join(rng.choice([*noise, MARK, END[:-2]]) for _ in range(rng.randint(0, 30)))
        frame = {"cell": 1, "results": [{"mime": "text/plain", "data": "x" * rng.randint(0, 5000)}]}
        stream = _KernelStream(MARK, END, 1 << 20)
        collector = OutputCollector(1 << 20, [])
        stream.begin(collector)
        out_bytes = stdout + MARK + json.dumps(frame).encode() + b"\n"
        err_bytes = stderr + END
        out_chunks, err_chunks = _chunks(out_bytes, rng), _chunks(err_bytes, rng)
        while out_chunks or err_chunks:  # interleaved, as two pipes arrive
            if out_chunks and (not err_chunks or rng.random() < 0.5):
                stream.stdout(out_chunks.pop(0))
            else:
                stream.stderr(err_chunks.pop(0))
        assert stream.frame_ready and stream.err_ready
        assert json.loads(stream.frames[-1]) == frame
        assert collector.finish() == (stdout.decode(), stderr.decode())

    asyncio.run(check())


def test_a_frame_past_its_bound_is_flagged_not_kept() -> None:
    async def check() -> None:
        stream = _KernelStream(MARK, END, 1000)
        stream.begin(OutputCollector(1 << 20, []))
        stream.stdout(MARK + b"x" * 600)
        stream.stdout(b"x" * 600)
        assert stream.frame_too_large and not stream.frame_ready

    asyncio.run(check())


def test_output_is_released_at_once_but_for_a_tail_that_could_start_the_mark() -> None:
    async def check() -> None:
        seen: list[tuple[str, bytes]] = []
        stream = _KernelStream(MARK, END, 1 << 20)
        stream.begin(OutputCollector(1 << 20, [], lambda name, data: seen.append((name, data))))
        stream.stdout(b"one\n")  # a short print reaches the app while the cell runs
        stream.stderr(b"err\n")
        assert seen == [("stdout", b"one\n"), ("stderr", b"err\n")]
        stream.stdout(b"two\x1e" + TOKEN[:5].encode())  # could be the mark: only that tail waits
        stream.stderr(b"\x1e" + TOKEN[:3].encode() + b"!")  # could not: all of it goes
        assert seen[2:] == [("stdout", b"two"), ("stderr", b"\x1e" + TOKEN[:3].encode() + b"!")]
        stream.stdout(b"x")  # the next chunk tells: it was output
        assert seen[4:] == [("stdout", b"\x1e" + TOKEN[:5].encode() + b"x")]

    asyncio.run(check())


@pytest.mark.parametrize("seed", range(20))
def test_live_display_frames_are_handed_over_as_they_come_and_never_end_the_cell(seed: int) -> None:
    async def check() -> None:
        rng = random.Random(seed)
        displays = [
            {"cell": 1, "display": n, "results": [{"mime": "text/plain", "data": f"'{n}'", "encoding": "utf-8"}]}
            for n in range(3)
        ]
        end = {"cell": 1, "results": [], "error": None, "stop": None, "code_sha256": "0" * 64}
        stream = _KernelStream(MARK, END, 1 << 20)
        collector = OutputCollector(1 << 20, [])
        seen: list[dict[str, object]] = []
        stream.on_display = seen.append
        stream.begin(collector)
        out = b"".join(b"out\n" + MARK + json.dumps(d).encode() + b"\n" for d in displays)
        for chunk in _chunks(out, rng):
            stream.stdout(chunk)
        assert (seen, stream.frame_ready, stream.frames) == (displays, False, [])  # a tuple: mypy narrows no flag
        # A display-shaped frame carrying the end frame's hash is the end frame, never a display.
        for chunk in _chunks(MARK + json.dumps({**end, "display": 9}).encode() + b"\n", rng):
            stream.stdout(chunk)
        assert stream.frame_ready and len(seen) == 3
        assert collector.finish()[0] == "out\n" * 3

    asyncio.run(check())
