"""An HTTPS origin on loopback that records every byte the proxy sends it, and two independent readings of them.

``RecordingOrigin`` answers requests as it frames them: by h11 (``frames="h11"``), or by ``Content-Length``
alone, as a lenient origin or a load balancer in front of one does (``frames="content-length"``: a
``Transfer-Encoding`` is ignored), echoing the body of a request that names ``other.example.test`` (a
co-hosted echo service). ``readings`` reads what one connection received with h11 and with llhttp (the
``httptools`` package: Node's parser, written apart from h11), for the tests and the differential fuzz
(``_egress_fuzz.py``, ``benchmarks/proxy_fuzz.py``) to compare.
"""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import threading
import time
from typing import Literal

import attrs
import h11
import httptools
from loopback import DATA

OTHER = "other.example.test"


@attrs.frozen
class Parsed:
    """A request as the origin framed it by Content-Length alone."""

    host: str
    target: str
    body: bytes


class RecordingOrigin:
    """A TLS server on 127.0.0.1 (the test CA's certificate) recording each connection's bytes and SNI name."""

    def __init__(self, frames: Literal["h11", "content-length"] = "h11", *, idle: float = 5.0) -> None:
        self.frames = frames
        self.received: list[tuple[str | None, bytes]] = []  # (SNI name, every byte), once the connection ends
        self.parsed: list[Parsed] = []  # content-length mode: each request as framed
        self._idle = idle
        self._lock = threading.Lock()
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(DATA / "example-test.crt", DATA / "example-test.key")
        self._names: dict[int, str] = {}
        self._context.sni_callback = self._sni
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.port: int = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _sni(self, sock: ssl.SSLObject | ssl.SSLSocket, name: str | None, _: ssl.SSLContext) -> None:
        if name is not None:
            self._names[id(sock)] = name

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, raw: socket.socket) -> None:
        data = bytearray()
        name: str | None = None
        try:
            raw.settimeout(self._idle)
            with self._context.wrap_socket(raw, server_side=True) as conn:
                name = self._names.pop(id(conn), None)
                if self.frames == "h11":
                    self._h11(conn, data)
                else:
                    self._by_length(conn, data)
        except (OSError, ssl.SSLError):
            pass
        finally:
            raw.close()
            with self._lock:
                self.received.append((name, bytes(data)))

    def _recv(self, conn: ssl.SSLSocket, data: bytearray) -> bytes:
        try:
            chunk = conn.recv(65536)
        except (TimeoutError, ConnectionResetError, ssl.SSLError):
            return b""
        data += chunk
        return chunk

    def _h11(self, conn: ssl.SSLSocket, data: bytearray) -> None:
        parser = h11.Connection(h11.SERVER)
        method = b""
        while True:
            try:
                event = parser.next_event()
            except h11.RemoteProtocolError:
                while self._recv(conn, data):  # not answered; whatever else comes is recorded
                    pass
                return
            if event is h11.NEED_DATA:
                chunk = self._recv(conn, data)
                if not chunk:
                    return
                parser.receive_data(chunk)
            elif isinstance(event, h11.Request):
                method = event.method
            elif isinstance(event, h11.EndOfMessage):
                try:
                    ok = h11.Response(status_code=200, headers=[(b"Content-Length", b"2")], reason=b"OK")
                    answer = parser.send(ok) or b""
                    if method != b"HEAD":  # (a HEAD's answer has no body)
                        answer += parser.send(h11.Data(data=b"ok")) or b""
                    answer += parser.send(h11.EndOfMessage()) or b""
                except h11.LocalProtocolError:  # a blind tunnel's CONNECT or Upgrade: not answered
                    answer = b""
                conn.sendall(answer)
                if parser.our_state is not h11.DONE:
                    while self._recv(conn, data):
                        pass
                    return
                parser.start_next_cycle()
            elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return

    def _by_length(self, conn: ssl.SSLSocket, data: bytearray) -> None:
        at = 0
        while True:
            end = data.find(b"\r\n\r\n", at)
            while end < 0:
                if not self._recv(conn, data):
                    return
                end = data.find(b"\r\n\r\n", at)
            lines = bytes(data[at:end]).split(b"\r\n")
            fields = [line.partition(b":") for line in lines[1:]]
            host = next((v.strip().decode("latin-1") for n, _, v in fields if n.strip().lower() == b"host"), "")
            lengths = [v.strip() for n, _, v in fields if n.strip().lower() == b"content-length"]
            length = int(lengths[0]) if lengths and lengths[0].isdigit() else 0
            while len(data) < end + 4 + length:
                if not self._recv(conn, data):
                    return
            body = bytes(data[end + 4 : end + 4 + length])
            at = end + 4 + length
            target = lines[0].split(b" ")[1].decode("latin-1") if lines[0].count(b" ") == 2 else ""
            with self._lock:
                self.parsed.append(Parsed(host, target, body))
            answer = body if host.split(":")[0] == OTHER else b"ok"
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(answer), answer))

    def settled(self, connections: int, timeout: float = 20.0) -> list[tuple[str | None, bytes]]:
        """Every connection's (SNI, bytes), once ``connections`` have ended (or ``timeout`` has passed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.received) >= connections:
                    break
            time.sleep(0.05)
        time.sleep(0.3)
        with self._lock:
            return list(self.received)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.close()


@attrs.frozen
class Message:
    """One request as a parser read it: its line, its fields (names lowercase), its body, whether it ended."""

    method: bytes
    target: bytes
    version: bytes
    fields: tuple[tuple[bytes, bytes], ...]
    body: bytes
    complete: bool

    def values(self, name: bytes) -> list[bytes]:
        """The values of the fields named ``name`` (lowercase)."""
        return [value for field, value in self.fields if field == name]


@attrs.frozen
class Reading:
    """What one parser made of a connection's bytes: its requests, a head left unfinished, or its error."""

    messages: tuple[Message, ...]
    partial_head: bool = False
    error: str | None = None


def read_h11(data: bytes) -> Reading:
    """``data`` read by h11 as a server reads it, request after request (each answered, so the next is read)."""
    parser = h11.Connection(h11.SERVER)
    if data:  # (h11 takes b"" as the end of the stream)
        parser.receive_data(data)
    messages: list[Message] = []
    current: dict[str, bytes] | None = None
    fields: tuple[tuple[bytes, bytes], ...] = ()
    try:
        while True:
            event = parser.next_event()
            if isinstance(event, h11.Request):
                current = {"method": event.method, "target": event.target, "version": event.http_version}
                current["body"] = b""
                fields = tuple((bytes(n), bytes(v)) for n, v in event.headers)
            elif isinstance(event, h11.Data) and current is not None:
                current["body"] += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage) and current is not None:
                messages.append(_message(current, fields, complete=True))
                current = None
                parser.send(h11.Response(status_code=200, headers=[(b"Content-Length", b"0")]))
                parser.send(h11.EndOfMessage())
                if parser.our_state is not h11.DONE:  # the request asked to close: nothing may follow it
                    rest = parser.trailing_data[0]
                    return Reading(
                        tuple(messages), error=f"{len(rest)} bytes after a closing request" if rest else None
                    )
                parser.start_next_cycle()
            elif event is h11.NEED_DATA:
                if current is not None:
                    messages.append(_message(current, fields, complete=False))
                return Reading(tuple(messages), partial_head=current is None and bool(parser.trailing_data[0]))
            else:
                return Reading(tuple(messages), error=f"unexpected {event!r}")
    except h11.RemoteProtocolError as exc:
        return Reading(tuple(messages), error=f"h11: {exc}")


def read_llhttp(data: bytes) -> Reading:
    """``data`` read by llhttp (through ``httptools``), with none of its leniencies."""
    reader = _LlhttpReader()
    parser = httptools.HttpRequestParser(reader)
    reader.parser = parser
    try:
        if data:
            parser.feed_data(data)
    except httptools.HttpParserUpgrade:
        return Reading(tuple(reader.messages), error="llhttp: an upgrade")
    except httptools.HttpParserError as exc:
        return Reading(tuple(reader.messages), error=f"llhttp: {exc}")
    messages = list(reader.messages)
    partial = False
    if reader.current is not None:
        if reader.head_done:
            messages.append(_message(reader.current, tuple(reader.fields), complete=False))
        else:
            partial = True
    return Reading(tuple(messages), partial_head=partial)


class _LlhttpReader:
    """httptools' callbacks, gathering each request."""

    def __init__(self) -> None:
        self.parser: httptools.HttpRequestParser | None = None
        self.messages: list[Message] = []
        self.current: dict[str, bytes] | None = None
        self.fields: list[tuple[bytes, bytes]] = []
        self.head_done = False

    def on_message_begin(self) -> None:
        self.current = {"method": b"", "target": b"", "version": b"", "body": b""}
        self.fields = []
        self.head_done = False

    def on_url(self, url: bytes) -> None:
        assert self.current is not None
        self.current["target"] += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        assert self.current is not None and self.parser is not None
        self.current["method"] = self.parser.get_method()
        self.current["version"] = self.parser.get_http_version().encode()
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        assert self.current is not None
        self.current["body"] += body

    def on_message_complete(self) -> None:
        assert self.current is not None
        self.messages.append(_message(self.current, tuple(self.fields), complete=True))
        self.current = None


def _message(current: dict[str, bytes], fields: tuple[tuple[bytes, bytes], ...], *, complete: bool) -> Message:
    return Message(current["method"], current["target"], current["version"], fields, current["body"], complete)


def disagreements(data: bytes, host: str, key: str) -> list[str]:
    """How what one upstream connection of ``host``'s tunnel received breaks the proxy's guarantee.

    h11 and llhttp must each read it without error, and read the same requests: the same line, fields,
    body boundaries (what each body is, and whether it ended). Each request names ``host`` in its one Host
    and carries the egress header ``X-Api-Key`` once, the app's ``key``; the key is nowhere else in the
    bytes (not in a body, where an origin could hand it to another request).
    """
    found: list[str] = []
    first, second = read_h11(data), read_llhttp(data)
    for reading in (first, second):
        if reading.error:
            found.append(f"a parser rejects what was forwarded ({reading.error})")
        if reading.partial_head:
            found.append("an unfinished head was forwarded")
    if first.messages != second.messages:
        found.append(f"h11 and llhttp read it apart: {first.messages!r} != {second.messages!r}")
    for message in first.messages:
        hosts = [value.decode("latin-1").lower() for value in message.values(b"host")]
        if len(hosts) != 1 or not re.fullmatch(re.escape(host) + r"(:[0-9]{1,5})?", hosts[0]):
            found.append(f"Host {hosts!r} on {host}'s tunnel")
        if message.values(b"x-api-key") != [key.encode()]:
            found.append(f"X-Api-Key {message.values(b'x-api-key')!r}")
    if data.count(key.encode()) != len(first.messages):
        found.append(f"the key {data.count(key.encode())} times in {len(first.messages)} requests")
    return found
