"""Output as it happens (issue 15): on_output sees a flushed line while the code still runs, redaction stays exact.

Real code in a real box. No timed assertion: a line's arrival is compared with
the arrival of a line the code prints two seconds later, a gap no scheduler
jitter closes, while output held to the end arrives together.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mainsdk import AsyncSandbox, Sandbox, secret
from mainsdk.errors import INVALID_OPTION

SECRET = "tok-9f8e7d6c5b4a3210"


def arrivals() -> tuple[list[tuple[float, str, bytes]], Callable[[str, bytes], None]]:
    seen: list[tuple[float, str, bytes]] = []

    def on_output(stream: str, data: bytes) -> None:
        seen.append((time.monotonic(), stream, data))

    return seen, on_output


def arrival_of(seen: list[tuple[float, str, bytes]], marker: bytes) -> float:
    """When the chunk that completed ``marker`` arrived."""
    text = b""
    for at, _stream, data in seen:
        text += data
        if marker in text:
            return at
    raise AssertionError(f"{marker!r} never arrived: {text!r}")


LATER_LINE = "import sys, time\nprint('first', flush=True)\ntime.sleep(2)\nprint('second', flush=True)\n"


def test_a_flushed_line_reaches_on_output_while_the_code_runs(sandbox: Sandbox) -> None:
    seen, on_output = arrivals()
    result = sandbox.run(LATER_LINE, on_output=on_output)
    assert result.stdout == "first\nsecond\n"
    assert arrival_of(seen, b"second") - arrival_of(seen, b"first") > 1.0


def test_a_line_is_live_even_with_secrets_to_redact(make_sandbox: Callable[..., Any]) -> None:
    built = make_sandbox(secret=lambda name: SECRET if name == "TEST_API_KEY" else None)
    seen, on_output = arrivals()
    result = built.sandbox.run(LATER_LINE, env={"K": secret("TEST_API_KEY")}, on_output=on_output)
    assert result.stdout == "first\nsecond\n"
    assert arrival_of(seen, b"second") - arrival_of(seen, b"first") > 1.0


def test_a_secret_written_in_two_halves_with_a_pause_is_redacted(make_sandbox: Callable[..., Any]) -> None:
    built = make_sandbox(secret=lambda name: SECRET if name == "TEST_API_KEY" else None)
    code = (
        "import os, sys, time\nk = os.environ['K']\n"
        "sys.stdout.write('key=' + k[:8]); sys.stdout.flush()\ntime.sleep(0.3)\n"
        "sys.stdout.write(k[8:] + ' done\\n'); sys.stdout.flush()\n"
        "sys.stderr.write(k[:5]); sys.stderr.flush(); time.sleep(0.3); sys.stderr.write(k[5:] + '\\n')\n"
    )
    seen, on_output = arrivals()
    result = built.sandbox.run(code, env={"K": secret("TEST_API_KEY")}, on_output=on_output)
    assert result.stdout == "key=[redacted:secret] done\n"
    assert result.stderr == "[redacted:secret]\n"
    streamed = b"".join(data for _at, stream, data in seen if stream == "stdout")
    assert streamed == b"key=[redacted:secret] done\n"
    # Not even the first half was released during the pause.
    assert not any(SECRET[:8].encode() in data or SECRET[:5].encode() in data for _at, _s, data in seen)


def test_a_key_format_split_with_a_pause_is_redacted(sandbox: Sandbox) -> None:
    code = (
        "import sys, time\nsys.stdout.write('token ghp_' + 'a' * 20); sys.stdout.flush()\n"
        "time.sleep(0.3)\nsys.stdout.write('b' * 20 + '\\n')\n"
    )
    seen, on_output = arrivals()
    result = sandbox.run(code, on_output=on_output)
    assert result.stdout == "token [redacted:secret]\n"
    assert b"".join(d for _a, _s, d in seen) == b"token [redacted:secret]\n"


def test_non_utf8_output_keeps_its_exact_bytes(sandbox: Sandbox) -> None:
    code = "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe caf\\xe9 \\x00 ok\\n'); sys.stderr.buffer.write(b'\\x80')"
    result = sandbox.run(code)
    assert result.stdout_bytes == b"\xff\xfe caf\xe9 \x00 ok\n"
    assert result.stderr_bytes == b"\x80"
    assert result.stdout == b"\xff\xfe caf\xe9 \x00 ok\n".decode("utf-8", "replace")
    assert "stdout_bytes" not in result.to_dict()  # the JSON form stays JSON


def test_output_bytes_are_redacted_and_cut_at_the_limit(make_sandbox: Callable[..., Any]) -> None:
    built = make_sandbox(secret=lambda name: SECRET if name == "TEST_API_KEY" else None)
    code = "import os, sys\nsys.stdout.buffer.write(b'\\xff' + os.environ['K'].encode() + b'\\n' + b'x' * 5000)"
    result = built.sandbox.run(code, env={"K": secret("TEST_API_KEY")}, limits={"output": "1KB"})
    assert result.stop == "output"
    assert result.stdout_bytes.startswith(b"\xff[redacted:secret]\nxxx")
    assert SECRET.encode() not in result.stdout_bytes


async def test_async_sandbox_and_sessions_stream_live(async_sandbox: AsyncSandbox) -> None:
    seen, on_output = arrivals()
    result = await async_sandbox.run(LATER_LINE, on_output=on_output)
    assert result.stdout == "first\nsecond\n"
    assert arrival_of(seen, b"second") - arrival_of(seen, b"first") > 1.0
    seen.clear()
    async with async_sandbox.create() as session:
        command = await session.run("python3", ["-c", LATER_LINE], on_output=on_output)
    assert command.stdout == "first\nsecond\n" and command.stdout_bytes == b"first\nsecond\n"
    assert arrival_of(seen, b"second") - arrival_of(seen, b"first") > 1.0


# A deadlock would block the shared loop thread for good, so these run in a child process with a time limit:
# a regression fails (TimeoutExpired) rather than hanging the rest of the tests.
DEADLOCK_PROBE = """
import sys
from mainsdk import Sandbox, SandboxDeps, SandboxError
from mainsdk.config import load_config
sandbox = Sandbox(SandboxDeps(config=load_config(sys.argv[1])))
def on_output(stream, data):
    try:
        CALL
    except SandboxError as exc:
        print("refused in callback:", exc.code, exc, flush=True)
        raise
try:
    sandbox.run("print('x')", on_output=on_output)
except SandboxError as exc:
    print("run raised:", exc.code, flush=True)
"""


@pytest.mark.parametrize(
    "call", ["sandbox.run('print(1)')", "sandbox.files.read('file_' + '0' * 32)", "sandbox.create()"]
)
def test_on_output_calling_the_sync_api_is_refused_not_a_deadlock(local_config: str, tmp_path: Path, call: str) -> None:
    config = tmp_path / "main.yaml"
    config.write_text(local_config)
    probe = DEADLOCK_PROBE.replace("CALL", call)
    output = tmp_path / "probe.out"
    with output.open("wb") as sink:
        # Its own process group, so a hung probe and the launcher it started are all killed.
        proc = subprocess.Popen(
            [sys.executable, "-c", probe, str(config)], stdout=sink, stderr=sink, start_new_session=True
        )
        try:
            returncode = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail("the run deadlocked: on_output called the sync API")
    text = output.read_text()
    assert returncode == 0, text
    first, second = text.splitlines()
    assert first.startswith(f"refused in callback: {INVALID_OPTION}")
    assert "on_output" in first and "async_sandbox" in first
    assert second == f"run raised: {INVALID_OPTION}"  # the callback's error ends the run, as any callback error
