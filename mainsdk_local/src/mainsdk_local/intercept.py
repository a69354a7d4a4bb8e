"""One intercepted CONNECT: TLS ends at the proxy, each request is read with h11 and sent on with the egress headers.

Used by ``egress_proxy`` for the hosts of ``BoxSpec.egress`` alone (every other host is a blind tunnel). The
upstream connection is already open over TLS, its certificate checked against the system's trust for the
host's name (``egress_tls.upstream_context``), before the code hears ``200``. Then:

- the code's TLS handshake is answered with the box CA's leaf for the host (ALPN: ``http/1.1`` only, so a
  client that asks for h2 falls back);
- each request on the connection (keep-alive holds) is read as a strict HTTP/1.1 intermediary reads it
  (``http1``): ambiguous framing, a bare CR or LF, an obsolete fold or a malformed field is a 400 and the
  end of the connection, with nothing sent on. Its ``Host`` (and an absolute-form target's authority) must
  be ``host[:digits]`` of this tunnel's host (421 for another host: a connection to one host never carries a
  request to another; 400 for any other shape);
- what is sent on is made again from what was read: the request line in origin form, that ``Host``, the
  end-to-end fields (hop-by-hop ones dropped, ``mainsdk.driver.HOP_BY_HOP``), every header named by the
  egress rule removed, whatever its case, and set once to the rule's value (replaced, never merged), and
  exactly one framing field. The body is read by h11 with that framing and re-framed as it goes out; the
  bytes after it are the next request's, read the same way. The response comes back re-framed by h11;
- a redirect is passed back to the code, never followed here: a request to another host is a new CONNECT,
  judged by its own host.

The values are never logged, never in an error: a failure ends the connection and is logged by type only.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Sequence

import h11
from mainsdk.driver import HOP_BY_HOP

from mainsdk_local.egress_tls import BoxAuthority
from mainsdk_local.http1 import (
    CHUNK,
    MAX_HEAD,
    Head,
    Refused,
    authority_text,
    bad,
    body_reader,
    forwarded_fields,
    framing_fields,
    parse_authority,
    parse_head,
    read_head,
    split_target,
)

HANDSHAKE_TIMEOUT = 30.0


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
    server = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    names = {name.lower() for name, _ in injected}
    buffer = b""  # what the code sent past the last request's end: the next request's, read anew
    try:
        while True:
            try:
                read = await read_head(reader, buffer)
                if read is None:
                    return  # the code closed between requests
                raw, buffer = read
                head = parse_head(raw)
                request = _rewrite(head, host, injected, names)
            except Refused as refusal:
                await _answer(writer, refusal)
                return
            # One h11 server per request, fed the framing read above: it reads this request's body and no
            # byte past it, and writes the response back under the request's rules (HEAD, HTTP/1.0, close).
            client = body_reader(head)
            if buffer:  # (h11 takes b"" as the end of the stream)
                client.receive_data(buffer)
            buffer = b""
            sent = server.send(request) or b""
            first = client.next_event()
            if isinstance(first, h11.EndOfMessage):  # no body (a GET): one write, no task
                upstream_writer.write(sent + (server.send(h11.EndOfMessage()) or b""))
                keep = await _response(server, upstream_reader, client, writer)
            else:
                upstream_writer.write(sent)
                sending = asyncio.ensure_future(_request_body(client, reader, server, upstream_writer, first))
                # A body that breaks off or turns malformed cuts the upstream: the origin waits for no more of
                # it, and the answer it will not give ends the wait here too.
                sending.add_done_callback(lambda done: _cut(done, upstream_writer))
                try:
                    keep = await _response(server, upstream_reader, client, writer)
                    await sending
                finally:
                    sending.cancel()
            if not keep or client.our_state is not h11.DONE or client.their_state is not h11.DONE:
                return
            if server.our_state is not h11.DONE or server.their_state is not h11.DONE:
                return
            buffer, closed = client.trailing_data
            if closed and not buffer:
                return
            server.start_next_cycle()
    except (h11.ProtocolError, ConnectionError, OSError, ssl.SSLError, asyncio.IncompleteReadError):
        return
    finally:
        with contextlib.suppress(Exception):
            writer.transport.abort()


def _cut(sending: asyncio.Future[None], upstream: asyncio.StreamWriter) -> None:
    if not sending.cancelled() and sending.exception() is not None:
        upstream.transport.abort()


async def _next(connection: h11.Connection, reader: asyncio.StreamReader) -> object:
    """The next h11 event of ``connection``, reading from ``reader`` as it needs."""
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(await reader.read(CHUNK))
            continue
        return event


def _rewrite(head: Head, host: str, injected: tuple[tuple[bytes, bytes], ...], names: set[bytes]) -> h11.Request:
    """The request sent on, made from what was read: for ``host`` only, one framing, the rule's headers set.

    Refused(421) for a request naming another host, Refused(400) for one whose target or Host is not
    ``host[:digits]`` of this tunnel's host or that is not to be forwarded at all.
    """
    if head.method == b"CONNECT":
        raise bad("CONNECT inside a tunnel is not forwarded")
    if head.method == b"TRACE":
        # RFC 9110 9.3.8: the answer echoes the request, so it would hand the code the credential set here.
        raise bad("TRACE is not forwarded to a host with egress headers: its answer would echo them")
    authority, target = split_target(head.target)
    ports: list[int | None] = []
    if authority is not None:
        # RFC 9112 3.2.2: a proxy takes the host from an absolute-form target, not from Host; both must name
        # this tunnel's host here, so no reading of either sends the request (and the key) elsewhere.
        named, port = parse_authority(authority)
        if named != host:
            raise Refused(421, f"this connection is for {host}; open another for that host")
        ports.append(port)
    hosts = head.values(b"host")
    if len(hosts) > 1:
        raise bad("Host more than once (RFC 9112 3.2)")
    if not hosts and head.version == b"1.1" and authority is None:
        raise bad("an HTTP/1.1 request names its host in Host (RFC 9112 3.2)")
    for value in hosts:
        named, port = parse_authority(value)
        if named != host:
            raise Refused(421, f"this connection is for {host}: its requests name that host")
        ports.append(port)
    if target == b"*" and head.method != b"OPTIONS":
        raise bad("the target * is for OPTIONS alone (RFC 9112 3.2.4)")
    # The Host sent on is this host, with the port the request named (the absolute form's, RFC 9112 3.2.2).
    fields = [(b"Host", authority_text(host, ports[0] if ports else None))]
    fields += forwarded_fields(head, names)
    fields += [*injected, *framing_fields(head)]
    return h11.Request(method=head.method, target=target, headers=fields, http_version="1.1")


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
            # One framing back too: h11 read the body by Transfer-Encoding if there was one, and frames it
            # again itself; a Content-Length beside it is dropped (RFC 9112 6.3 (3)), as is every hop-by-hop.
            framed = any(n.lower() == b"transfer-encoding" for n, _ in raw)
            skip = dropped | {b"content-length"} if framed else dropped
            kept = [(n, v) for n, v in raw if n.decode().lower() not in HOP_BY_HOP and n.lower() not in skip]
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


async def _answer(writer: asyncio.StreamWriter, refusal: Refused) -> None:
    """The proxy's own answer on the tunnel (a request it does not send on), then the connection ends."""
    data = (refusal.body + "\n").encode()
    head = (
        f"HTTP/1.1 {refusal.status} {refusal.reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(ConnectionError, OSError, TimeoutError):
        writer.write(head.encode("ascii") + data)
        await writer.drain()
        writer.close()  # TLS close_notify after the answer, so the code reads it whole, not a reset
        await asyncio.wait_for(writer.wait_closed(), 2.0)
