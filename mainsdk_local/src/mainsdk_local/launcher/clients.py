"""The clients' bootstrap sockets (a private server's app, a shared server's accepted processes) and what they ask
there: apart from the server, whose loop serves the boxes those requests open or attach."""

from __future__ import annotations

import contextlib
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any

from . import checkpoints, protocol
from .channel_out import ChannelOutput
from .runs import Channel, ServerBox
from .shared import SharedState

HELLO_TIMEOUT = 5.0  # a shared server's answer on a client's new socket: a small frame, sent at once


class Clients:
    """The bootstrap sockets of one server (``Server`` has one) and their requests: open a box, attach to a kept
    session's, find or forget a snapshot, stop a shared server.

    ``hello(sock)``: the server tells a new client what isolation it gets; ``stop()``: the server stops;
    ``open_box(sock, header)``: the server opens a box on the channel ``sock``; ``isolation()``: the server's;
    ``begin_close(box)``: the server closes a box; ``holds_nothing()``: the server has no box, client or snapshot.
    """

    def __init__(
        self,
        boot: socket.socket | None,
        shared: SharedState,
        snapshots: checkpoints.Checkpoints,
        out: ChannelOutput,
        *,
        hello: Callable[[socket.socket], None],
        stop: Callable[[], None],
        open_box: Callable[[socket.socket, dict[str, Any]], None],
        isolation: Callable[[], str],
        begin_close: Callable[[ServerBox], None],
        holds_nothing: Callable[[], bool],
    ) -> None:
        self.boots: dict[socket.socket, protocol.Decoder] = {} if boot is None else {boot: protocol.Decoder()}
        self.shared = shared
        self.checkpoints = snapshots
        self.out = out
        self.sel = out.sel
        self.hello = hello
        self.stop = stop
        self.open_box = open_box
        self.isolation = isolation
        self.begin_close = begin_close
        self.holds_nothing = holds_nothing

    def watch(self) -> None:
        """Serve the bootstrap sockets held so far, and a shared server's listener (at setup)."""
        for boot in self.boots:
            self.sel.register(boot, selectors.EVENT_READ, lambda mask, b=boot: self.on_boot(b, mask))
        if self.shared.listener is not None:
            self.shared.listener.setblocking(False)
            self.sel.register(self.shared.listener, selectors.EVENT_READ, self.on_accept)

    def close_all(self) -> None:
        """Close every bootstrap socket (at shutdown)."""
        for boot in list(self.boots):
            self.boots.pop(boot).close()
            boot.close()

    def on_accept(self, mask: int) -> None:
        """A shared server's new client (its own user's only: ``SharedState.accept``): say hello, then serve it."""
        sock = self.shared.accept()
        if sock is None:
            return
        try:
            sock.settimeout(HELLO_TIMEOUT)  # a tiny frame into an empty socket buffer: at once, unless hostile
            self.hello(sock)
            sock.setblocking(False)
        except OSError:
            sock.close()
            return
        self.boots[sock] = protocol.Decoder()
        self.sel.register(sock, selectors.EVENT_READ, lambda mask, b=sock: self.on_boot(b, mask))

    def drop(self, boot: socket.socket) -> None:
        """A client's bootstrap socket ended: a private server stops (its app is gone); a shared one goes on."""
        decoder = self.boots.pop(boot, None)
        if decoder is not None:
            decoder.close()
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(boot)
        boot.close()
        if not self.shared.enabled:
            self.stop()  # the app closed the Launcher or died

    def on_boot(self, boot: socket.socket, mask: int) -> None:
        """Frames on a bootstrap socket: each request with the channel it brings, if it needs one."""
        decoder = self.boots.get(boot)
        if decoder is None:
            return
        try:
            data, fds = protocol.receive(boot)
        except BlockingIOError:
            return
        except (OSError, protocol.ProtocolError):
            data, fds = b"", []
        if not data and not fds:
            self.drop(boot)
            return
        decoder.feed(data, fds)
        try:
            frames = decoder.frames()
        except protocol.ProtocolError:
            self.drop(boot)
            return
        for frame in frames:
            op, header = frame.header.get("op"), frame.header
            if op == "forget":
                if self.shared.may_use(header.get("snapshot"), header.get("tenant")):
                    self.checkpoints.forget(header.get("snapshot"))
                    self.shared.forgotten(header.get("snapshot"))
            elif op == "stop" and self.shared.enabled:
                self.stop()  # a shared server's user ends it and everything it keeps (Launcher.stop_shared)
            elif op in ("box", "attach", "find") and len(frame.fds) == 1:
                sock = socket.socket(fileno=frame.fds.pop())
                if op == "box":
                    self.open_box(sock, header)
                elif op == "attach":
                    self.attach(sock, header)
                else:
                    self.find_snapshot(sock, header)
            frame.close_fds()

    def attach(self, sock: socket.socket, header: dict[str, Any]) -> None:
        """Another process of the user reaches a kept session's box: a channel of its own, if it names the tenant."""
        box = self.shared.find(header.get("session"), header.get("tenant"))
        if box is None:
            # Unknown, closed, another tenant's: the same answer, so an id says nothing of another tenant's box.
            with contextlib.suppress(OSError):
                sock.send(protocol.encode({"id": 0, "ok": False, "kind": "missing", "error": "no such session"}))
            sock.close()
            return
        sock.setblocking(False)
        ch = Channel(sock)
        ch.box = box
        box.channels.append(ch)
        box.last_used = time.monotonic()
        self.sel.register(sock, selectors.EVENT_READ, lambda mask, c=ch: self.out.on_channel(c, mask))
        reply = {"id": 0, "ok": True, "uid": box.uid, "isolation": self.isolation(), "disk_bytes": box.disk_bytes}
        self.out.send(ch, dict(reply, paused=self.checkpoints.is_paused(box)))

    def find_snapshot(self, sock: socket.socket, header: dict[str, Any]) -> None:
        """Whether a tenant's snapshot is kept here, and until when: answered on ``sock``, which then closes."""
        snapshot_id = header.get("snapshot")
        found = self.shared.snapshot_of(snapshot_id, header.get("tenant"))
        kept = found is not None and snapshot_id in self.checkpoints.snapshots
        with contextlib.suppress(OSError):
            sock.settimeout(HELLO_TIMEOUT)
            sock.sendall(protocol.encode(dict(found or {}, id=0, ok=kept)))
        sock.close()

    def shared_turn(self) -> None:
        """A shared server's upkeep: kept boxes and snapshots past their time go; with nothing held, it exits."""
        if not self.shared.enabled:
            return
        now = time.monotonic()
        for box in self.shared.expired(now):
            self.begin_close(box)
        for snapshot_id in self.shared.expired_snapshots():
            self.checkpoints.forget(snapshot_id)
            self.shared.forgotten(snapshot_id)
        if self.shared.may_exit(now, self.holds_nothing()):
            self.stop()
