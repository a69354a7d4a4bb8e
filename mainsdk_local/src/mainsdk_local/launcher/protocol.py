"""Wire format between the launcher client and its server.

A frame is a 4-byte big-endian header length, a UTF-8 JSON object, then, when
the header says ``"size": n``, n raw bytes of payload. When the header says
``"fds": k``, k file descriptors travel with the frame through SCM_RIGHTS; the
sender attaches them to the first byte of the frame, so by the time a header is
complete its descriptors have already been received.

Standard library only: the server imports this module with ``python -I -S``.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import socket
import struct
from typing import Any

_LENGTH = struct.Struct(">I")
MAX_HEADER = 1 << 20  # a header is a small JSON object; anything larger is a protocol error
MAX_PAYLOAD = 1 << 34  # 16 GiB: far above any box, low enough to catch a corrupt length
MAX_FDS_PER_MESSAGE = 8
RECV_SIZE = 1 << 18
# Where the egress proxy listens inside a run's network namespace (127.0.0.1 there, not on the host).
PROXY_PORT = 3128
PROXY_BACKLOG = 128
# The longest the server spends collecting one box's /out (in slices); the client's backstop allows for it.
COLLECT_SECONDS = 2.0


class ProtocolError(Exception):
    """The peer sent something that is not a valid frame."""


class Frame:
    """One decoded frame: its header, its payload and the descriptors that came with it."""

    __slots__ = ("fds", "header", "payload")

    def __init__(self, header: dict[str, Any], payload: bytes, fds: list[int]) -> None:
        self.header = header
        self.payload = payload
        self.fds = fds

    def close_fds(self) -> None:
        """Close the descriptors nobody took ownership of."""
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []


def encode(header: dict[str, Any], payload: bytes = b"") -> bytes:
    """Encode one frame; sets ``size`` when there is a payload."""
    if payload:
        header = dict(header, size=len(payload))
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    return _LENGTH.pack(len(raw)) + raw + payload


class Decoder:
    """Incremental frame decoder for a stream socket that may carry descriptors."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._fds: collections.deque[int] = collections.deque()
        self._header: dict[str, Any] | None = None
        self._need = 0

    def feed(self, data: bytes, fds: list[int]) -> None:
        """Add received bytes and descriptors."""
        self._fds.extend(fds)
        if self._pos and self._pos * 2 >= len(self._buf):
            del self._buf[: self._pos]  # compact only now and then: payloads can be megabytes
            self._pos = 0
        self._buf += data

    def frames(self) -> list[Frame]:
        """Return every frame that is now complete."""
        out: list[Frame] = []
        while True:
            frame = self._next()
            if frame is None:
                return out
            out.append(frame)

    def _next(self) -> Frame | None:
        avail = len(self._buf) - self._pos
        if self._header is None:
            if avail < _LENGTH.size:
                return None
            (length,) = _LENGTH.unpack_from(self._buf, self._pos)
            if length > MAX_HEADER:
                raise ProtocolError(f"header of {length} bytes")
            if avail < _LENGTH.size + length:
                return None
            start = self._pos + _LENGTH.size
            try:
                header = json.loads(bytes(self._buf[start : start + length]))
            except ValueError as exc:
                raise ProtocolError(f"invalid header: {exc}") from None
            if not isinstance(header, dict):
                raise ProtocolError("header is not an object")
            size = header.get("size", 0)
            if not isinstance(size, int) or size < 0 or size > MAX_PAYLOAD:
                raise ProtocolError(f"invalid payload size {size!r}")
            self._pos = start + length
            self._header = header
            self._need = size
            avail = len(self._buf) - self._pos
        if avail < self._need:
            return None
        header = self._header
        payload = bytes(self._buf[self._pos : self._pos + self._need])
        self._pos += self._need
        self._header = None
        nfds = header.get("fds", 0)
        if not isinstance(nfds, int) or nfds < 0 or nfds > len(self._fds):
            raise ProtocolError(f"frame announces {nfds!r} descriptors, {len(self._fds)} arrived")
        fds = [self._fds.popleft() for _ in range(nfds)]
        return Frame(header, payload, fds)

    def close(self) -> None:
        """Close descriptors that arrived without a frame to claim them."""
        while self._fds:
            with contextlib.suppress(OSError):
                os.close(self._fds.popleft())


def receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One recvmsg: bytes and descriptors (made close-on-exec). ``b""`` and no fds means EOF.

    Raises ``BlockingIOError`` on a non-blocking socket with nothing to read, and
    ``ProtocolError`` when descriptors were cut off (MSG_CTRUNC).
    """
    data, fds, flags, _addr = socket.recv_fds(sock, RECV_SIZE, MAX_FDS_PER_MESSAGE, socket.MSG_CMSG_CLOEXEC)
    if flags & socket.MSG_CTRUNC:
        for fd in fds:
            os.close(fd)
        raise ProtocolError("too many descriptors in one message")
    return data, list(fds)
