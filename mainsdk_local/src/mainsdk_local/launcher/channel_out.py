"""Frames queued to the boxes' clients, flushed as their sockets take them: the server's output, apart from its loop."""

from __future__ import annotations

import contextlib
import selectors
import socket
from collections.abc import Callable
from typing import Any

from . import common, protocol
from .runs import Channel


class ChannelOutput:
    """Every box channel's outgoing frames (``Server`` has one; the executor and the collections send through it).

    ``lost(ch)``: a channel failed while sending (the server closes its box, or keeps a shared session's);
    ``on_channel(ch, mask)``: the server's handler of a channel's events, registered again when the channel
    starts or stops waiting to write.
    """

    def __init__(
        self,
        selector: selectors.BaseSelector,
        *,
        lost: Callable[[Channel], None],
        on_channel: Callable[[Channel, int], None],
    ) -> None:
        self.sel = selector
        self.lost = lost
        self.on_channel = on_channel

    def send(self, ch: Channel, header: dict[str, Any], payload: bytes = b"", fds: list[int] | None = None) -> None:
        """Queue a frame to a box's client; ``fds`` (ours: closed once sent) go with its first byte."""
        if not ch.open:
            for fd in fds or []:
                common.close_fd(fd)
            return
        ch.outq.append((memoryview(protocol.encode(header, payload)), list(fds or [])))
        self.flush(ch)

    def reply_error(self, ch: Channel, rid: object, exc: common.RequestError) -> None:
        """Refuse a request: one refused with a RequestError did nothing (for an exec, no code ran)."""
        self.send(ch, {"id": rid, "ok": False, "kind": exc.kind, "error": str(exc), "errno": exc.errno, "ran": False})

    def flush(self, ch: Channel) -> None:
        """Send what the channel's socket takes now; wait for it to be writable while some is left."""
        while ch.outq and ch.open:
            chunk, fds = ch.outq[0]
            try:
                n = socket.send_fds(ch.sock, [chunk], fds) if fds else ch.sock.send(chunk)
            except BlockingIOError:
                break
            except OSError:
                self.lost(ch)
                return
            for fd in fds:  # the client holds its own reference now
                common.close_fd(fd)
            if n == len(chunk):
                ch.outq.popleft()
            else:
                ch.outq[0] = (chunk[n:], [])
        if not ch.open:
            return
        if not ch.outq and (ch.box is None or ch.box.destroyed):
            self.close(ch)
            return
        if bool(ch.outq) != ch.writing:
            ch.writing = bool(ch.outq)
            want = selectors.EVENT_READ | (selectors.EVENT_WRITE if ch.outq else 0)
            self.sel.modify(ch.sock, want, lambda mask, c=ch: self.on_channel(c, mask))

    def close(self, ch: Channel) -> None:
        """Close a channel: its unsent frames and their descriptors go, and it leaves its box."""
        if not ch.open:
            return
        ch.open = False
        for _, fds in ch.outq:
            for fd in fds:
                common.close_fd(fd)
        ch.outq.clear()
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(ch.sock)
        ch.sock.close()
        ch.decoder.close()
        if ch.box is not None and ch in ch.box.channels:
            ch.box.channels.remove(ch)
