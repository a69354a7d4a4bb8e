"""A fixed-seed fuzz of the MCP server's frame reader (``read_frame``): whatever a client sends, one line is
passed on as a message or answered, never dropped while the client waits, and never an exception.
"""

from __future__ import annotations

import json
import random
from typing import Any

import mcp_types as types
from mainsdk_mcp.server import read_frame

SEED = 2024
CASES = 3_000
VALUES: list[Any] = [None, True, False, 0, 1, -7, 1.5, 2**70, "", "x", "tools/list", "\ud800", [], [1], {}, {"a": 1}]


def _value(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.random()
    if depth < 3 and choice < 0.1:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if depth < 3 and choice < 0.2:
        return {rng.choice(["a", "_meta", "name"]): _value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return rng.choice(VALUES)


def _message(rng: random.Random) -> Any:
    message: dict[str, Any] = {}
    for key, good in (("jsonrpc", "2.0"), ("id", rng.randint(0, 9)), ("method", "tools/list"), ("params", {})):
        if rng.random() < 0.7:
            message[key] = good if rng.random() < 0.6 else _value(rng)
    if rng.random() < 0.1:
        message[rng.choice(["result", "error"])] = _value(rng)
    return message


def _line(rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.6:
        return json.dumps(_message(rng)).encode()
    if kind < 0.75:
        return json.dumps([_message(rng) for _ in range(rng.randint(0, 3))]).encode()
    text = bytearray(json.dumps(_message(rng)).encode())
    for _ in range(rng.randint(1, 3)):  # a byte changed, dropped or added
        at = rng.randrange(len(text) + 1)
        if rng.random() < 0.5 and at < len(text):
            text[at] = rng.randrange(256)
        else:
            text.insert(at, rng.randrange(256))
    return bytes(text.replace(b"\n", b" "))


def _answers(value: Any, message: Any, reply: Any) -> None:
    """Every request (something with a method and an id, or that is no valid message) gets an answer."""
    if isinstance(value, dict):
        is_response = "method" not in value and ("result" in value or "error" in value)
        if is_response:
            assert reply is None
            return
        is_notification = "id" not in value and message is not None
        if not is_notification:
            assert (message is None) != (reply is None), (value, message, reply)
        if isinstance(message, types.JSONRPCRequest):
            assert message.id == value["id"] and message.method == value["method"]


def test_every_line_is_passed_on_or_answered_never_an_exception() -> None:
    rng = random.Random(SEED)
    answered = passed = 0
    for _ in range(CASES):
        line = _line(rng)
        message, reply = read_frame(line)
        assert message is None or reply is None
        if reply is not None:
            answered += 1
            json.dumps(reply, ensure_ascii=False).encode()  # it can be written back
            for entry in reply if isinstance(reply, list) else [reply]:
                assert entry["jsonrpc"] == "2.0" and entry["error"]["code"] in (
                    types.PARSE_ERROR,
                    types.INVALID_REQUEST,
                )
                assert entry["id"] is None or isinstance(entry["id"], (str, int))
        if message is not None:
            passed += 1
        try:
            value = json.loads(line.decode("utf-8"))
        except ValueError:
            assert reply is not None and reply["error"]["code"] == types.PARSE_ERROR
            continue
        if isinstance(value, list):
            assert message is None
            requests = [v for v in value if not (isinstance(v, dict) and "id" not in v and "method" in v)]
            if not value or any("result" not in v and "error" not in v for v in requests if isinstance(v, dict)):
                assert reply is not None
            continue
        _answers(value, message, reply)
    assert answered > CASES // 2 and passed > CASES // 20  # the fuzz reaches both sides
