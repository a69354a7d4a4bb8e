"""The replay server: a provider on loopback answering from a cassette; in record mode, a forwarding proxy.

The standard library's ``ThreadingHTTPServer``, not a framework: replay needs
control of the socket itself (one HTTP/1.1 chunk per recorded frame, a reset
that closes the connection mid-stream, a delay before the head) and a thread
per connection so a held stream never blocks the kill request that ends it.
Record mode forwards with httpx, streaming, so the driver sees the provider's
frames as they come.

Replay is strict: a request is matched by upstream, method, path, query and
body (JSON by value, multipart by part, tar by member), never by a credential
header; the requests of one sandbox must come in the recorded order; a request
the cassette lacks gets a 599 answer and fails the test, naming the nearest
recorded request and how it differs. Nothing is ever forwarded in replay.
"""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import json
import re
import socket
import struct
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import attrs
from mainsdk import driver

from mainsdk_conformance.cassette import (
    Cassette,
    CassetteError,
    Payloads,
    body_frames,
    encode_body,
    is_stream,
    known_payloads,
    load,
    scrub,
    scrub_named,
    scrub_request_fields,
    secret_field_values,
)
from mainsdk_conformance.profiles import Profile
from mainsdk_conformance.replay_match import Matching, _describe

# Never sent on (mainsdk.driver.HOP_BY_HOP, RFC 9110 7.6.1), and Host: replay routes by its own.
HOP_BY_HOP = driver.HOP_BY_HOP | frozenset({"host"})
# Response headers that describe the transfer, not the answer; replay sets its own framing.
NOT_RECORDED = HOP_BY_HOP | {"content-length", "content-encoding", "date"}
UNMATCHED_STATUS = 599
# An RFC 3339 time in a response (E2B's startedAt/endAt): replay moves each by one offset, so the recorded
# session starts now. A driver that measures a provider's cap from the server's start time would otherwise
# see every session of a cassette replayed an hour after it was made as past its cap.
_WHOLE = "%Y-%m-%dT%H:%M:%S"
_RFC3339 = re.compile(rb"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d{1,9})?(Z|[+-]\d\d:\d\d)")
WAIT_CAP = 30.0  # the longest a recorded frame waits for the request that caused it


def parse_upstreams(pairs: Sequence[str]) -> dict[str, str]:
    """``["api=https://x", ...]`` as a mapping."""
    upstreams = {}
    for pair in pairs:
        name, sep, url = pair.partition("=")
        if not sep or not name or not url:
            raise ValueError(f"--conformance-upstream takes NAME=URL, not {pair!r}")
        upstreams[name] = url.rstrip("/")
    return upstreams


@attrs.define
class Received:
    """One request the server saw, and what became of it."""

    upstream: str
    method: str
    path: str
    lane: str
    arrived: float
    index: int | None = None  # the interaction it matched (or, recording, the one it wrote)
    responded: float | None = None
    problem: str | None = None


class ReplayServer(Matching):
    """A provider on 127.0.0.1, one ephemeral port per upstream, replaying or recording one cassette."""

    def __init__(
        self,
        profile: Profile,
        path: Path,
        *,
        cassette: Cassette | None,
        upstreams: Mapping[str, str] | None = None,
        secrets: Sequence[str] = (),
        named: Mapping[str, str] | None = None,
        known: Mapping[str, str] | None = None,
        payloads: Payloads | None = None,
    ) -> None:
        self.profile = profile
        # Kept by name in requests and responses (the cell kernel, by default as core has it now): a kernel edit
        # changes no cassette, and replay checks each request carries exactly the current kernel.
        self.payloads = known_payloads() if payloads is None else payloads
        # Secrets scrubbed by name (``cassette.scrub``): from the saved cassette, and from each request replayed
        # before it is matched, so the match still says which value went where.
        self._named = dict(named or {})
        # Secrets marked by name where they fill the profile's secret fields (egress headers) and nowhere else.
        self._known = dict(known or {})
        self.path = path
        self.recording = upstreams is not None
        self.upstreams = dict(upstreams or {})
        self._secrets = tuple(secrets)
        self.cassette = cassette or Cassette({}, [], path)
        self._missing = cassette is None and not self.recording
        self.received: list[Received] = []
        self._used = [False] * len(self.cassette.interactions)
        self._lanes: dict[str, int] = {}
        self._problems: list[str] = []
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._servers: dict[str, http.server.ThreadingHTTPServer] = {}
        self._threads: list[threading.Thread] = []
        self._client: Any = None
        self._clock_shift = 0  # whole seconds added to every recorded time in a replayed answer (see _RFC3339)
        keys = "|".join(re.escape(key) for key in profile.epoch_ms_keys)
        self._epoch_ms = re.compile(rb'("(?:' + keys.encode() + rb')"\s*:\s*)(\d{12,14})\b') if keys else None

    @classmethod
    def replayer(
        cls,
        profile: Profile,
        path: Path,
        *,
        named: Mapping[str, str] | None = None,
        known: Mapping[str, str] | None = None,
        payloads: Payloads | None = None,
    ) -> ReplayServer:
        """Replay ``path``; a missing file fails each request that comes, a bad one raises ``CassetteError`` now.

        ``named``: secret name to value, replaced by ``[scrubbed:NAME]`` in each request before it is matched;
        ``known``: the same, in the profile's ``secret_fields`` only (any other value there is ``[scrubbed]``).
        A cassette holding anything but a mark in a secret field is refused (``CassetteError``), naming where.
        """
        cassette = load(path) if path.exists() else None
        found = secret_field_values(cassette.interactions, profile.secret_fields) if cassette is not None else []
        if found:
            raise CassetteError(f"{path}: " + "; ".join(found))
        return cls(profile, path, cassette=cassette, named=named, known=known, payloads=payloads)

    @classmethod
    def recorder(
        cls,
        profile: Profile,
        path: Path,
        *,
        upstreams: Mapping[str, str] | None = None,
        secrets: Sequence[str] = (),
        named: Mapping[str, str] | None = None,
        known: Mapping[str, str] | None = None,
        payloads: Payloads | None = None,
    ) -> ReplayServer:
        """Forward to the provider (the profile's upstreams, overridden by ``upstreams``) and record into ``path``."""
        merged = dict(profile.upstreams) | dict(upstreams or {})
        sdk = ""
        if profile.sdk:
            try:
                sdk = f"{profile.sdk} {metadata.version(profile.sdk)}"
            except metadata.PackageNotFoundError:
                sdk = ""
        meta = {
            "provider": profile.name,
            "api": profile.api or "unversioned",
            "date": datetime.date.today().isoformat(),
            "made": "recorded",
            "test": path.stem,
        }
        if sdk:
            meta["sdk"] = sdk
        standins = sorted({url for url in merged.values() if _is_loopback(url)})
        if standins:
            # A provider on this machine is a stand-in, never the real service: what it answered is authored.
            meta["made"] = "authored"
            meta["how"] = f"recorded against a stand-in on this machine ({', '.join(standins)})"
        server = cls(
            profile,
            path,
            cassette=Cassette(meta, [], path),
            upstreams=merged,
            secrets=secrets,
            named=named,
            known=known,
            payloads=payloads,
        )
        return server

    # --- lifecycle ------------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Listen on 127.0.0.1, one ephemeral port per upstream of the profile."""
        if not self.recording:
            earliest = _earliest_time(self.cassette, self._epoch_ms)
            self._clock_shift = 0 if earliest is None else round(time.time() - earliest)
        if self.recording:
            import httpx

            # No read timeout: a provider's long poll or stream may be quiet for long.
            self._client = httpx.Client(timeout=httpx.Timeout(30.0, read=None), follow_redirects=False)
        for name in self.profile.upstreams:
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler(name))
            server.daemon_threads = True
            self._servers[name] = server
            thread = threading.Thread(target=server.serve_forever, name=f"replay-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def url(self, upstream: str = "api") -> str:
        """The base URL to give the driver for ``upstream`` (``http://127.0.0.1:<port>``)."""
        port = self._servers[upstream].server_address[1]
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        """Stop listening; a held frame is released."""
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        for server in self._servers.values():
            server.shutdown()
            server.server_close()
        if self._client is not None:
            self._client.close()

    def save(self) -> Path:
        """Write the recorded cassette, scrubbed; refuses to write one still holding a credential."""
        data = self.cassette.to_dict()
        data["interactions"] = [
            None if i is None else {**i, "request": self._scrub_fields(i["request"])} for i in data["interactions"]
        ]
        data = scrub(data, self._secrets, self._named)
        self.cassette = Cassette(data["meta"], [i for i in data["interactions"] if i is not None], self.path)
        return self.cassette.save()

    def _scrub_fields(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """``request`` with the profile's secret fields scrubbed (``cassette.scrub_fields``)."""
        return dict(scrub_request_fields(request, self.profile.secret_fields, {**self._named, **self._known}))

    # --- what happened --------------------------------------------------------------------------------------------

    def problems(self, *, final: bool) -> list[str]:
        """What went wrong: requests the cassette lacks; with ``final``, also recorded requests that never came."""
        with self._cond:
            problems = list(self._problems)
            if final and not self.recording:
                for index, interaction in enumerate(self.cassette.interactions):
                    if not self._used[index] and not interaction.get("optional"):
                        upstream = interaction.get("upstream", "api")
                        problems.append(
                            f"{self.path}: recorded request #{index} {_describe(interaction['request'], upstream)} "
                            "never came (the driver did less than was recorded)"
                        )
        return problems

    def commands_sent(self) -> int:
        """How many requests started a command (the profile's ``command_paths``)."""
        return sum(1 for r in self.received if self.profile.is_command(r.method, r.path))

    def retry_after_violations(self) -> list[str]:
        """Retries that came sooner than a 429 or 503's Retry-After allowed."""
        violations = []
        for position, got in enumerate(self.received):
            if got.index is None or got.responded is None:
                continue
            response = self.cassette.interactions[got.index].get("response") or {}
            wait = next((v for k, v in (response.get("headers") or {}).items() if k.lower() == "retry-after"), None)
            if response.get("status") not in (429, 503) or wait is None:
                continue
            later = next((r for r in self.received[position + 1 :] if r.lane == got.lane), None)
            if later is not None and later.arrived - got.responded < float(wait) - 0.05:
                violations.append(
                    f"{later.method} {later.path} came {later.arrived - got.responded:.2f}s after a "
                    f"{response['status']} that said Retry-After: {wait}"
                )
        return violations

    # --- serving --------------------------------------------------------------------------------------------------

    def _handler(self, upstream: str) -> type[http.server.BaseHTTPRequestHandler]:
        replay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet: the test report says what matters
                pass

            def _any(self) -> None:
                replay._handle(self, upstream)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _any

        return Handler

    def _handle(self, handler: http.server.BaseHTTPRequestHandler, upstream: str) -> None:
        parts = urlsplit(handler.path)
        headers = {k: v for k, v in handler.headers.items()}
        body = _read_body(handler)
        request: dict[str, Any] = {"method": handler.command, "path": parts.path}
        query = [[k, v] for k, v in parse_qsl(parts.query, keep_blank_values=True)]
        if query:
            request["query"] = query
        kept = {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP | {"content-length"}}
        if kept:
            request["headers"] = kept
        stored_body = encode_body(body, headers, request=True, payloads=self.payloads)
        if stored_body is not None:
            request["body"] = stored_body
        lane = self.profile.lane(parts.path, headers)
        got = Received(upstream, handler.command, parts.path, lane, time.monotonic())
        if self.recording:
            self._forward(handler, upstream, request, parts.query, body, got)
            return
        # As the recorder saved it: the cassette never holds these values.
        request = scrub_named(self._scrub_fields(request), self._named)
        rule = self.profile.broken_rule(handler.command, parts.path, handler.headers)
        if rule is not None:
            # The provider's server refuses it before anything else: answer as it does, and fail the test.
            values = handler.headers.get_all(rule.header) or []
            broken = (
                f"{_describe(request, upstream)}: header {rule.header} {[str(v)[:80] for v in values]!r} breaks "
                f"the server's rule {rule.pattern!r}, one value ({rule.source}); the server answers {rule.status}"
            )
            with self._cond:
                got.problem = broken
                self.received.append(got)
                self._problems.append(broken)
            payload = json.dumps(dict(rule.body)).encode()
            _send_head(handler, rule.status, {"content-type": "application/json"}, length=len(payload))
            handler.wfile.write(payload)
            return
        with self._cond:
            index, problem = self._match(upstream, request, lane)
            self.received.append(got)
            if index is None:
                got.problem = problem
                self._problems.append(problem or "unmatched")
            else:
                got.index = index
                self._used[index] = True
                self._lanes[lane] = self._lanes.get(lane, 0) + 1
                self._cond.notify_all()
        if index is None:
            payload = json.dumps({"error": "mainsdk-conformance replay", "message": problem}).encode()
            _send_head(handler, UNMATCHED_STATUS, {"content-type": "application/json"}, length=len(payload))
            handler.wfile.write(payload)
            return
        self._replay(handler, index, lane, got)

    def _wait_lane(self, lane: str, count: int) -> None:
        """Hold a recorded answer until ``count`` requests of ``lane`` have come, as when it was recorded."""
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self._lanes.get(lane, 0) >= count or self._stopping.is_set(), timeout=WAIT_CAP
            )
            if not ok:
                self._problems.append(
                    f"{self.path}: an answer of sandbox {lane or '-'} waited {WAIT_CAP:.0f}s for request "
                    f"{count} of that sandbox, which never came"
                )

    def _replay(self, handler: http.server.BaseHTTPRequestHandler, index: int, lane: str, got: Received) -> None:
        interaction = self.cassette.interactions[index]
        fault = interaction.get("fault") or {}
        response = interaction.get("response") or {"status": 200}
        if fault.get("kind") == "delay":
            self._stopping.wait(float(fault.get("seconds", 0)))
        reset_after = fault.get("after_frames") if fault.get("kind") == "reset" else None
        if fault.get("kind") == "reset" and reset_after is None:
            _reset(handler)
            got.responded = time.monotonic()
            return
        if response.get("after"):
            self._wait_lane(lane, int(response["after"]))
        body = response.get("body")
        frames = body_frames(body, self.payloads)
        stream = is_stream(body)
        status = int(response["status"])
        recorded_headers = dict(response.get("headers") or {})
        bodiless = handler.command == "HEAD" or status in (204, 304) or 100 <= status < 200
        length = None if stream or bodiless else sum(len(data) for data, _ in frames)
        try:
            _send_head(handler, status, recorded_headers, length=length, chunked=stream and not bodiless)
            got.responded = started = time.monotonic()
            for position, (data, frame) in enumerate(frames):
                if reset_after is not None and position >= int(reset_after):
                    self._reset_after_frames(handler)
                    return
                if frame.get("at"):
                    self._stopping.wait(max(0.0, started + float(frame["at"]) - time.monotonic()))
                if frame.get("after"):
                    self._wait_lane(lane, int(frame["after"]))
                if bodiless:
                    continue
                sent = _shift_times(data, self._clock_shift, self._epoch_ms)
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(sent), sent) if stream else sent)
            if reset_after is not None:
                self._reset_after_frames(handler)
                return
            if stream and not bodiless:
                handler.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True  # the driver hung up (a cancel): nothing more to send

    def _reset_after_frames(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        """Reset after the frames sent so far have had time to be read: a TCP reset discards what the peer has
        received but not yet read, and the fault is a break after those frames, not instead of them."""
        handler.wfile.flush()
        self._stopping.wait(0.2)
        _reset(handler)

    def _forward(
        self,
        handler: http.server.BaseHTTPRequestHandler,
        upstream: str,
        request: dict[str, Any],
        query: str,
        body: bytes,
        got: Received,
    ) -> None:
        import httpx

        with self._cond:
            index = len(self.cassette.interactions)
            self.cassette.interactions.append(None)  # type: ignore[arg-type]  # its place, in arrival order
            got.index = index
            self.received.append(got)
            self._lanes[got.lane] = own = self._lanes.get(got.lane, 0) + 1
        url = self.upstreams[upstream] + request["path"] + (f"?{query}" if query else "")
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_BY_HOP | {"content-length"}}
        interaction: dict[str, Any] = {"upstream": upstream, "request": request}
        arrivals: list[tuple[int, float, int]] = []  # (end offset, seconds since the head, lane count)
        received = bytearray()
        try:
            with self._client.stream(handler.command, url, headers=headers, content=body) as answer:
                kept = {k: v for k, v in answer.headers.items() if k.lower() not in NOT_RECORDED}
                # A 204 or 304 has no body, not even a chunked terminator: stray bytes break the next answer.
                bodiless = handler.command == "HEAD" or answer.status_code in (204, 304)
                _send_head(handler, answer.status_code, kept, length=None, chunked=not bodiless)
                got.responded = started = time.monotonic()
                head_count = self._lanes.get(got.lane, 0)
                response: dict[str, Any] = {"status": answer.status_code, "headers": kept}
                if head_count > own:
                    response["after"] = head_count
                interaction["response"] = response
                for chunk in answer.iter_bytes():
                    received += chunk
                    arrivals.append((len(received), time.monotonic() - started, self._lanes.get(got.lane, 0)))
                    if not bodiless:
                        handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                if not bodiless:
                    handler.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True  # the driver hung up (a cancel): keep what came until then
        except httpx.HTTPError as exc:
            # The provider reset or failed mid-answer: record it as the fault it was, and pass it on.
            self._problems.append(f"recording {_describe(request, upstream)}: {type(exc).__name__}: {exc}")
            interaction["fault"] = {"kind": "reset"}
            _reset(handler)
        if "response" in interaction:
            stored = encode_body(
                bytes(received), interaction["response"]["headers"], request=False, payloads=self.payloads
            )
            if stored is not None:
                self._annotate(stored, arrivals, own, self.payloads)
                interaction["response"]["body"] = stored
            if "fault" in interaction:
                interaction["fault"]["after_frames"] = len(body_frames(stored, self.payloads))
        with self._cond:
            self.cassette.interactions[index] = interaction

    @staticmethod
    def _annotate(stored: dict[str, Any], arrivals: list[tuple[int, float, int]], own: int, payloads: Payloads) -> None:
        """Give each recorded frame its arrival time and the requests it waited for."""
        if not is_stream(stored):
            return
        offset = 0
        for data, frame in body_frames(stored, payloads):
            offset += len(data)
            arrival = next(((t, n) for end, t, n in arrivals if end >= offset), None)
            if arrival is None or not isinstance(frame, dict):
                continue
            at, count = arrival
            if at >= 0.005:
                frame["at"] = round(at, 3)
            if count > own:
                frame["after"] = count


def _parse_time(match: re.Match[bytes]) -> datetime.datetime:
    whole, fraction, zone = match.group(1), match.group(2) or b"", match.group(3)
    micro = fraction[1:7].ljust(6, b"0") if fraction else b"0"
    text = whole.decode() + "." + micro.decode() + ("+00:00" if zone == b"Z" else zone.decode())
    return datetime.datetime.fromisoformat(text)


def _earliest_time(cassette: Cassette, epoch_ms: re.Pattern[bytes] | None) -> float | None:
    """The earliest time any recorded answer holds (RFC 3339, or a number under one of ``epoch_ms``'s keys), as
    a POSIX timestamp; None when the answers hold none."""
    earliest: float | None = None
    for interaction in cassette.interactions:
        try:
            frames = body_frames((interaction.get("response") or {}).get("body"))
        except (ValueError, TypeError, KeyError):
            continue
        for data, _ in frames:
            for match in _RFC3339.finditer(data):
                with_zone = _parse_time(match)
                stamp = with_zone.timestamp()
                earliest = stamp if earliest is None else min(earliest, stamp)
            for match in epoch_ms.finditer(data) if epoch_ms is not None else ():
                stamp = int(match.group(2)) / 1000
                earliest = stamp if earliest is None else min(earliest, stamp)
    return earliest


def _shift_times(data: bytes, seconds: int, epoch_ms: re.Pattern[bytes] | None = None) -> bytes:
    """``data`` with every RFC 3339 time moved by whole ``seconds``: only the date and time of day change, the
    fraction and the zone stay as recorded, so each keeps its form and length (a framed body's lengths stay true).
    A number under one of ``epoch_ms``'s keys moves by as many milliseconds, when its digit count stays the same."""
    if not seconds:
        return data
    if epoch_ms is not None:

        def move_ms(match: re.Match[bytes]) -> bytes:
            moved = str(int(match.group(2)) + seconds * 1000).encode()
            return match.group(1) + (moved if len(moved) == len(match.group(2)) else match.group(2))

        data = epoch_ms.sub(move_ms, data)

    def move(match: re.Match[bytes]) -> bytes:
        moved = datetime.datetime.strptime(match.group(1).decode(), _WHOLE) + datetime.timedelta(seconds=seconds)
        return moved.strftime(_WHOLE).encode() + (match.group(2) or b"") + match.group(3)

    return _RFC3339.sub(move, data)


def _read_body(handler: http.server.BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("transfer-encoding", "").lower() == "chunked":
        data = bytearray()
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(data)
            data += handler.rfile.read(size)
            handler.rfile.readline()
    length = int(handler.headers.get("content-length") or 0)
    return handler.rfile.read(length) if length else b""


def _send_head(
    handler: http.server.BaseHTTPRequestHandler,
    status: int,
    headers: Mapping[str, str],
    *,
    length: int | None,
    chunked: bool = False,
) -> None:
    handler.send_response_only(status)
    for name, value in headers.items():
        if name.lower() not in NOT_RECORDED:
            handler.send_header(name, value)
    if chunked:
        handler.send_header("Transfer-Encoding", "chunked")
    elif length is not None:
        handler.send_header("Content-Length", str(length))
    handler.end_headers()


def _is_loopback(url: str) -> bool:
    """Whether ``url`` names this machine (a stand-in), by name or by a loopback address."""
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _reset(handler: http.server.BaseHTTPRequestHandler) -> None:
    """Close the connection with a TCP reset, as a provider that died mid-answer."""
    handler.close_connection = True
    try:
        handler.wfile.flush()
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.connection.close()
    except OSError:
        pass
