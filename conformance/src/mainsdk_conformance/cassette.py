"""Cassettes: one JSON file per test holding a provider session, readable, exact, and free of credentials.

A cassette is ``{"format", "meta", "interactions"}``. Each interaction has an
``upstream`` (which base URL it went to), a ``request`` and a ``response``, and
may have a ``fault``. Bodies are stored as what they are:

- ``{"json": value}`` (with ``"style"`` and ``"newline"`` when the bytes were not compact JSON),
- ``{"text": "..."}`` for other UTF-8, ``{"base64": "..."}`` for binary,
- ``{"connect": [frame, ...]}`` for Connect envelopes (E2B's process stream): each frame
  ``{"flags": 0, "json": ...}``; ``{"ndjson": [line, ...]}`` for NDJSON (Vercel's logs),
- request only: ``{"multipart": {...}}`` by part, ``{"targz": [...]}`` by archive member.

A request is only ever matched, never sent again, so it is kept by content (``Payloads``): a known payload
(the kernel the app delivers) by name, ``[payload:NAME]``, wherever it is in a request; then any part, member,
body or JSON string over ``DIGEST_OVER`` (wheels, archives, uploads) by its sha256 and size. Replay does the
same to each request before matching, so it checks the hash and size, and a kernel edit changes no cassette.
A response is replayed byte for byte: a known payload it echoes (Vercel's command carries its arguments) is
kept by name and filled in again from the current one, and a large frame that compresses well (megabytes of
output past a limit) is kept gzipped (``{"gzip": base64}``).

A response frame may carry ``at`` (seconds after the response started) and
``after`` (how many requests of its sandbox had arrived when it did), so replay
keeps the recorded pace and waits for the request that caused it (a kill).

Encoding checks that decoding gives back the same bytes, and falls back to
text or base64 when it would not: a replayed response is byte for byte the
recorded one.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import io
import json
import os
import re
import shlex
import stat
import struct
import tarfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
from mainsdk.redact import KEY_PATTERNS

FORMAT = "mainsdk-cassette/1"
MADE = ("recorded", "authored")
SCRUBBED = "[scrubbed]"

# Header names whose values are credentials; matched without case.
CREDENTIAL_HEADERS = frozenset(
    {
        "authorization",
        "x-api-key",
        "x-access-token",
        "cookie",
        "set-cookie",
        "proxy-authorization",
        "x-vercel-oidc-token",
    }
)
# JSON fields whose values are credentials, wherever they are in a body.
CREDENTIAL_FIELDS = frozenset(
    {
        "envdAccessToken",
        "trafficAccessToken",
        "accessToken",
        "access_token",
        "refreshToken",
        "refresh_token",
        "apiKey",
        "api_key",
        "token",
        "password",
        "secret",
        "clientSecret",
        "client_secret",
    }
)
# Query parameters that carry a credential (E2B's signed file URLs).
CREDENTIAL_QUERY = frozenset({"signature", "token", "access_token", "api_key", "key"})
# Values that look like credentials anywhere: core's redaction formats, plus the providers' own.
CREDENTIAL_PATTERNS: tuple[re.Pattern[str], ...] = (
    *(re.compile(p.decode()) for p in KEY_PATTERNS),
    re.compile(r"\be2b_[0-9a-f]{40}\b"),  # E2B API key
    re.compile(r"\bsk_e2b_[0-9A-Za-z]{20,}"),  # E2B access token
    re.compile(r"\bvc[kpiar]_[0-9A-Za-z]{20,}"),  # Vercel tokens with a kind prefix
    re.compile(r"\bBearer\s+(?!\[scrubbed\])[A-Za-z0-9._~+/-]{16,}=*", re.IGNORECASE),
)
# A known secret's value scrubbed by name (``scrub``'s ``named``): ``[scrubbed:NAME]``. A credential header may
# hold one after a scheme word of letters ("Bearer [scrubbed:NAME]"), nothing else: no digits, nothing long.
NAMED_MARK = "[scrubbed:{}]"
_SCRUBBED_HEADER = re.compile(r"(?:[A-Za-z][A-Za-z-]{0,15} )?\[scrubbed(?::[A-Za-z_][A-Za-z0-9_]*)?\]")
# Values made up by the suite to look like keys: not secrets, so a cassette may hold them.
FAKE_KEYS = frozenset({"ghp_" + "conformanceFAKEkey" + "0" * 18})

JSON_STYLES: dict[str, dict[str, Any]] = {
    "compact": {"separators": (",", ":"), "ensure_ascii": False},
    "compact-ascii": {"separators": (",", ":"), "ensure_ascii": True},
    "spaced": {"separators": (", ", ": "), "ensure_ascii": False},
    "spaced-ascii": {"separators": (", ", ": "), "ensure_ascii": True},
}
CONNECT_TYPES = ("application/connect+json", "application/connect+proto")
MAX_CASSETTE_BYTES = 64 * 1024 * 1024  # the largest cassette here is under 6 MB
DIGEST_OVER = 4096  # request payloads (parts, members, bodies, JSON strings) larger than this: sha256 and size
GZIP_OVER = 16 * 1024  # response frames larger than this are stored gzipped when that makes them a third or less
PAYLOAD_MARK = "[payload:{}]"
DIGEST_MARK = "[sha256:{}, {} bytes]"
NDJSON_TYPES = ("application/x-ndjson", "application/ndjson", "application/jsonl", "application/json-seq")


class CassetteError(Exception):
    """A cassette that is malformed, or holds a credential. The message says where."""


# --- Content: what a cassette keeps by name or by digest -------------------------------------------------------------

PAYLOAD_MIN = 256  # a known payload shorter than this is kept as it is: a short text may be in anything


@attrs.frozen
class Payloads:
    """The payloads a cassette keeps by name (``[payload:NAME]``): what the app delivers to every box.

    ``named`` maps a name to the payload's bytes as the app has them now (``known_payloads()``: the cell
    kernel's package and loader). Each is found as it goes on the wire: its text, or shell-quoted in a command line
    (``[payload:NAME:sh]``), in a JSON string, in base64 inside one, or in a part, member or body. Kept by
    name, a kernel edit changes no cassette; replay checks each request carries exactly the current one.
    """

    named: Mapping[str, bytes] = attrs.field(factory=dict)
    _forms: tuple[tuple[str, str], ...] = attrs.field(init=False, repr=False)

    @_forms.default
    def _make_forms(self) -> tuple[tuple[str, str], ...]:
        forms = []
        for name, data in self.named.items():
            if len(data) < PAYLOAD_MIN:
                continue
            text = data.decode("utf-8", "surrogateescape")
            quoted = shlex.quote(text)
            if quoted != text:
                forms.append((quoted, PAYLOAD_MARK.format(f"{name}:sh")))
            forms.append((text, PAYLOAD_MARK.format(name)))
        # Longest first: a quoted form holds pieces of the plain one.
        return tuple(sorted(forms, key=lambda form: -len(form[0])))

    def __bool__(self) -> bool:
        return bool(self._forms)

    def mark_text(self, text: str) -> str:
        """``text`` with each known payload replaced by its mark."""
        for form, mark in self._forms:
            if form in text:
                text = text.replace(form, mark)
        return text

    def mark_bytes(self, data: bytes) -> bytes:
        """``data`` with each known payload replaced by its mark."""
        for form, mark in self._forms:
            raw = form.encode("utf-8", "surrogateescape")
            if raw in data:
                data = data.replace(raw, mark.encode())
        return data

    def _mark_string(self, text: str) -> str:
        marked = self.mark_text(text)
        if marked == text and len(text) > PAYLOAD_MIN and len(text) % 4 == 0 and _BASE64.fullmatch(text):
            try:
                decoded = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                return text
            inside = self.mark_bytes(decoded)
            if inside != decoded:
                return base64.b64encode(inside).decode()
        return marked

    def content(self, value: Any) -> Any:
        """A request's JSON value as a cassette keeps it: known payloads by mark, then each string still over
        ``DIGEST_OVER`` bytes as ``[sha256:HEX, N bytes]``."""
        if isinstance(value, str):
            marked = self._mark_string(value).encode("utf-8", "surrogatepass")
            if len(marked) > DIGEST_OVER:
                return DIGEST_MARK.format(hashlib.sha256(marked).hexdigest(), len(marked))
            return marked.decode("utf-8", "surrogatepass")
        if isinstance(value, list):
            return [self.content(item) for item in value]
        if isinstance(value, Mapping):
            return {key: self.content(item) for key, item in value.items()}
        return value

    def mark_json(self, value: Any) -> Any:
        """A response's JSON value with each known payload in its strings replaced by its mark."""
        if isinstance(value, str):
            return self.mark_text(value)
        if isinstance(value, list):
            return [self.mark_json(item) for item in value]
        if isinstance(value, Mapping):
            return {key: self.mark_json(item) for key, item in value.items()}
        return value

    def fill_json(self, value: Any) -> Any:
        """A stored response's JSON value with each mark replaced by the payload as it is now."""
        if isinstance(value, str):
            if "[payload:" in value:
                for form, mark in self._forms:
                    value = value.replace(mark, form)
            return value
        if isinstance(value, list):
            return [self.fill_json(item) for item in value]
        if isinstance(value, Mapping):
            return {key: self.fill_json(item) for key, item in value.items()}
        return value


NO_PAYLOADS = Payloads()


def known_payloads() -> Payloads:
    """What every cassette keeps by name: the in-box code core delivers to a box now (``mainsdk.kernel_start``):
    the cell kernel's loader (``kernel-loader``, on the command line) and its package (``kernel``, on stdin after
    the token), and the wrapper of every one-shot Python run (``python-run``, ``mainsdk.figures.wrapper()`` on the
    command line). Read at each call, so a replay made after an edit checks the edited one."""
    from mainsdk import figures, kernel_start

    return Payloads(
        {
            "kernel": kernel_start.package_bytes(),
            "kernel-loader": kernel_start.kernel_files()["loader.py"].encode(),
            "python-run": figures.wrapper().encode(),
        }
    )


# --- Payloads: one body or one frame ----------------------------------------------------------------------------------


def _dump_json(value: Any, style: str, newline: bool) -> bytes:
    return (json.dumps(value, **JSON_STYLES[style]) + ("\n" if newline else "")).encode()


def encode_payload(data: bytes, *, json_hint: bool = True) -> dict[str, Any]:
    """Store bytes as JSON when they are JSON that dumps back to the same bytes, else as text or base64."""
    if json_hint:
        try:
            value = json.loads(data)
        except ValueError:
            value = None
        else:
            newline = data.endswith(b"\n")
            for style in JSON_STYLES:
                if _dump_json(value, style, newline) == data:
                    stored: dict[str, Any] = {"json": value}
                    if style != "compact":
                        stored["style"] = style
                    if newline:
                        stored["newline"] = True
                    return stored
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def response_payload(data: bytes, *, json_hint: bool = True, payloads: Payloads | None = None) -> dict[str, Any]:
    """A response frame as ``encode_payload`` stores it, with known payloads by name in its JSON strings; gzipped
    (``{"gzip": base64}``) when over ``GZIP_OVER`` and that makes it a third of its size or less."""
    stored = encode_payload(data, json_hint=json_hint)
    if payloads and "json" in stored:
        marked = payloads.mark_json(stored["json"])
        if marked != stored["json"]:
            return {**stored, "json": marked}  # filled in at replay: never gzipped with the payload inside
    if len(data) > GZIP_OVER:
        packed = gzip.compress(data, compresslevel=9, mtime=0)
        if len(packed) * 3 <= len(data):
            return {"gzip": base64.b64encode(packed).decode()}
    return stored


def request_payload(data: bytes, payloads: Payloads | None = None, *, json_hint: bool = True) -> dict[str, Any]:
    """A request's part, member, frame or body as a cassette keeps it: JSON by value (``Payloads.content``: known
    payloads by name, long strings by digest), anything else with known payloads by name, and then, over
    ``DIGEST_OVER`` bytes (wheels, archives, uploads), as its ``{"sha256", "size"}``."""
    payloads = payloads or NO_PAYLOADS
    stored = encode_payload(data, json_hint=json_hint)
    if "json" in stored:
        stored["json"] = payloads.content(stored["json"])
        if len(json.dumps(stored["json"])) <= 16 * DIGEST_OVER:
            return stored
    marked = payloads.mark_bytes(data)
    if len(marked) > DIGEST_OVER:
        return {"sha256": hashlib.sha256(marked).hexdigest(), "size": len(marked)}
    return encode_payload(marked, json_hint=False)


def decode_payload(stored: Mapping[str, Any], payloads: Payloads | None = None) -> bytes:
    """The bytes of a stored payload (a response's known payloads filled in from ``payloads``)."""
    if "gzip" in stored:
        return gzip.decompress(base64.b64decode(stored["gzip"], validate=True))
    if "json" in stored:
        value = payloads.fill_json(stored["json"]) if payloads else stored["json"]
        return _dump_json(value, stored.get("style", "compact"), bool(stored.get("newline")))
    if "text" in stored:
        return str(stored["text"]).encode("utf-8")
    if "base64" in stored:
        return base64.b64decode(stored["base64"], validate=True)
    return b""


# --- Bodies -----------------------------------------------------------------------------------------------------------


def media_type(headers: Mapping[str, str]) -> str:
    """The content type without parameters, lowercase."""
    for name, value in headers.items():
        if name.lower() == "content-type":
            return value.split(";", 1)[0].strip().lower()
    return ""


def _content_type(headers: Mapping[str, str]) -> str:
    return next((v for k, v in headers.items() if k.lower() == "content-type"), "")


def envelopes(data: bytes) -> list[tuple[int, bytes]] | None:
    """Connect envelopes (1 flag byte, 4-byte big-endian length, payload), or None when ``data`` is not exactly that."""
    frames = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < 5:
            return None
        flags, length = struct.unpack(">BI", data[pos : pos + 5])
        if len(data) - pos - 5 < length:
            return None
        frames.append((flags, data[pos + 5 : pos + 5 + length]))
        pos += 5 + length
    return frames


def envelope(flags: int, payload: bytes) -> bytes:
    """One Connect envelope."""
    return struct.pack(">BI", flags, len(payload)) + payload


def parse_multipart(data: bytes, content_type: str) -> list[dict[str, Any]] | None:
    """The parts of a multipart/form-data body (name, filename, content type, bytes), or None if it is not one."""
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    if match is None:
        return None
    delimiter = b"--" + match.group(1).encode()
    chunks = data.split(delimiter)
    if len(chunks) < 3 or not chunks[-1].startswith(b"--"):
        return None
    parts = []
    for chunk in chunks[1:-1]:
        head, sep, body = chunk.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        if not sep:
            return None
        headers = {}
        for line in head.decode("utf-8", "replace").split("\r\n"):
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        disposition = headers.get("content-disposition", "")
        name = re.search(r'\bname="([^"]*)"', disposition)
        filename = re.search(r'\bfilename="([^"]*)"', disposition)
        parts.append(
            {
                "name": name.group(1) if name else None,
                "filename": filename.group(1) if filename else None,
                "content_type": headers.get("content-type"),
                "data": body.removesuffix(b"\r\n"),
            }
        )
    return parts


def parse_targz(data: bytes) -> list[dict[str, Any]] | None:
    """The members of a gzipped tar (name, kind, bytes), or None when ``data`` is not one."""
    if not data.startswith(b"\x1f\x8b"):
        return None
    try:
        members = []
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            for member in archive.getmembers():
                content = b""
                if member.isfile():
                    extracted = archive.extractfile(member)
                    content = extracted.read() if extracted is not None else b""
                kind = "file" if member.isfile() else "dir" if member.isdir() else "other"
                members.append({"name": member.name, "kind": kind, "data": content})
        return members
    except (tarfile.TarError, OSError, EOFError, gzip.BadGzipFile):
        return None


def encode_body(
    data: bytes, headers: Mapping[str, str], *, request: bool, payloads: Payloads | None = None
) -> dict[str, Any] | None:
    """Store a whole body in the most readable form that gives its bytes (or, for requests, its meaning) back.

    A request is kept by content (``request_payload``); a response byte for byte, its known payloads by name
    and its large frames gzipped (``response_payload``). ``payloads``: what is kept by name (``Payloads``).
    """
    if not data:
        return None
    payloads = payloads or NO_PAYLOADS

    def payload(part: bytes, json_hint: bool = True) -> dict[str, Any]:
        if request:
            return request_payload(part, payloads, json_hint=json_hint)
        return response_payload(part, json_hint=json_hint, payloads=payloads)

    kind = media_type(headers)
    if kind in CONNECT_TYPES and (frames := envelopes(data)) is not None:
        return {"connect": [{"flags": f, **payload(p, kind.endswith("json"))} for f, p in frames]}
    if kind in NDJSON_TYPES or (kind == "" and data.startswith(b"{") and b"}\n{" in data):
        lines = data.split(b"\n")
        stored: dict[str, Any] = {"ndjson": [payload(line) for line in lines[:-1]]}
        if lines[-1]:
            stored["ndjson"].append(payload(lines[-1]))
            stored["end_newline"] = False
        if request or decode_body(stored, payloads) == data:
            return stored
    if request and kind == "multipart/form-data":
        parts = parse_multipart(data, _content_type(headers))
        if parts is not None:
            return {"multipart": [{k: v for k, v in p.items() if k != "data"} | payload(p["data"]) for p in parts]}
    if request and (members := parse_targz(data)) is not None:
        return {"targz": [{k: v for k, v in m.items() if k != "data"} | payload(m["data"]) for m in members]}
    return payload(data, "json" in kind or kind == "")


def body_frames(
    stored: Mapping[str, Any] | None, payloads: Payloads | None = None
) -> list[tuple[bytes, Mapping[str, Any]]]:
    """A stored response body as the frames to send: (bytes, the frame's own ``at``/``after``), each known
    payload's mark filled in from ``payloads``."""
    if not stored:
        return []
    if "connect" in stored:
        return [(envelope(int(f.get("flags", 0)), decode_payload(f, payloads)), f) for f in stored["connect"]]
    if "ndjson" in stored:
        lines = list(stored["ndjson"])
        frames = []
        for index, line in enumerate(lines):
            last = index == len(lines) - 1
            end = b"" if last and stored.get("end_newline") is False else b"\n"
            frames.append((decode_payload(line, payloads) + end, line))
        return frames
    if "multipart" in stored or "targz" in stored:
        raise CassetteError("a multipart or tar body is a request body; a response cannot be replayed from it")
    return [(decode_payload(stored, payloads), {})]


def decode_body(stored: Mapping[str, Any] | None, payloads: Payloads | None = None) -> bytes:
    """The bytes of a stored response body (all frames)."""
    return b"".join(data for data, _ in body_frames(stored, payloads))


def is_stream(stored: Mapping[str, Any] | None) -> bool:
    """Whether a stored body is sent frame by frame."""
    return bool(stored) and ("connect" in stored or "ndjson" in stored)  # type: ignore[operator]


# --- Meaning, for matching --------------------------------------------------------------------------------------------


def _meaning(stored: Mapping[str, Any], payloads: Payloads) -> Any:
    # As a request is kept (``request_payload``) whoever wrote it: a cassette written by hand, or by an older
    # recorder, with a long string or a whole upload in it matches the same content.
    if "sha256" in stored:
        return ("sha256", stored["sha256"], stored.get("size"))
    if "json" in stored:
        return ("json", payloads.content(stored["json"]))
    data = payloads.mark_bytes(decode_payload(stored))
    if len(data) > DIGEST_OVER:
        return ("sha256", hashlib.sha256(data).hexdigest(), len(data))
    try:
        return ("json", payloads.content(json.loads(data)))
    except ValueError:
        return ("bytes", data)


def body_meaning(stored: Mapping[str, Any] | None, payloads: Payloads | None = None) -> Any:
    """What a request body says, for matching: JSON by value, multipart by part, tar by member, else bytes; each
    known payload by name and what is over ``DIGEST_OVER`` by digest, as ``request_payload`` keeps it."""
    p = payloads or NO_PAYLOADS
    if not stored:
        return ("empty",)
    if "connect" in stored:
        return ("connect", [(f.get("flags", 0), _meaning(f, p)) for f in stored["connect"]])
    if "ndjson" in stored:
        return ("ndjson", [_meaning(line, p) for line in stored["ndjson"]])
    if "multipart" in stored:
        return ("multipart", [(m.get("name"), m.get("filename"), _meaning(m, p)) for m in stored["multipart"]])
    if "targz" in stored:
        return ("targz", sorted((m["name"], m.get("kind"), _meaning(m, p)) for m in stored["targz"]))
    return _meaning(stored, p)


# --- Credentials ------------------------------------------------------------------------------------------------------


def _credential_in(text: str) -> str | None:
    """The first credential-looking value in ``text`` that is not a known fake, or None."""
    for pattern in CREDENTIAL_PATTERNS:
        for match in pattern.finditer(text):
            if match.group(0) not in FAKE_KEYS:
                return match.group(0)
    return None


def _walk(value: Any, where: str) -> Iterator[tuple[str, Any, Any]]:
    """Every (location, key, value) inside a JSON value; key is the field name for mapping items."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield f"{where}/{key}", key, item
            yield from _walk(item, f"{where}/{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield f"{where}/{index}", None, item
            yield from _walk(item, f"{where}/{index}")


_BASE64 = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}")


def _unbase64(text: str) -> str | None:
    """The bytes a base64-looking string holds, as latin-1 text (any byte string can be searched), or None."""
    if len(text) % 4 or not _BASE64.fullmatch(text):
        return None
    try:
        return base64.b64decode(text, validate=True).decode("latin-1")
    except (binascii.Error, ValueError):
        return None


def _hint(value: str) -> str:
    """Name a found value without repeating it: its first characters and length."""
    return f"a credential-looking value {value[:6]!r}... ({len(value)} characters)"


def find_credentials(cassette: Mapping[str, Any]) -> list[str]:
    """Where a cassette holds something that looks like a credential: one line per finding, none repeating it.

    Looks at credential headers and JSON fields with a value, at every string
    for known key formats, and inside base64 (binary bodies, E2B's output).
    """
    found: list[str] = []
    for location, key, value in _walk(cassette, ""):
        credential_key = isinstance(key, str) and (key.lower() in CREDENTIAL_HEADERS or key in CREDENTIAL_FIELDS)
        if credential_key and isinstance(value, str) and _SCRUBBED_HEADER.fullmatch(value) is None:
            found.append(f"{location}: a {key} with a value")
            continue
        if isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value):
            name, item = value  # a query pair
            if name.lower() in CREDENTIAL_QUERY and item != SCRUBBED and location.rsplit("/", 2)[-2] == "query":
                found.append(f"{location}: a {name} query parameter with a value")
        if isinstance(value, str):
            for text in (value, _unbase64(value)):
                if text is not None and (hit := _credential_in(text)) is not None:
                    found.append(f"{location}: {_hint(hit)}")
                    break
    return found


def _scrub_named(text: str, named: Mapping[str, str]) -> str:
    for name, value in named.items():
        if value:
            text = text.replace(value, NAMED_MARK.format(name))
    return text


def _scrub_text(text: str, values: Sequence[str], named: Mapping[str, str] = {}) -> str:
    text = _scrub_named(text, named)
    for value in values:
        if value:
            text = text.replace(value, SCRUBBED)
    for pattern in CREDENTIAL_PATTERNS:
        text = pattern.sub(lambda m: m.group(0) if m.group(0) in FAKE_KEYS else SCRUBBED, text)
    return text


def _scrub_string(text: str, values: Sequence[str], named: Mapping[str, str] = {}) -> str:
    """A string scrubbed, looking inside it too when it is base64."""
    decoded = _unbase64(text)
    if decoded is not None:
        cleaned = _scrub_text(decoded, values, named)
        if cleaned != decoded:
            return base64.b64encode(cleaned.encode("latin-1")).decode()
    return _scrub_text(text, values, named)


def scrub(value: Any, values: Sequence[str] = (), named: Mapping[str, str] | None = None) -> Any:
    """A copy of a cassette (or any part of one) with every credential replaced by ``[scrubbed]``.

    ``values`` are known secret values (the recorder's own key) to replace
    wherever they appear. Credential headers, JSON fields and query parameters
    are replaced whatever their value; everything else by pattern. ``named``
    (secret name to value) are replaced first by ``[scrubbed:NAME]``, in a
    credential header too ("Bearer [scrubbed:NAME]"): replay scrubs a request the
    same way (``scrub_named``), so it still checks which value went where.
    """
    named = named or {}
    if isinstance(value, str):
        return _scrub_string(value, values, named)
    if isinstance(value, list):
        return [scrub(item, values, named) for item in value]
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(item, str) and (key.lower() in CREDENTIAL_HEADERS or key in CREDENTIAL_FIELDS):
                marked = _scrub_named(item, named)
                out[key] = marked if _SCRUBBED_HEADER.fullmatch(marked) else SCRUBBED
            elif key == "query" and isinstance(item, list):
                out[key] = [
                    [k, SCRUBBED if str(k).lower() in CREDENTIAL_QUERY else scrub(v, values, named)] for k, v in item
                ]
            else:
                out[key] = scrub(item, values, named)
        return out
    return value


def _pointer_matches(parts: Sequence[str], pattern: Sequence[str]) -> bool:
    return len(parts) == len(pattern) and all(want in ("*", got) for got, want in zip(parts, pattern, strict=True))


def scrub_fields(value: Any, patterns: Sequence[str], known: Mapping[str, str] | None = None) -> Any:
    """A copy of a JSON value with the string at each pointer matching one of ``patterns`` scrubbed.

    ``patterns`` are JSON pointers whose ``*`` stands for any key or index (``Profile.secret_fields``).
    A field holding a ``known`` secret's value (name to value), alone or after a scheme word ("Bearer "),
    becomes ``[scrubbed:NAME]`` (``Bearer [scrubbed:NAME]``); any other value, ``[scrubbed]``: so the saved
    cassette holds no value there whatever it was, and replay, scrubbing a request the same way, still tells
    which known value went to which field.
    """
    wanted = [pattern.split("/")[1:] for pattern in patterns]
    if not wanted:
        return value

    def walk(item: Any, parts: tuple[str, ...]) -> Any:
        if isinstance(item, Mapping):
            return {key: walk(child, (*parts, str(key))) for key, child in item.items()}
        if isinstance(item, list):
            return [walk(child, (*parts, str(index))) for index, child in enumerate(item)]
        if isinstance(item, str) and any(_pointer_matches(parts, pattern) for pattern in wanted):
            marked = _scrub_named(item, known or {})
            return marked if _SCRUBBED_HEADER.fullmatch(marked) else SCRUBBED
        return item

    return walk(value, ())


def scrub_request_fields(request: Mapping[str, Any], patterns: Sequence[str], known: Mapping[str, str]) -> Any:
    """A request (as a cassette stores it) with its JSON body's ``patterns`` fields scrubbed (``scrub_fields``)."""
    body = request.get("body")
    if not patterns or not isinstance(body, Mapping) or "json" not in body:
        return request
    return {**request, "body": {**body, "json": scrub_fields(body["json"], patterns, known)}}


def secret_field_values(interactions: Sequence[Mapping[str, Any]], patterns: Sequence[str]) -> list[str]:
    """Where a request holds anything but a mark in one of ``patterns``' fields: one line each, no value shown."""
    return [
        f"interactions[{index}].request holds a value in a secret field ({', '.join(patterns)}); it must be "
        f"{SCRUBBED} or {NAMED_MARK.format('NAME')}"
        for index, interaction in enumerate(interactions)
        if scrub_request_fields(interaction["request"], patterns, {}) != interaction["request"]
    ]


def scrub_named(value: Any, named: Mapping[str, str]) -> Any:
    """A copy of ``value`` with only the ``named`` secrets' values replaced by ``[scrubbed:NAME]``, as ``scrub``
    does: what replay does to a request before matching it (base64 strings looked into too)."""
    if not named:
        return value
    if isinstance(value, str):
        decoded = _unbase64(value)
        if decoded is not None:
            cleaned = _scrub_named(decoded, named)
            if cleaned != decoded:
                return base64.b64encode(cleaned.encode("latin-1")).decode()
        return _scrub_named(value, named)
    if isinstance(value, list):
        return [scrub_named(item, named) for item in value]
    if isinstance(value, Mapping):
        return {key: scrub_named(item, named) for key, item in value.items()}
    return value


# --- The cassette -----------------------------------------------------------------------------------------------------


@attrs.define
class Cassette:
    """A loaded cassette: its metadata and interactions, checked."""

    meta: dict[str, Any]
    interactions: list[dict[str, Any]]
    path: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able cassette."""
        return {"format": FORMAT, "meta": self.meta, "interactions": self.interactions}

    def dumps(self) -> str:
        """The cassette as text: JSON, indented, non-ASCII kept readable."""
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"

    def save(self, path: Path | None = None) -> Path:
        """Write the cassette (refusing one that holds a credential)."""
        target = path or self.path
        if target is None:
            raise CassetteError("the cassette has no path to save to")
        check(self.to_dict(), str(target))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.dumps(), encoding="utf-8")
        return target

    def has_status(self, status: int, *, header: str | None = None) -> bool:
        """Whether a response has ``status`` (and, if given, the header ``header``)."""
        for interaction in self.interactions:
            response = interaction.get("response") or {}
            if response.get("status") == status and (
                header is None or any(k.lower() == header for k in (response.get("headers") or {}))
            ):
                return True
        return False

    def has_fault(self, kind: str) -> bool:
        """Whether an interaction carries a fault of ``kind`` (``reset``, ``delay``)."""
        return any((i.get("fault") or {}).get("kind") == kind for i in self.interactions)


def check(data: Mapping[str, Any], where: str) -> None:
    """Refuse a cassette that is malformed or holds a credential, naming the place."""
    if data.get("format") != FORMAT:
        raise CassetteError(f"{where}: format must be {FORMAT!r}, not {data.get('format')!r}")
    meta = data.get("meta")
    if not isinstance(meta, Mapping):
        raise CassetteError(f"{where}: meta must be a mapping with provider, api, date and made")
    missing = [key for key in ("provider", "api", "date", "made") if not meta.get(key)]
    if missing:
        raise CassetteError(f"{where}: meta lacks {', '.join(missing)}")
    if meta["made"] not in MADE:
        raise CassetteError(f"{where}: meta.made must be recorded or authored, not {meta['made']!r}")
    edited = meta.get("edited")
    if edited is not None and not (isinstance(edited, list) and all(isinstance(e, str) and e for e in edited)):
        raise CassetteError(
            f"{where}: meta.edited must be a list saying what was changed by hand, e.g. ['stdout: ...'], not {edited!r}"
        )
    interactions = data.get("interactions")
    if not isinstance(interactions, list):
        raise CassetteError(f"{where}: interactions must be a list")
    for index, interaction in enumerate(interactions):
        request = interaction.get("request") if isinstance(interaction, Mapping) else None
        if not isinstance(request, Mapping) or not request.get("method") or not request.get("path"):
            raise CassetteError(f"{where}: interactions[{index}].request needs a method and a path")
        # Each part's type before its fields: a response or fault of another type raised AttributeError here.
        response = interaction.get("response")
        if response is not None and not (isinstance(response, Mapping) and isinstance(response.get("status"), int)):
            raise CassetteError(f"{where}: interactions[{index}].response needs a status (an object with one)")
        fault = interaction.get("fault")
        if fault is not None and not (isinstance(fault, Mapping) and fault.get("kind") in ("reset", "delay")):
            raise CassetteError(f"{where}: interactions[{index}].fault must be an object whose kind is reset or delay")
    found = find_credentials(data)
    if found:
        raise CassetteError(
            f"{where} holds credentials; re-record it (the recorder scrubs them) or replace each with "
            f"{SCRUBBED!r}:\n  " + "\n  ".join(found)
        )


def mark_edited(meta: dict[str, Any], what: str) -> None:
    """Say in ``meta.edited`` that ``what`` was changed by hand (once; the list keeps its order)."""
    edited = meta.get("edited")
    listed: list[str] = list(edited) if isinstance(edited, list) else ([edited] if isinstance(edited, str) else [])
    if what not in listed:
        listed.append(what)
    meta["edited"] = listed


def authored_meta(base: Mapping[str, Any], *, test: str, how: str, edited: Sequence[str] = ()) -> dict[str, Any]:
    """The meta of a cassette written by hand from ``base`` (a recording or another authored cassette).

    Never a copy of the base's labels: ``made`` is ``authored``, what the base
    was made by (``sdk``, ``how``, its edits) is dropped, and ``edited`` lists
    only what this cassette changed.
    """
    meta = {key: base[key] for key in ("provider", "api", "date") if key in base}
    meta.update(made="authored", test=test, how=how)
    if edited:
        meta["edited"] = list(edited)
    return meta


FAULT_EDIT = "fault:"  # a ``meta.edited`` entry for a fault written by hand: no live provider fails on cue


def _authored_meta_of(path: Path) -> tuple[Mapping[str, Any], list[Any]] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    meta = data.get("meta") if isinstance(data, Mapping) else None
    if not isinstance(meta, Mapping) or meta.get("made") != "authored":
        return None
    interactions = data.get("interactions") if isinstance(data.get("interactions"), list) else []
    return meta, interactions


def _edits(meta: Mapping[str, Any]) -> list[str]:
    edited = meta.get("edited")
    return [str(e) for e in edited] if isinstance(edited, list) else ([str(edited)] if edited else [])


def keep_on_record(path: Path) -> str | None:
    """Why recording must not replace the cassette at ``path``, or None when it may.

    A live run cannot reproduce an authored cassette that holds faults (an interaction's ``fault``,
    ``meta.fault``, or a ``fault:`` entry of ``meta.edited``): recording over it would lose it. Any other hand
    edit is what a live run must reproduce, so it is recorded again (``hand_set``). A cassette that is not
    there, or is not a cassette, may be written.
    """
    found = _authored_meta_of(path)
    if found is None:
        return None
    meta, interactions = found
    faults = sorted(
        {str((i.get("fault") or {}).get("kind")) for i in interactions if isinstance(i, Mapping) and i.get("fault")}
    )
    fault_edits = [edit for edit in _edits(meta) if edit.startswith(FAULT_EDIT)]
    reasons = []
    if fault_edits:
        reasons.append("edited by hand: " + "; ".join(fault_edits))
    if faults or meta.get("fault"):
        reasons.append("holds authored faults" + (f" ({', '.join(faults)})" if faults else ""))
    return f"{path.name} is authored and {' and '.join(reasons)}; a live run cannot reproduce it" if reasons else None


def hand_set(path: Path) -> list[str]:
    """What was set by hand in the authored cassette at ``path`` that a live recording must reproduce.

    Its ``meta.edited`` entries but the faults (``keep_on_record`` keeps those): stdout a stand-in without
    the provider's network could not give, a dropped pace. Record mode records such a cassette again: the
    test's own assertions are the expectation the live run must meet. A pass replaces it with the recording,
    which notes what it re-checked (``meta.rechecked``); a failure keeps it and is the flag to review it.
    """
    found = _authored_meta_of(path)
    return [] if found is None else [edit for edit in _edits(found[0]) if not edit.startswith(FAULT_EDIT)]


def _read_cassette_file(path: Path) -> bytes:
    """The bytes of the regular file at ``path``, at most ``MAX_CASSETTE_BYTES``; ``CassetteError`` otherwise.

    Opened without blocking and judged by fstat of the open file: a FIFO blocked ``check`` for ever, and
    ``/dev/zero`` filled its memory.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise CassetteError(f"{path}: not a regular file (a FIFO, a device or a folder); name a cassette")
            os.set_blocking(fd, True)
            data = file.read(MAX_CASSETTE_BYTES + 1)
    except OSError as exc:
        raise CassetteError(f"{path}: cannot read the cassette: {exc.strerror or exc}") from None
    if len(data) > MAX_CASSETTE_BYTES:
        raise CassetteError(f"{path}: over {MAX_CASSETTE_BYTES:,} bytes, larger than a cassette may be")
    return data


def load(path: Path | str) -> Cassette:
    """Read and check a cassette file. A cassette holding a credential is refused (``CassetteError``)."""
    path = Path(path)
    data_bytes = _read_cassette_file(path)
    try:
        data = json.loads(data_bytes.decode("utf-8"))
        if not isinstance(data, Mapping):
            raise CassetteError(f"{path}: a cassette is a JSON object")
        check(data, str(path))
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError too
        raise CassetteError(f"{path}: cannot read the cassette: {exc}") from None
    except RecursionError:
        raise CassetteError(f"{path}: nested too deeply to be a cassette") from None
    return Cassette(dict(data["meta"]), list(data["interactions"]), path)


def iter_files(paths: Iterable[Path]) -> Iterator[Path]:
    """Every cassette file under ``paths`` (files as they are, folders searched for ``*.json``)."""
    for path in paths:
        if path.is_dir():
            yield from sorted(path.rglob("*.json"))
        else:
            yield path
