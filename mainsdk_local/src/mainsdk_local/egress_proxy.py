"""The egress proxy of a run with hosts: what it lets through, and how a refusal looks to the code.

One proxy per exec, on the app's event loop, accepting on a listener that
lives in the run's own network namespace (127.0.0.1:PROXY_PORT there; see
``launcher.stages.worker_main``) or, in weak mode, on the host's loopback with a
per-run password. It forwards two kinds of request:

- ``CONNECT host:port`` (HTTPS, or anything else tunnelled): the target is checked;
- an absolute-form plain HTTP request (``GET http://host/path``): the URI's host
  is checked, and a ``Host`` header naming another host is refused; the request
  goes out in origin form with ``Connection: close``.

One connection carries one request to one checked host. The head is read as a
strict HTTP/1.1 intermediary reads it (``http1``, RFC 9110 and 9112): ambiguous
framing, a bare LF or CR, an obsolete line fold, a malformed field, a target or
``Host`` that is not ``host[:digits]`` are each a 400, since an upstream could
read them as another host's or as the start of a second request. The head sent
on is made again from what was read, with one framing field; the body is taken
as h11 frames it by that framing and sent on re-framed; whatever follows it (a
pipelined request) is read and dropped, never forwarded.

A host passes when it matches one of the run's hosts, exactly or under a
``*.example.com`` pattern (``mainsdk.hosts.host_matches``). Names are resolved
here, never by the code, which has no DNS server at all. An IP literal passes
only when that IP was given. A name that resolves to a loopback, private,
link-local or otherwise non-global address is refused (DNS rebinding onto the
app's services) unless that IP was given too, or the name is in the driver's
``resolve`` mapping (tests). A refusal is a 403 whose reason and one-line body
name the host and MAIN-SANDBOX-0005; it is reported to the run
(``on_refused``), once per host. Core redacts the run's secrets from it, bounds
it, logs it and puts it in the result and the audit event; the proxy itself
never logs a host the code chose, since it does not know the run's secrets.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import ipaddress
import logging
import socket
import ssl
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import attrs
import h11
from mainsdk.driver import HOST_NOT_ALLOWED, host_covered, validate_host_pattern

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
from mainsdk_local.intercept import intercept

log = logging.getLogger("mainsdk")

HEAD_TIMEOUT = 30.0  # for the request head to arrive
CONNECT_TIMEOUT = 10.0  # for the upstream connection
MAX_CONNECTIONS = 128  # open at once per run; more are closed at once
MAX_REFUSED_KEPT = 50  # refused hosts kept in ``refused`` (core keeps as many, and counts the rest)
MAX_REFUSED_SEEN = 10_000  # distinct refused hosts remembered, so each is reported once
PROXY_USER = "mainsdk"

LINGER = 2.0  # after a refusal, how long to read what the client still sends, so it sees the answer, not a reset
# Networks whose addresses carry no host of their own, or another IPv4's: deprecated site-local, NAT64 for
# local use (RFC 8215) and Teredo (RFC 4380; the client's IPv4 is obfuscated). Refused as non-global.
_NON_GLOBAL_V6 = tuple(ipaddress.IPv6Network(n) for n in ("fec0::/10", "64:ff9b:1::/48", "2001::/32"))
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052 well-known prefix: the low 32 bits are the IPv4
_V4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # deprecated ::a.b.c.d (RFC 4291 2.5.5.1)


class Refusal(Refused):
    """A request the proxy answers itself, with ``status`` and a one-line ``body``.

    ``host`` is set when the refusal is MAIN-SANDBOX-0005: the code tried a host it was not given, or (``why``
    set) one it was given that the proxy still refuses, for the reason ``why`` says.
    """

    def __init__(self, status: int, reason: str, body: str, host: str | None = None, why: str = "") -> None:
        super().__init__(status, body, reason)
        self.host = host
        self.why = why


def _not_given(host: str, why: str = "") -> Refusal:
    detail = f" ({why})" if why else ""
    return Refusal(
        403,
        f"Forbidden ({HOST_NOT_ALLOWED}: {host} not allowed)",
        f"{HOST_NOT_ALLOWED}: {host} is not a host this sandbox run was given{detail}",
        host,
    )


def _not_public(host: str, found: list[str]) -> Refusal:
    # The host was given: say so, and why it is refused anyway (a split-DNS or corporate resolver does this), in
    # the status line the code sees first, the body, and (through ``why``) the log and the result.
    addresses = ", ".join(found)
    why = f"it resolves to {addresses}, which is not a public address"
    return Refusal(
        403,
        f"Forbidden ({HOST_NOT_ALLOWED}: {host} resolves to {addresses}, not a public address)",
        f"{HOST_NOT_ALLOWED}: {host} was given to this sandbox run, but {why}: the proxy reaches a name only at "
        f"public addresses (DNS rebinding onto the host's network). If that address is the right one, give it "
        f"too: add {found[0]} to the call's network, sandbox.network and network.allow",
        host,
        why,
    )


def _ip_literal(host: str) -> str | None:
    """The canonical form of an IP literal, or None for a name."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


def _global_address(address: str) -> bool:
    """Whether an address is on the public internet (not loopback, private, link-local, shared, reserved...).

    An IPv6 address that carries an IPv4 one (v4-mapped, v4-compatible, NAT64
    ``64:ff9b::/96``, 6to4 ``2002::/16``) is judged by that IPv4: a gateway
    on the path turns it into that IPv4, so 64:ff9b::7f00:1 is loopback.
    """
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        if any(ip in network for network in _NON_GLOBAL_V6):
            return False
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip.sixtofour is not None:
            ip = ip.sixtofour
        elif ip in _NAT64 or ip in _V4_COMPATIBLE:
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)  # :: and ::1 become 0.0.0.0 and 0.0.0.1: not global
    return ip.is_global and not ip.is_multicast


@attrs.frozen
class EgressPolicy:
    """The hosts one run may reach, and the names the proxy resolves without DNS (tests only).

    ``headers``: per host, the ``(name, value)`` headers to set on every request to it (``BoxSpec.egress``):
    a CONNECT to such a host, on any port, is terminated here with a leaf of ``authority`` and its
    requests forwarded over TLS checked by ``upstream_tls`` (``intercept.py``). Never shown by ``repr``.
    """

    hosts: tuple[str, ...]
    resolve: Mapping[str, str] = attrs.field(factory=dict)
    headers: Mapping[str, tuple[tuple[str, str], ...]] = attrs.field(factory=dict, repr=False)
    authority: BoxAuthority | None = attrs.field(default=None, repr=False)
    upstream_tls: ssl.SSLContext | None = attrs.field(default=None, repr=False)

    def allows(self, host: str) -> bool:
        """Whether ``host`` (a name or an IP) falls under one of the run's hosts."""
        return host_covered(host, self.hosts)


def check_resolve_mapping(resolve: Mapping[str, str] | None) -> dict[str, str]:
    """Validate a ``resolve`` mapping (host name -> IP address) and return it normalised."""
    checked: dict[str, str] = {}
    for name, address in (resolve or {}).items():
        host = validate_host_pattern(name)
        if host.startswith("*.") or _ip_literal(host) is not None:
            raise ValueError(f"resolve: {name!r} must be a host name, not a wildcard or an IP address")
        ip = _ip_literal(str(address).strip("[]"))
        if ip is None:
            raise ValueError(f"resolve: {name!r} maps to {address!r}, which is not an IP address")
        checked[host] = ip
    return checked


@attrs.frozen(eq=False)
class Request:
    """A request head, parsed: where it goes, what is sent on, and its body's parser (both None for CONNECT)."""

    host: str
    port: int
    forward_head: bytes | None
    body: h11.Connection | None = None  # the h11 connection that parsed the head, to frame the body
    chunked: bool = False  # the body is sent on chunked (else as Content-Length says)


class EgressProxy:
    """One run's proxy. ``serve`` a listener; ``close`` ends it and every connection it opened.

    ``on_refused(host)`` is called once per refused host (for the first
    MAX_REFUSED_SEEN distinct hosts; past that, once per refusal). ``refused``
    keeps the first MAX_REFUSED_KEPT, unredacted: it is for the driver's
    outcome, which core redacts. ``password``: when set
    (weak mode, where the listener is on the host's loopback), a request must
    carry it as proxy Basic credentials, so other local processes and other runs
    cannot use this run's hosts.
    """

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        on_refused: Callable[[str, str], None],
        label: str,
        password: str | None = None,
    ) -> None:
        self.policy = policy
        self.label = label
        self.refused: list[str] = []
        self._refused_seen: set[str] = set()
        self._on_refused = on_refused
        self._password = password
        self._listeners: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    # -- life ----------------------------------------------------------------

    def serve(self, listener: socket.socket) -> None:
        """Accept on ``listener`` (which this proxy now owns) until ``close``. Call it on the proxy's loop."""
        if self._closed:
            listener.close()
            return
        listener.setblocking(False)
        self._loop = asyncio.get_running_loop()
        self._listeners.append(listener)
        # A plain reader, not loop.sock_accept: close() can then unregister it and close the
        # socket at once, with no pending future that would later unregister a reused fd.
        self._loop.add_reader(listener.fileno(), self._accept, listener)

    def close(self) -> None:
        """Close the listeners and every connection now; their tasks end on their own. Safe to call twice."""
        self._closed = True
        for listener in self._listeners:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(listener.fileno())
            listener.close()
        self._listeners.clear()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        for task in list(self._tasks):
            task.cancel()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        assert self._loop is not None
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # One connection's failure is that connection's; the proxy goes on. Its type only: the message
            # of an error raised on the code's bytes could quote them, and they may carry a secret.
            log.debug("sandbox proxy %s: connection failed (%s)", self.label, type(task.exception()).__name__)

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(16):  # bounded, so a flood of connections cannot starve the loop
            try:
                conn, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if len(self._tasks) >= MAX_CONNECTIONS:
                conn.close()  # the code opened too many at once: refuse the newest
                continue
            self._spawn(self._connection(conn))

    # -- one connection ------------------------------------------------------

    async def _connection(self, conn: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=conn, limit=MAX_HEAD)
        except OSError:
            conn.close()
            return
        except asyncio.CancelledError:  # closed before the transport took the socket over
            conn.close()
            raise
        self._writers.add(writer)
        upstream: asyncio.StreamWriter | None = None
        try:
            try:
                read = await asyncio.wait_for(read_head(reader), HEAD_TIMEOUT)
                if read is None:
                    return
                head, rest = read
                request = self._parse(head)
                upstream_reader, upstream = await self._open_upstream(request)
            except Refused as refusal:
                await self._refuse(reader, writer, refusal)
                return
            except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                return
            self._writers.add(upstream)
            if request.body is None and request.host in self.policy.headers and self.policy.authority is not None:
                # A host with egress headers: TLS ends here, each request is read and its headers set.
                rules = self.policy.headers[request.host]
                await intercept(
                    self.policy.authority, request.host, rules, rest, reader, writer, upstream_reader, upstream
                )
                return
            if request.body is None:  # CONNECT: a tunnel, bytes both ways
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                upstream.write(rest)
                await asyncio.gather(_pipe(reader, upstream), _pipe(upstream_reader, writer))
                return
            upstream.write(request.forward_head or b"")
            sending = asyncio.ensure_future(_send_body(request, request.body, rest, reader, upstream))
            try:
                await _pipe(upstream_reader, writer)
                with contextlib.suppress(TimeoutError):  # the answer is through: let the client read it, then close
                    await asyncio.wait_for(sending, LINGER)
            finally:
                sending.cancel()
        finally:
            for w in (writer, upstream):
                if w is not None:
                    self._writers.discard(w)
                    w.transport.abort()

    def _parse(self, raw: bytes) -> Request:
        """Check and parse a request head (through its blank line); Refused(400) for anything ambiguous."""
        head = parse_head(raw)
        self._check_password(head)
        hosts = head.values(b"host")
        if len(hosts) > 1:
            raise bad("Host more than once (RFC 9112 3.2)")
        if head.method == b"CONNECT":
            # RFC 9110 9.3.6, RFC 9112 3.2.3: CONNECT's target alone, host:port, says where the tunnel goes,
            # and the request has no content. Its Host is sent nowhere (many clients send none).
            if head.chunked or head.length:
                raise bad("a CONNECT request has no body")
            host, port = parse_authority(head.target, port_required=True)
            assert port is not None  # port_required
            return Request(host, port, None)
        authority, path = split_target(head.target)
        if authority is None:
            raise bad("send requests to this proxy in absolute form (http://host/path)")
        if not head.target.lower().startswith(b"http://"):
            raise bad("https:// is not proxied here: use CONNECT for HTTPS")
        # RFC 9112 3.2.2: the host is the target's; a Host naming another is refused, never a second reading.
        host, given_port = parse_authority(authority)
        for value in hosts:
            named, _ = parse_authority(value)
            if named != host:
                if not self.policy.allows(named):
                    raise _not_given(named, "named in the Host header")
                raise bad(f"the Host header names {named}, the request URI {host}")
        forward_head = self._forward_head(head, path, authority_text(host, given_port))
        return Request(host, given_port or 80, forward_head, body_reader(head), head.chunked)

    @staticmethod
    def _forward_head(head: Head, path: bytes, host: bytes) -> bytes:
        """The head sent on, made from what was read: origin form, the checked Host, one framing, then close."""
        fields = [(b"Host", host), *forwarded_fields(head, set()), *framing_fields(head), (b"Connection", b"close")]
        lines = [b"%b %b HTTP/%b" % (head.method, path, head.version), *(n + b": " + v for n, v in fields)]
        return b"\r\n".join([*lines, b"", b""])

    def _check_password(self, head: Head) -> None:
        if self._password is None:
            return
        expected = base64.b64encode(f"{PROXY_USER}:{self._password}".encode())
        for value in head.values(b"proxy-authorization"):
            scheme, _, credentials = value.partition(b" ")
            if scheme.lower() == b"basic" and hmac.compare_digest(credentials.strip(), expected):
                return
        raise Refusal(407, "Proxy Authentication Required", "this proxy belongs to another sandbox run")

    async def _open_upstream(self, request: Request) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        addresses = await self._admit(request.host, request.port)
        last: OSError | None = None
        tls = self.policy.upstream_tls if request.body is None and request.host in self.policy.headers else None
        for address in addresses:
            try:
                if tls is not None:
                    # Checked as a client checks it (system trust, the host's name), before the code hears 200.
                    return await asyncio.wait_for(
                        asyncio.open_connection(
                            address, request.port, ssl=tls, server_hostname=request.host, limit=MAX_HEAD
                        ),
                        CONNECT_TIMEOUT,
                    )
                return await asyncio.wait_for(asyncio.open_connection(address, request.port), CONNECT_TIMEOUT)
            except TimeoutError:
                raise Refusal(504, "Gateway Timeout", f"{request.host}:{request.port} did not answer") from None
            except ssl.SSLError as exc:
                reason = exc.reason or type(exc).__name__
                raise Refusal(
                    502, "Bad Gateway", f"{request.host}:{request.port}: its TLS certificate did not verify ({reason})"
                ) from None
            except OSError as exc:
                last = exc
        raise Refusal(502, "Bad Gateway", f"{request.host}:{request.port} refused the connection ({last})")

    async def _admit(self, host: str, port: int) -> list[str]:
        """The addresses to connect to for ``host``, or a Refusal. Checks come before any DNS query."""
        if _ip_literal(host) is not None:
            if not self.policy.allows(host):
                raise _not_given(host)
            return [host]  # an IP that was given, whatever its range
        if not self.policy.allows(host):
            raise _not_given(host)
        mapped = self.policy.resolve.get(host)
        if mapped is not None:
            return [mapped]
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        except OSError as exc:
            raise Refusal(502, "Bad Gateway", f"{host} did not resolve ({exc})") from None
        found = list(dict.fromkeys(str(info[4][0]) for info in infos))
        usable = [a for a in found if _global_address(a) or self.policy.allows(a)]
        if not usable:
            raise _not_public(host, found)
        return usable

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, refusal: Refused) -> None:
        host = refusal.host if isinstance(refusal, Refusal) else None
        if host is not None and host not in self._refused_seen:
            if len(self._refused_seen) < MAX_REFUSED_SEEN:
                self._refused_seen.add(host)
            if len(self.refused) < MAX_REFUSED_KEPT:
                self.refused.append(host)
            self._on_refused(host, refusal.why if isinstance(refusal, Refusal) else "")
        body = (refusal.body + "\n").encode()
        extra = 'Proxy-Authenticate: Basic realm="mainsdk sandbox"\r\n' if refusal.status == 407 else ""
        head = (
            f"HTTP/1.1 {refusal.status} {refusal.reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n"
        )
        with contextlib.suppress(OSError, TimeoutError, asyncio.LimitOverrunError):
            writer.write(head.encode("latin-1") + body)
            writer.write_eof()
            # Closing with unread input would send a reset, which can reach the client
            # before the answer; read what it still sends (a request body) for a moment.
            async with asyncio.timeout(LINGER):
                while await reader.read(CHUNK):
                    pass


async def _send_body(
    request: Request,
    parser: h11.Connection,
    rest: bytes,
    reader: asyncio.StreamReader,
    upstream: asyncio.StreamWriter,
) -> None:
    """Send the request's body on as h11 frames it, then read and drop whatever the client sends after it.

    A chunked body is re-chunked from the data alone (no extensions, no trailers), so what the upstream reads
    is exactly the body h11 read. A malformed body, or a client that leaves mid-body, ends the upstream too.
    """
    if rest:  # (h11 takes b"" as the end of the stream)
        parser.receive_data(rest)
    try:
        while True:
            event = parser.next_event()
            if event is h11.NEED_DATA:
                parser.receive_data(await reader.read(CHUNK))
            elif isinstance(event, h11.Data):
                data = bytes(event.data)
                if data:
                    upstream.write(b"%x\r\n%b\r\n" % (len(data), data) if request.chunked else data)
                    await upstream.drain()
            elif isinstance(event, h11.EndOfMessage):
                if request.chunked:
                    upstream.write(b"0\r\n\r\n")
                break
            else:  # ConnectionClosed before the body's end
                upstream.transport.abort()
                return
    except (h11.RemoteProtocolError, ConnectionError, OSError):
        upstream.transport.abort()
        return
    # One request per connection: a pipelined request (or anything else) after the body goes nowhere.
    with contextlib.suppress(ConnectionError, OSError):
        while await reader.read(CHUNK):
            pass


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy ``reader`` to ``writer`` until EOF, then pass the half-close on."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.transport.abort()


def proxy_environment(url: str, node_preload: str | None, env: Mapping[str, str]) -> dict[str, str]:
    """The variables that send the code's HTTP(S) clients through the proxy at ``url``.

    Both spellings of HTTP_PROXY and HTTPS_PROXY (curl reads only the lowercase
    http_proxy; Python, requests, httpx, pip and git read either), ALL_PROXY for
    tools that read only that, and an empty NO_PROXY so nothing bypasses it.
    Node: NODE_USE_ENV_PROXY makes Node 24+ (and 22.21+) use them for fetch
    and http(s); on older Node the preload (``launcher/node_proxy.py``) installs a fetch
    dispatcher and default agents that tunnel through the proxy.
    """
    out = {name: url for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy")}
    out.update(NO_PROXY="", no_proxy="", NODE_USE_ENV_PROXY="1")
    if node_preload is not None:
        existing = env.get("NODE_OPTIONS", "")
        out["NODE_OPTIONS"] = f"{existing} --require {node_preload}".strip()
    return out
