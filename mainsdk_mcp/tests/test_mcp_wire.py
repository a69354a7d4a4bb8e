"""``mainsdk sandbox mcp`` on the wire, as a raw JSON-RPC 2.0 client sees it: a real server process over stdio.

Every request gets an answer (issue 24): the SDK's reader dropped a line that is no JSON and a request that is
no valid one, and the client waited for ever. A notification never gets one.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CONFIG = "sandbox:\n  driver: local\n  limits: { timeout: 10s }\n"
WAIT = 20.0  # seconds a reply may take before the test says the server did not answer


class Wire:
    """The server's stdin and stdout, one JSON-RPC message a line."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self._buffer = b""

    def send(self, line: str | dict[str, Any] | list[Any]) -> None:
        text = line if isinstance(line, str) else json.dumps(line)
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode() + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float = WAIT) -> Any:
        """The next message from the server, or None if none came within ``timeout``."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def reply_to(self, ident: object, timeout: float = WAIT) -> Any:
        """The response with ``ident``, skipping notifications."""
        while True:
            message = self.receive(timeout)
            if message is None or ("method" not in message and message.get("id") == ident):
                return message


@pytest.fixture
def wire(app_dir: Callable[[str], Path]) -> Iterator[Wire]:
    app_dir(CONFIG)
    command = [sys.executable, "-m", "mainsdk_cli", "sandbox", "mcp", "--session"]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
        connection = Wire(proc)
        connection.send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
        )
        assert connection.reply_to(0)["result"]["serverInfo"]["name"] == "mainsdk-sandbox"
        connection.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield connection
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


INVALID = [
    pytest.param('{"jsonrpc": "2.0", "id": 2, "method": 5}', 2, id="method-a-number"),
    pytest.param('{"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": [1]}', 3, id="params-an-array"),
    pytest.param('{"jsonrpc": "2.0", "id": "s", "method": "tools/list", "params": "x"}', "s", id="params-a-string"),
    pytest.param('{"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": null}', 4, id="params-null"),
    pytest.param('{"jsonrpc": "1.0", "id": 5, "method": "tools/list"}', 5, id="wrong-version"),
    pytest.param('{"id": 6, "method": "tools/list"}', 6, id="no-version"),
    pytest.param('{"jsonrpc": "2.0", "id": 7}', 7, id="no-method"),
    pytest.param('{"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"}', None, id="id-an-object"),
    pytest.param('{"jsonrpc": "2.0", "id": true, "method": "tools/list"}', None, id="id-a-boolean"),
    pytest.param('{"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}', None, id="id-a-fraction"),
    pytest.param('{"jsonrpc": "2.0", "id": null, "method": "tools/list"}', None, id="id-null"),
    pytest.param('{"jsonrpc": "2.0", "method": 1, "params": "bar"}', None, id="spec-example-no-id"),
    pytest.param("5", None, id="a-number"),
    pytest.param('"x"', None, id="a-string"),
    pytest.param("[]", None, id="empty-batch"),
    # An escaped lone surrogate is JSON but no Unicode text: echoed back, it ended the server.
    pytest.param('{"jsonrpc": "2.0", "id": "\\ud800", "method": "tools/list"}', None, id="id-a-lone-surrogate"),
    pytest.param(
        '{"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "code_run", "arguments": '
        '{"code": "1", "files": {"\\udcff": "x"}}}}',
        8,
        id="a-lone-surrogate-in-params",
    ),
]


@pytest.mark.parametrize(("line", "ident"), INVALID)
def test_an_invalid_request_is_answered_32600_and_the_server_goes_on(wire: Wire, line: str, ident: object) -> None:
    wire.send(line)
    reply = wire.receive()
    assert reply is not None, "no answer: the client would wait for ever"
    assert (reply["jsonrpc"], reply["id"], reply["error"]["code"]) == ("2.0", ident, -32600), reply
    assert reply["error"]["message"].startswith("Invalid Request")
    wire.send({"jsonrpc": "2.0", "id": 99, "method": "tools/list"})
    assert [tool["name"] for tool in wire.reply_to(99)["result"]["tools"]] == ["code_run", "run_code"]


@pytest.mark.parametrize(
    "line",
    [
        "{not json",
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"',
        "\xff\xfe",
        "nul",
        "[" * 100_000 + "]" * 100_000,
    ],
    ids=["not-json", "cut-short", "latin", "nul", "nested-too-deeply"],
)
def test_a_line_that_is_no_json_is_answered_32700_with_id_null(wire: Wire, line: str) -> None:
    wire.send(line)
    reply = wire.receive()
    assert reply is not None and (reply["id"], reply["error"]["code"]) == (None, -32700), reply


def test_a_line_of_bytes_that_are_no_utf8_is_a_parse_error(wire: Wire) -> None:
    assert wire.proc.stdin is not None
    wire.proc.stdin.write(b'{"jsonrpc": "2.0", "id": 1, "method": "\xff"}\n')
    wire.proc.stdin.flush()
    reply = wire.receive()
    assert reply is not None and (reply["id"], reply["error"]["code"]) == (None, -32700), reply


def test_a_batch_gets_one_answer_per_request_in_an_array_and_none_for_notifications(wire: Wire) -> None:
    wire.send(
        [
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}},
            1,
            {"jsonrpc": "2.0", "id": 2, "method": 3},
        ]
    )
    reply = wire.receive()
    assert isinstance(reply, list), reply
    assert [(entry["id"], entry["error"]["code"]) for entry in reply] == [(1, -32600), (None, -32600), (2, -32600)]
    wire.send([{"jsonrpc": "2.0", "method": "notifications/initialized"}])  # all notifications: no answer
    assert wire.receive(timeout=1.0) is None


def test_an_invalid_notification_with_a_valid_method_is_not_answered(wire: Wire) -> None:
    # A notification of a method that does not exist is valid JSON-RPC: no answer (section 4.1).
    wire.send({"jsonrpc": "2.0", "method": "notifications/nothing-such"})
    assert wire.receive(timeout=1.0) is None
    wire.send({"jsonrpc": "2.0", "id": 5, "method": "nothing/such"})
    assert wire.reply_to(5)["error"]["code"] == -32601


def test_the_output_comes_live_as_progress_messages_naming_their_stream(wire: Wire) -> None:
    code = "import sys, time\nprint('one', flush=True)\ntime.sleep(1.5)\nprint('two', file=sys.stderr, flush=True)"
    wire.send(
        {
            "jsonrpc": "2.0",
            "id": 10,
            "method": "tools/call",
            "params": {"name": "code_run", "arguments": {"code": code}, "_meta": {"progressToken": "p"}},
        }
    )
    progress: list[dict[str, Any]] = []
    while True:
        message = wire.receive()
        assert message is not None
        if message.get("method") == "notifications/progress":
            progress.append(message["params"])
            continue
        assert message.get("method") != "notifications/message"  # the deprecated logging channel (SEP-2577)
        assert message["id"] == 10 and not message["result"].get("isError"), message
        break
    assert all(entry["progressToken"] == "p" for entry in progress)
    values = [entry["progress"] for entry in progress]
    assert values == sorted(values) and len(set(values)) == len(values)  # it grows with each notification
    output = [(entry["_meta"]["mainsdk/stream"], entry["message"]) for entry in progress if "_meta" in entry]
    assert output == [("stdout", "one\n"), ("stderr", "two\n")]
    first_output = next(i for i, entry in enumerate(progress) if "_meta" in entry)
    ticks_after = [entry for entry in progress[first_output:] if "_meta" not in entry]
    assert ticks_after, "the first line came while the code still ran, before a later tick"


def test_the_server_no_longer_offers_the_deprecated_logging_capability(wire: Wire) -> None:
    wire.send({"jsonrpc": "2.0", "id": 11, "method": "logging/setLevel", "params": {"level": "info"}})
    assert wire.reply_to(11)["error"]["code"] == -32601
