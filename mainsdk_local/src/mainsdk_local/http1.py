"""Request heads read as a strict HTTP/1.1 intermediary reads them (RFC 9110, RFC 9112): one meaning, or a refusal.

The proxy's two forwarding paths (a plain ``http://`` request, and each request inside a tunnel it intercepts to
set egress headers) read the code's bytes here. A head that two parsers could read two ways is refused with
a reason (``Refused``: 400, or 501 for a transfer coding the proxy does not forward) before anything is sent
on, since an origin, or a load balancer in front of it, that reads it the other way would see a second
request, carrying the key, where the proxy saw a body. What is sent on is made again from the fields read
here (``forwarded_fields``, ``framing_fields``), with exactly one framing; a body is read by h11 with the
framing decided here (``body_reader``), and re-framed as it goes out.

h11 alone is lenient where this is not: it accepts bare LF line ends and obsolete line folding, control
characters in field values, ``Content-Length`` next to ``Transfer-Encoding`` (taking the chunked framing and
leaving the other header for whoever sends it on), and a ``Host`` of any shape.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re

import attrs
import h11
from mainsdk.driver import HOP_BY_HOP

MAX_HEAD = 64 * 1024  # request line and fields
CHUNK = 64 * 1024
MAX_LENGTH_DIGITS = 18  # a Content-Length past this is no body anyone sends, and overflows a 64-bit parser

REASONS = {
    400: "Bad Request",
    421: "Misdirected Request",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
}

# RFC 9110 5.6.2: token = 1*tchar. A method (9.1) and a field name (5.1) are tokens.
_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
# RFC 9112 3: request-line = method SP request-target SP HTTP-version; one SP each, no other whitespace (3.2:
# a target with whitespace is invalid, 400). The target's characters: visible ASCII (RFC 3986's, loosely).
_REQUEST_LINE = re.compile(rb"(" + _TOKEN + rb") ([\x21-\x7e]+) HTTP/([0-9]\.[0-9])")
# RFC 9112 5.1: field-line = field-name ":" OWS field-value OWS; no whitespace before the colon (400).
_FIELD_LINE = re.compile(rb"(" + _TOKEN + rb"):[ \t]*(.*?)[ \t]*")
# RFC 9110 5.5: field-value = *field-content; field-content = field-vchar [ 1*( SP / HTAB / field-vchar )
# field-vchar ]; field-vchar = VCHAR / obs-text. So no NUL, CR, LF or other control character.
_FIELD_VALUE = re.compile(rb"(?:[\x21-\x7e\x80-\xff](?:[ \t\x21-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?)?")
# RFC 9112 2.2: a bare CR is invalid; a bare LF is a line end only to a lenient recipient. Either is refused.
_BARE_LF_OR_CR = re.compile(rb"(?<!\r)\n|\r(?!\n)")
_HEAD_END = re.compile(rb"\n\r?\n")  # where a lenient parser ends a head (a bare LF is then refused, not waited on)
# RFC 3986 3.2.2 reg-name, as DNS names are spelled (underscores tolerated, as resolvers do), one trailing dot.
_REG_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*\.?")
_PORT = re.compile(r"[0-9]{1,5}")
# RFC 9110 9.3 and PATCH (RFC 5789): the methods sent on. Another token is an extension method no parser
# but the lenient ones reads alike (llhttp refuses it): 501, as RFC 9110 9.1 has an unrecognized method.
METHODS = frozenset({b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"CONNECT", b"OPTIONS", b"TRACE", b"PATCH"})


class Refused(Exception):
    """A request the proxy answers itself and does not send on: ``status``, its reason phrase, a one-line body."""

    def __init__(self, status: int, body: str, reason: str | None = None) -> None:
        super().__init__(body)
        self.status = status
        self.reason = reason or REASONS.get(status, "Bad Request")
        self.body = body


def bad(body: str) -> Refused:
    """A 400 naming what is wrong."""
    return Refused(400, body)


@attrs.frozen
class Head:
    """A request head as read: each field once as sent (its value without the surrounding OWS), and its framing.

    ``length`` is the body's ``Content-Length`` (0 when there is no framing field: RFC 9112 6.3, a request
    without either has no body); ``chunked`` is true when the body is chunked instead.
    """

    method: bytes
    target: bytes
    version: bytes  # b"1.0" or b"1.1"
    fields: tuple[tuple[bytes, bytes], ...]
    length: int = 0
    chunked: bool = False

    def values(self, name: bytes) -> list[bytes]:
        """The values of every field named ``name`` (lowercase), in order."""
        return [value for field, value in self.fields if field.lower() == name]

    def connection_options(self) -> set[bytes]:
        """The options of ``Connection``, lowercase (RFC 9110 7.6.1: each names a field not sent on)."""
        return {token for value in self.values(b"connection") for token in _list(value)}


async def read_head(reader: asyncio.StreamReader, buffer: bytes = b"") -> tuple[bytes, bytes] | None:
    """The next head from ``buffer`` then ``reader``, through its blank line, and what followed it.

    None when the stream ends before a byte of a head; ``asyncio.IncompleteReadError`` when it ends inside
    one; Refused(431) past MAX_HEAD. Empty lines before the request line are skipped (RFC 9112 2.2).
    """
    searched = 0  # where the next search for the head's end starts (what was searched, less 2 bytes)
    while True:
        if buffer.startswith(b"\r\n"):
            buffer, searched = buffer.lstrip(b"\r\n"), 0
        end = _HEAD_END.search(buffer, searched)
        if (end.end() if end is not None else len(buffer)) > MAX_HEAD:
            raise Refused(431, "the request head is too large")
        if end is not None:
            return buffer[: end.end()], buffer[end.end() :]
        searched = max(len(buffer) - 2, 0)  # an end may straddle two reads
        data = await reader.read(CHUNK)
        if not data:
            if buffer:
                raise asyncio.IncompleteReadError(buffer, None)
            return None
        buffer += data


def parse_head(head: bytes) -> Head:
    """Check and read a request head (through its blank line); Refused for anything two parsers could read apart."""
    if _BARE_LF_OR_CR.search(head):
        raise bad("a bare LF or CR in the request head: every line ends with CRLF (RFC 9112 2.2)")
    lines = head[:-4].split(b"\r\n")
    line = _REQUEST_LINE.fullmatch(lines[0])
    if line is None:
        raise bad("a malformed request line: METHOD SP target SP HTTP/1.1 (RFC 9112 3)")
    method, target, version = line.groups()
    if version not in (b"1.0", b"1.1"):
        raise Refused(505, "this proxy speaks HTTP/1.0 and HTTP/1.1", "HTTP Version Not Supported")
    if method not in METHODS:
        shown = method[:20].decode("ascii")
        raise Refused(501, f"the method {shown!r} is not forwarded: {', '.join(sorted(m.decode() for m in METHODS))}")
    fields: list[tuple[bytes, bytes]] = []
    for text in lines[1:]:
        if text[:1] in (b" ", b"\t"):
            raise bad("an obsolete line fold in the request head (RFC 9112 5.2)")
        field = _FIELD_LINE.fullmatch(text)
        if field is None:
            raise bad("a malformed field line: a token, a colon right after it, a value (RFC 9112 5.1)")
        name, value = field.groups()
        if _FIELD_VALUE.fullmatch(value) is None:
            raise bad(f"the {name.decode()} field holds a control character (RFC 9110 5.5)")
        fields.append((name, value))
    length, chunked = _framing(fields, version)
    return Head(method, target, version, tuple(fields), length, chunked)


def _list(value: bytes) -> list[bytes]:
    """The elements of a list field (RFC 9110 5.6.1), lowercase, empty ones ignored."""
    return [element.strip(b" \t").lower() for element in value.split(b",") if element.strip(b" \t")]


def _framing(fields: list[tuple[bytes, bytes]], version: bytes) -> tuple[int, bool]:
    """The body's framing: (Content-Length, chunked). One framing field, in one form, or Refused."""
    lengths = [value for name, value in fields if name.lower() == b"content-length"]
    codings = [value for name, value in fields if name.lower() == b"transfer-encoding"]
    if codings:
        if lengths:
            # RFC 9112 6.1: a sender MUST NOT send both; 6.3 (3): ought to be handled as an error (smuggling,
            # RFC 9112 11.2); an intermediary that forwarded it would have to drop Content-Length first.
            raise bad("Content-Length and Transfer-Encoding together: send one (RFC 9112 6.3)")
        if version == b"1.0":
            # RFC 9112 6.1: Transfer-Encoding in an HTTP/1.0 message MUST be treated as faulty framing.
            raise bad("Transfer-Encoding in an HTTP/1.0 request (RFC 9112 6.1)")
        parsed = [coding for value in codings for coding in _list(value)]
        if not parsed or parsed[-1] != b"chunked":
            # RFC 9112 6.3 (4): chunked not the final coding of a request: 400, and close.
            raise bad("a Transfer-Encoding whose last coding is not chunked (RFC 9112 6.3)")
        if parsed.count(b"chunked") > 1:
            raise bad("chunked applied twice in Transfer-Encoding (RFC 9112 6.1)")
        if len(parsed) > 1:
            # RFC 9112 6.1: a coding the server does not forward: 501.
            raise Refused(501, "only Transfer-Encoding: chunked is forwarded, no other coding (RFC 9112 6.1)")
        return 0, True
    if len(lengths) > 1:
        raise bad("Content-Length more than once (RFC 9112 6.3)")
    if lengths:
        # RFC 9110 8.6: Content-Length = 1*DIGIT. A list, even of equal values, is refused (RFC 9112 6.3 (5)).
        if not lengths[0].isdigit() or not lengths[0].isascii():
            raise bad("Content-Length is not one number (RFC 9110 8.6)")
        if len(lengths[0]) > MAX_LENGTH_DIGITS:
            raise bad("Content-Length is too large")
        return int(lengths[0]), False
    return 0, False


def parse_authority(text: bytes, *, port_required: bool = False) -> tuple[str, int | None]:
    """``host[:port]`` (RFC 9110 7.2, RFC 3986 3.2.2) as (host lowercase without a trailing dot, port or None).

    Strictly that: a DNS name, an IPv4 literal or a bracketed IPv6 literal, then at most one ``:`` and 1 to 5
    digits. No userinfo, no second ``:``, no whitespace, no empty port: a ``Host`` an origin could read as
    naming another host (``api.example.test:1@other.example.test``: ``other.example.test`` to a URL parser)
    is refused.
    """
    shown = text[:100].decode("latin-1")
    if not text.isascii():
        raise bad(f"{shown!r} is not host[:port]")
    value = text.decode("ascii")
    if value.startswith("["):
        end = value.find("]")
        try:
            host = str(ipaddress.IPv6Address(value[1:end])) if end > 0 else ""
        except ValueError:
            host = ""
        rest = value[end + 1 :] if end > 0 else value
    else:
        name, colon, port_text = value.partition(":")
        host = name.lower() if _REG_NAME.fullmatch(name.lower()) and len(name) <= 254 else ""
        host = host.rstrip(".")
        rest = colon + port_text
    if not host:
        raise bad(f"{shown!r} is not host[:port]: a host name or IP address, then at most :digits")
    if not rest:
        if port_required:
            raise bad(f"{shown!r} has no port: CONNECT needs host:port")
        return host, None
    port_text = rest[1:]
    if rest[0] != ":" or not _PORT.fullmatch(port_text) or not 0 < int(port_text) < 65536:
        raise bad(f"{shown!r} is not host[:port]: the port is 1 to 65535, in digits alone")
    return host, int(port_text)


def authority_text(host: str, port: int | None) -> bytes:
    """``host[:port]`` as it is sent on (IPv6 in brackets)."""
    shown = f"[{host}]" if ":" in host else host
    return (shown if port is None else f"{shown}:{port}").encode("ascii")


def split_target(target: bytes) -> tuple[bytes | None, bytes]:
    """A request target as (its authority when in absolute form, else None; the origin-form target sent on).

    RFC 9112 3.2: origin form (``/path?query``), absolute form (``scheme://authority/path?query``), and
    ``*`` (OPTIONS alone) are read; anything else is refused. A fragment is never part of a target.
    """
    lowered = target.lower()
    if lowered.startswith((b"http://", b"https://")):
        rest = target[target.find(b"//") + 2 :]
        cut = min((i for i in (rest.find(b"/"), rest.find(b"?")) if i >= 0), default=len(rest))
        authority, path = rest[:cut], rest[cut:]
        if b"#" in path:
            raise bad("a request target holds no fragment (#)")
        return authority, (path if path.startswith(b"/") else b"/" + path)
    if target.startswith(b"/") and b"#" not in target:
        return None, target
    if target == b"*":
        return None, target
    raise bad("a request target is /path?query, or http://host/path through this proxy (RFC 9112 3.2)")


def forwarded_fields(head: Head, dropped: set[bytes]) -> list[tuple[bytes, bytes]]:
    """The fields an intermediary sends on, as read: every end-to-end field but ``dropped`` (lowercase names).

    Never sent on: the hop-by-hop fields and those ``Connection`` names (RFC 9110 7.6.1), ``Host`` (the
    caller sets the one it checked), and the framing fields (``framing_fields`` sets the one read here).
    """
    skip = HOP_BY_HOP | {"host", "content-length"}
    options = head.connection_options()
    return [
        (name, value)
        for name, value in head.fields
        if name.decode().lower() not in skip and name.lower() not in options and name.lower() not in dropped
    ]


def framing_fields(head: Head) -> list[tuple[bytes, bytes]]:
    """The one framing field sent on: chunked, or the Content-Length read (none for no body on a GET-like)."""
    if head.chunked:
        return [(b"Transfer-Encoding", b"chunked")]
    if head.length or head.values(b"content-length"):
        return [(b"Content-Length", b"%d" % head.length)]
    return []


def body_reader(head: Head) -> h11.Connection:
    """An h11 server that has read a head with ``head``'s framing alone: it reads the body as decided here.

    Fed the bytes after the head, it gives the body's data, then its end; what follows the end stays in its
    ``trailing_data`` (the next request's, read by ``read_head`` again). Trailers are read and dropped
    (RFC 9112 7.1.2: a recipient that removes the chunked coding may discard them). The same h11 connection
    writes the response back, so its rules (HEAD, 1.0 clients, ``Connection: close``) follow the request.
    """
    lines = [head.method + b" / HTTP/" + head.version, b"Host: x"]
    lines += [name + b": " + value for name, value in framing_fields(head)]
    if b"close" in head.connection_options():
        lines.append(b"Connection: close")
    reader = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    reader.receive_data(b"\r\n".join(lines) + b"\r\n\r\n")
    event = reader.next_event()
    assert isinstance(event, h11.Request), event  # the head made here is sound
    return reader
