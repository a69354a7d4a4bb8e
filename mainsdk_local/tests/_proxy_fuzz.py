"""A fuzzer for the proxy's one-request-per-connection guarantee, shared by a test slice and a benchmark.

Requests are mutated from seeds (sound requests and known smuggling forms) with
a fixed seed, written raw from inside a real box to the proxy, and every byte
that reaches the upstream (a real loopback server) is checked: at most one
upstream connection per client connection, each carrying one unambiguous
request for the allowed host and nothing after it. ``benchmarks/proxy_fuzz.py``
runs many more cases than the test.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import h11
from _egress_origin import read_h11, read_llhttp

API = "api.example.test"
EVIL = "evil.example.test"

# What a mutation may insert: line ends of every kind, framing headers, a whole second request.
TOKENS = (
    b"\r\n",
    b"\n",
    b"\r",
    b" ",
    b"\t",
    b":",
    b",",
    b"0",
    b"5",
    b"a",
    b"\r\n\r\n",
    b"\x00",
    b"\xff",
    b"chunked",
    b"HTTP/1.0",
    b"Content-Length: 5\r\n",
    b"Content-Length: 0\r\n",
    b"Transfer-Encoding: chunked\r\n",
    b"Transfer-Encoding: identity\r\n",
    b"Host: " + EVIL.encode() + b"\r\n",
    b"Connection: keep-alive\r\n",
    b"Expect: 100-continue\r\n",
    b"GET /two HTTP/1.1\r\nHost: " + EVIL.encode() + b"\r\n\r\n",
    b"5\r\nhello\r\n0\r\n\r\n",
)


def seeds(port: int) -> list[bytes]:
    """Sound requests and the smuggling forms the proxy must refuse, for an upstream on ``port``."""
    url = f"http://{API}:{port}/one"
    host = f"Host: {API}:{port}\r\n"
    second = f"GET /two HTTP/1.1\r\nHost: {EVIL}\r\n\r\n"
    texts = [
        f"GET {url} HTTP/1.1\r\n{host}\r\n",
        f"GET {url} HTTP/1.0\r\n\r\n",
        f"POST {url} HTTP/1.1\r\n{host}Content-Length: 5\r\n\r\nhello",
        f"POST {url} HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        f"GET {url} HTTP/1.1\r\n{host}\r\n{second}",
        f"POST {url} HTTP/1.1\r\n{host}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{second}",
        f"POST {url} HTTP/1.1\r\n{host}Content-Length: 0\r\nContent-Length: {len(second)}\r\n\r\n{second}",
        f"GET {url} HTTP/1.1\r\n{host}X: 1\n\nGET /two HTTP/1.1\nHost: {EVIL}\n\r\n\r\n",
        f"GET {url} HTTP/1.1\r\n{host}X: 1\r\n Host: {EVIL}\r\n\r\n",
    ]
    return [t.encode("latin-1") for t in texts]


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One to three random edits: insert a token, delete a few bytes, repeat a line, or flip a letter's case."""
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(0, len(data))
        kind = rng.random()
        if kind < 0.5:
            data = data[:at] + rng.choice(TOKENS) + data[at:]
        elif kind < 0.7:
            data = data[:at] + data[at + rng.randint(1, 4) :]
        elif kind < 0.85:
            lines = data.split(b"\r\n")
            line = rng.randrange(len(lines))
            lines.insert(line, lines[line])
            data = b"\r\n".join(lines)
        elif data:
            at = min(at, len(data) - 1)
            data = data[:at] + data[at : at + 1].swapcase() + data[at + 1 :]
    return data


def cases(port: int, seed: int, count: int) -> list[bytes]:
    """``count`` requests: the seeds as they are, then mutations of them, from ``seed``."""
    rng = random.Random(seed)
    base = seeds(port)
    return (base + [mutate(rng, rng.choice(base)) for _ in range(count)])[: max(count, len(base))]


class RecordingUpstream:
    """A loopback server that answers 200 once ``answers(data)`` holds for what it read, and records every byte.

    ``idle``: how long a connection may stay quiet before it counts as done (whatever else came is recorded).
    """

    def __init__(self, answers: Callable[[bytes], bool], *, idle: float) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.port: int = self.listener.getsockname()[1]
        self.received: list[bytes] = []  # one entry per connection, complete once the connection is closed
        self._answers = answers
        self._idle = idle
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._record, args=(conn,), daemon=True).start()

    def _record(self, conn: socket.socket) -> None:
        data = b""
        answered = False
        conn.settimeout(self._idle)
        with conn:
            while True:
                try:
                    chunk = conn.recv(65536)
                except (TimeoutError, ConnectionResetError):  # a reset: the proxy cut the connection
                    break
                if not chunk:
                    break
                data += chunk
                if not answered and self._answers(data):
                    answered = True
                    with contextlib.suppress(OSError):
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        with self._lock:
            self.received.append(data)

    def wait_idle(self) -> list[bytes]:
        """What every connection received, once each has been quiet past ``idle`` and closed."""
        time.sleep(self._idle + 0.2)
        with self._lock:
            return list(self.received)

    def settled(self, connections: int, timeout: float = 10.0) -> list[bytes]:
        """What every connection received, once ``connections`` have ended (or ``timeout`` has passed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.received) >= connections:
                    break
            time.sleep(0.05)
        time.sleep(0.5)  # any connection still open past the count is a finding too
        with self._lock:
            return list(self.received)

    def close(self) -> None:
        self.listener.close()


def strict_upstream() -> RecordingUpstream:
    """An upstream that answers once it has read one whole request, by h11's reading."""
    return RecordingUpstream(_one_whole_request, idle=0.2)


def _one_whole_request(data: bytes) -> bool:
    parser = h11.Connection(h11.SERVER)
    parser.receive_data(data)
    try:
        while (event := parser.next_event()) is not h11.NEED_DATA:
            if isinstance(event, h11.EndOfMessage):
                return True
            if event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                return False
    except h11.RemoteProtocolError:
        return False
    return False


def violations(data: bytes, port: int) -> list[str]:
    """How ``data`` (what one upstream connection received) breaks one-unambiguous-request-per-connection."""
    found: list[str] = []
    end = data.find(b"\r\n\r\n")
    head = data[: end + 4] if end >= 0 else data
    if re.search(rb"(?<!\r)\n|\r(?!\n)", head):
        found.append("a bare LF or CR in the forwarded head")
    lines = head.split(b"\r\n")[1:]
    if any(line[:1] in (b" ", b"\t") for line in lines if line):
        found.append("an obsolete line fold in the forwarded head")
    names = [line.partition(b":")[0].strip().lower() for line in lines if line]
    if names.count(b"content-length") > 1 or (b"content-length" in names and b"transfer-encoding" in names):
        found.append("ambiguous body framing in the forwarded head")
    hosts = [line.partition(b":")[2].strip() for line in lines if line.partition(b":")[0].strip().lower() == b"host"]
    # The Host header names the allowed host (any case; any port, as every port of a given host is allowed).
    if [h.lower().rpartition(b":")[0] or h.lower() for h in hosts] != [API.encode()]:
        found.append(f"Host headers {hosts!r}")
    parser = h11.Connection(h11.SERVER)
    parser.receive_data(data)
    try:
        requests = 0
        while (event := parser.next_event()) is not h11.NEED_DATA:
            if isinstance(event, h11.Request):
                requests += 1
            elif event is h11.PAUSED:
                if parser.trailing_data[0]:
                    found.append(f"{len(parser.trailing_data[0])} bytes after the first request")
                break
            elif isinstance(event, h11.ConnectionClosed):
                break
    except h11.RemoteProtocolError as exc:
        found.append(f"a strict parser rejects what was forwarded ({exc})")
    if requests != 1:
        found.append(f"{requests} requests")
    # A second parser written apart from h11 (llhttp) reads the same request, framing and fields alike.
    first, second = read_h11(data), read_llhttp(data)
    if second.error:
        found.append(f"llhttp rejects what was forwarded ({second.error})")
    if first.messages != second.messages:
        found.append(f"h11 and llhttp read it apart: {first.messages!r} != {second.messages!r}")
    return found


# Python in the box: send each payload on its own connection (16 at a time), half-close, read the answer.
SENDER = r"""
import json, socket, sys
from concurrent.futures import ThreadPoolExecutor
def send(payload):
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
        s.sendall(payload.encode("latin-1"))
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
        s.close()
        return answer.decode("latin-1").split("\r\n")[0]
    except OSError as exc:
        return type(exc).__name__
with ThreadPoolExecutor(16) as pool:
    print(json.dumps(list(pool.map(send, json.loads(sys.argv[1])))))
"""


def fuzz_in_box(sandbox: Any, seed: int, count: int) -> tuple[list[str], dict[str, int], list[tuple[bytes, list[str]]]]:
    """Send ``count`` fuzzed requests from inside a box; (the answers' status lines, their tally, violations)."""
    upstream = strict_upstream()
    try:
        payloads = cases(upstream.port, seed, count)
        argv = json.dumps([p.decode("latin-1") for p in payloads])
        code = f"import sys; sys.argv[1:] = [{json.dumps(argv)}]\n{SENDER}"
        result = sandbox.run(code, network=[API], limits={"timeout": "20s"})
        assert result.exit_code == 0, result.stderr[-2000:]
        answers: list[str] = json.loads(result.stdout)
        received = upstream.settled(sum(a.startswith("HTTP/1.1 200") for a in answers))
    finally:
        upstream.close()
    tally: dict[str, int] = {}
    for answer in answers:
        status = " ".join(answer.split(" ")[:2]) if answer.startswith("HTTP/") else answer or "(closed)"
        tally[status] = tally.get(status, 0) + 1
    found = [(data, v) for data in received if (v := violations(data, upstream.port))]
    if len(received) > len(payloads):
        found.append((b"", [f"{len(received)} upstream connections for {len(payloads)} client connections"]))
    return answers, tally, found
