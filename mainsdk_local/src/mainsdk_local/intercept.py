"""One intercepted CONNECT: TLS ends at the proxy, each request is read with h11 and sent on with the egress headers.

Used by ``egress_proxy`` for the hosts of ``BoxSpec.egress`` alone (every other host is a blind tunnel). The
upstream connection is already open over TLS, its certificate checked against the system's trust for the
host's name (``egress_tls.upstream_context``), before the code hears ``200``. Then:

- the code's TLS handshake is answered with the box CA's leaf for the host (ALPN: ``http/1.1`` only, so a
  client that asks for h2 falls back);
- each request on the connection (keep-alive holds) must name the host in its ``Host`` (421 otherwise: a
  connection to one host never carries a request to another); its hop-by-hop headers are dropped, and every
  header named by the egress rule is removed, whatever its case, and set once to the rule's value (replaced,
  never merged);
- the request and its response are re-framed by h11 on both sides, so what the server reads is exactly what
  h11 read; a redirect is passed back to the code, never followed here: a request to another host is a new
  CONNECT, judged by its own host.

The values are never logged, never in an error: a failure ends the connection and is logged by type only.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Sequence

import h11

from mainsdk_local.egress_tls import BoxAuthority

MAX_HEAD = 64 * 1024
CHUNK = 64 * 1024
HANDSHAKE_TIMEOUT = 30.0
# Hop-by-hop (RFC 9110 7.6.1) and the proxy's own; h11 frames the body itself (Content-Length/Transfer-Encoding
# are kept for it to read, and it writes them as it sends).
_HOP_BY_HOP = {b"connection", b"keep-alive", b"proxy-authorization", b"proxy-connection", b"te", b"upgrade", b"trailer"}

_REASONS = {400: b"Bad Request", 421: b"Misdirected Request"}


class _Misdirected(Exception):
    """A request on this connection for another host, or in a form the proxy does not forward."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(body)
        self.status = status
        self.body = body


async def intercept(
    authority: BoxAuthority,
    host: str,
    headers: Sequence[tuple[str, str]],
    rest: bytes,
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    upstream_reader: asyncio.StreamReader,
    upstream_writer: asyncio.StreamWriter,
) -> None:
    """Serve one intercepted CONNECT to ``host`` until either side closes."""
    if rest:
        # The TLS handshake began before the 200: the bytes are the client's, read by the plain stream.
        body = b"send the TLS handshake after the proxy's 200 Connection established\n"
        client_writer.write(
            b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
        )
        return
    # The client's handshake follows the 200 at once: no byte of it may reach the plain stream, which would
    # keep it from the TLS layer (with reading left on, a handshake that came during an await here hung).
    plain = client_writer.transport
    if isinstance(plain, asyncio.ReadTransport):
        plain.pause_reading()
    # The host's leaf is made on its first connection (a few ms of signing): off the loop, which serves other runs.
    context = await asyncio.to_thread(authority.server_context, host)
    client_writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    await client_writer.drain()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_HEAD)
    protocol = asyncio.StreamReaderProtocol(reader)
    try:
        transport = await asyncio.wait_for(
            loop.start_tls(client_writer.transport, protocol, context, server_side=True), HANDSHAKE_TIMEOUT
        )
    except (ssl.SSLError, ConnectionError, OSError, TimeoutError):
        return  # the code did not trust the box's CA, or left: nothing was sent upstream
    if transport is None:
        return
    protocol.connection_made(transport)
    writer = asyncio.StreamWriter(transport, protocol, reader, loop)
    injected = tuple((name.encode("ascii"), value.encode("ascii")) for name, value in headers)
    await _serve(host, injected, reader, writer, upstream_reader, upstream_writer)


async def _serve(
    host: str,
    injected: tuple[tuple[bytes, bytes], ...],
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    upstream_reader: asyncio.StreamReader,
    upstream_writer: asyncio.StreamWriter,
) -> None:
    client = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    server = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    names = {name.lower() for name, _ in injected}
    try:
        while True:
            event = await _next(client, reader)
            if not isinstance(event, h11.Request):
                return  # closed, or not a request
            try:
                request = _rewrite(event, host, injected, names)
            except _Misdirected as refusal:
                await _answer(client, writer, refusal.status, refusal.body)
                return
            head = server.send(request) or b""
            first = client.next_event()
            if isinstance(first, h11.EndOfMessage):  # no body (a GET): one write, no task
                upstream_writer.write(head + (server.send(h11.EndOfMessage()) or b""))
                keep = await _response(server, upstream_reader, client, writer)
            else:
                upstream_writer.write(head)
                sending = asyncio.ensure_future(_request_body(client, reader, server, upstream_writer, first))
                try:
                    keep = await _response(server, upstream_reader, client, writer)
                    await sending
                finally:
                    sending.cancel()
            if not keep or client.our_state is not h11.DONE or client.their_state is not h11.DONE:
                return
            if server.our_state is not h11.DONE or server.their_state is not h11.DONE:
                return
            client.start_next_cycle()
            server.start_next_cycle()
    except (h11.ProtocolError, ConnectionError, OSError, ssl.SSLError, asyncio.IncompleteReadError):
        return
    finally:
        with contextlib.suppress(Exception):
            writer.transport.abort()


async def _next(connection: h11.Connection, reader: asyncio.StreamReader) -> object:
    """The next h11 event of ``connection``, reading from ``reader`` as it needs."""
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(await reader.read(CHUNK))
            continue
        return event


def _rewrite(
    request: h11.Request, host: str, injected: tuple[tuple[bytes, bytes], ...], names: set[bytes]
) -> h11.Request:
    """The request sent on: for ``host`` only, hop-by-hop headers dropped, the rule's headers replaced."""
    target = request.target
    if target.startswith((b"http://", b"https://")):  # absolute form inside the tunnel: must be the same host
        authority = target.split(b"/", 3)[2]
        target = b"/" + (target.split(b"/", 3)[3] if target.count(b"/") >= 3 else b"")
        if _host_of(authority) != host:
            raise _Misdirected(421, f"this connection is for {host}; open another for that host")
    elif not target.startswith(b"/") and target != b"*":
        raise _Misdirected(400, "a request inside a tunnel names a path, like /v1/weather")
    if request.method == b"CONNECT":
        raise _Misdirected(400, "CONNECT inside a tunnel is not forwarded")
    raw = request.headers.raw_items()
    named_hosts = [value for name, value in raw if name.lower() == b"host"]
    if any(_host_of(value) != host for value in named_hosts):
        raise _Misdirected(421, f"this connection is for {host}: its requests name that host")
    dropped = {
        token.strip().lower() for name, value in raw if name.lower() == b"connection" for token in value.split(b",")
    }
    kept = [
        (name, value)
        for name, value in raw
        if name.lower() not in _HOP_BY_HOP and name.lower() not in dropped and name.lower() not in names
    ]
    if not named_hosts:
        kept.insert(0, (b"Host", host.encode("ascii")))
    return h11.Request(method=request.method, target=target, headers=[*kept, *injected], http_version="1.1")


def _host_of(authority: bytes) -> str:
    """The host of ``host[:port]``, lowercase, without a trailing dot."""
    text = authority.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text[1 : text.find("]")]
    return text.rsplit(":", 1)[0].rstrip(".") if text.count(":") == 1 else text.rstrip(".")


async def _request_body(
    client: h11.Connection,
    reader: asyncio.StreamReader,
    server: h11.Connection,
    upstream: asyncio.StreamWriter,
    first: object,
) -> None:
    """The request's body, from the code to the server, re-framed by h11 (``first``: the event already taken)."""
    event = first
    while True:
        if event is h11.NEED_DATA:
            event = await _next(client, reader)
        if isinstance(event, h11.Data):
            upstream.write(server.send(h11.Data(data=bytes(event.data))) or b"")
            await upstream.drain()
        elif isinstance(event, h11.EndOfMessage):
            upstream.write(server.send(h11.EndOfMessage()) or b"")
            await upstream.drain()
            return
        else:
            raise ConnectionError("the client left before its request's end")
        event = await _next(client, reader)


async def _response(
    server: h11.Connection, upstream_reader: asyncio.StreamReader, client: h11.Connection, writer: asyncio.StreamWriter
) -> bool:
    """The server's answer, back to the code as it comes; whether the connection may carry another request."""
    keep = True
    pending = bytearray()  # the head and small data go out as one write (one TLS record), not three
    while True:
        event: object = server.next_event()
        if event is h11.NEED_DATA:
            if pending:
                writer.write(bytes(pending))
                pending.clear()
            event = await _next(server, upstream_reader)
        if isinstance(event, h11.InformationalResponse):
            writer.write(client.send(h11.InformationalResponse(status_code=event.status_code, headers=[])) or b"")
        elif isinstance(event, h11.Response):
            raw = event.headers.raw_items()
            dropped = {
                token.strip().lower()
                for name, value in raw
                if name.lower() == b"connection"
                for token in value.split(b",")
            }
            keep = event.http_version == b"1.1" and b"close" not in dropped
            kept = [(n, v) for n, v in raw if n.lower() not in _HOP_BY_HOP and n.lower() not in dropped]
            if not keep:
                kept.append((b"Connection", b"close"))
            response = h11.Response(status_code=event.status_code, headers=kept, reason=event.reason)
            pending += client.send(response) or b""
        elif isinstance(event, h11.Data):
            pending += client.send(h11.Data(data=bytes(event.data))) or b""
            if len(pending) >= CHUNK:
                writer.write(bytes(pending))
                pending.clear()
                await writer.drain()
        elif isinstance(event, h11.EndOfMessage):
            pending += client.send(h11.EndOfMessage()) or b""
            writer.write(bytes(pending))
            await writer.drain()
            return keep
        else:
            raise ConnectionError("the server closed before its response's end")


async def _answer(client: h11.Connection, writer: asyncio.StreamWriter, status: int, body: str) -> None:
    """The proxy's own answer on the tunnel (a misdirected request), then the connection ends."""
    data = (body + "\n").encode()
    head = [(b"Content-Type", b"text/plain; charset=utf-8"), (b"Content-Length", b"%d" % len(data))]
    with contextlib.suppress(h11.ProtocolError, ConnectionError, OSError):
        reason = _REASONS.get(status, b"")
        response = h11.Response(status_code=status, headers=[*head, (b"Connection", b"close")], reason=reason)
        writer.write(client.send(response) or b"")
        writer.write(client.send(h11.Data(data=data)) or b"")
        writer.write(client.send(h11.EndOfMessage()) or b"")
        await writer.drain()
