"""A shared launcher (``sandbox.local.launcher: shared``): one server for every app process of one user.

A private launcher is its app's child and dies with it, and its boxes and snapshots with it. A shared one
is started detached by the first app process that needs it, listens on a Unix socket in a folder only its
user can enter (``launcher_client.shared_folder``), and serves every process of that user that connects:

- a peer of another uid is refused at accept (``SO_PEERCRED``), whatever the folder's modes let through;
- a session's box is kept by its session id and tenant: another process reaches it (``attach``) only by
  naming both, and the box outlives the process that opened it. What a process ran in it dies with that
  process's channel; the box itself closes on ``close``, or once no process holds it for its idle time;
- a snapshot records its tenant; only that tenant starts from it, finds it or deletes it, and it expires
  after ``SNAPSHOT_KEEP`` seconds;
- the server exits once it has held no box, no snapshot and no client for ``idle_exit`` seconds, under the
  start lock, so a client starting at that moment either reached it before or starts a new one after.

The server keeps ids, tenants and times, never a secret value: secrets are per command, bound again by core
from their names, and reach the box only in that command's environment.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import re
import socket
import struct
import time
from typing import TYPE_CHECKING, Any

from . import common

if TYPE_CHECKING:
    from .runs import ServerBox

SNAPSHOT_KEEP = 3600.0  # how long a shared launcher keeps a snapshot (it outlives the app: never forever)
MAX_IDLE = 7 * 24 * 3600.0  # the longest idle time a kept session may ask for
SESSION_ID = re.compile(r"ses_[0-9a-f]{24}")
MAX_TENANT = 256


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket, as the kernel recorded it at connect."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", raw)
    return int(uid)


def _tenant(value: object) -> str:
    if not isinstance(value, str) or len(value) > MAX_TENANT or "\0" in value:
        raise common.RequestError("value", f"tenant must be a string of at most {MAX_TENANT} characters")
    return value


class SharedState:
    """What a shared launcher keeps beyond its channels: sessions by id, snapshots' tenants, when to exit.

    ``listener`` None: a private launcher, for which every method is a no-op and every check passes.
    """

    def __init__(
        self, listener: socket.socket | None = None, folder_fd: int = -1, name: str = "", idle_exit: float = 60.0
    ) -> None:
        self.listener = listener
        self.folder_fd = folder_fd  # the per-user folder, by descriptor: the socket and lock are found in it
        self.name = name  # the socket is ``name.sock``, the start lock ``name.lock``
        self.idle_exit = idle_exit
        self.sessions: dict[str, ServerBox] = {}
        # id: (tenant, expiry, made: seconds since the epoch, session id): what another process finds of it.
        self.snapshots: dict[str, tuple[str, float, float, str]] = {}
        self.quiet_since = time.monotonic()

    @property
    def enabled(self) -> bool:
        """Whether this server is shared."""
        return self.listener is not None

    def accept(self) -> socket.socket | None:
        """A new client, if one waits and it is this server's own user; another user's is closed unanswered."""
        assert self.listener is not None
        try:
            sock, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return None
        try:
            if peer_uid(sock) != os.getuid():
                sock.close()
                return None
        except OSError:
            sock.close()
            return None
        return sock

    # -- sessions -------------------------------------------------------------------------------------

    def box_opened(self, box: ServerBox, header: dict[str, Any]) -> None:
        """Keep a session's box by its id and tenant (a shared launcher's, when the open names a session)."""
        session_id = header.get("session_id")
        if not self.enabled or session_id is None:
            return
        if not box.session or not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
            raise common.RequestError("value", "session_id must be ses_ and 24 hex digits, for a session's box")
        idle = header.get("idle")
        if not isinstance(idle, (int, float)) or isinstance(idle, bool) or not 0 < idle <= MAX_IDLE:
            raise common.RequestError("value", f"idle must be a number of seconds from 0 to {MAX_IDLE:.0f}")
        if session_id in self.sessions:
            raise common.RequestError("value", f"session {session_id} has a box already")
        box.session_id, box.tenant, box.idle = session_id, _tenant(header.get("tenant")), float(idle)
        box.last_used = time.monotonic()
        self.sessions[session_id] = box

    def find(self, session_id: object, tenant: object) -> ServerBox | None:
        """The open box of ``session_id`` if it is ``tenant``'s; None otherwise (unknown, closing, another's)."""
        box = self.sessions.get(session_id) if isinstance(session_id, str) else None
        if box is None or box.tenant != tenant or box.closing or box.doomed or box.destroyed:
            return None
        return box

    def box_destroyed(self, box: ServerBox) -> None:
        if box.session_id is not None and self.sessions.get(box.session_id) is box:
            del self.sessions[box.session_id]

    def expired(self, now: float) -> list[ServerBox]:
        """Kept boxes no process holds whose idle time has passed since their last use."""
        return [
            box
            for box in self.sessions.values()
            if not box.channels and not box.closing and now >= box.last_used + box.idle
        ]

    # -- snapshots ------------------------------------------------------------------------------------

    def snapshot_made(self, box: ServerBox, snapshot_id: str) -> float | None:
        """Record a new snapshot's tenant; its expiry (epoch seconds), or None for a private launcher's."""
        if not self.enabled:
            return None
        now = time.time()
        self.snapshots[snapshot_id] = (box.tenant, now + SNAPSHOT_KEEP, now, box.session_id or "")
        return now + SNAPSHOT_KEEP

    def snapshot_of(self, snapshot_id: object, tenant: object) -> dict[str, Any] | None:
        """``tenant``'s live snapshot ``snapshot_id`` (expires, created, session), or None (unknown, expired,
        another's)."""
        found = self.snapshots.get(snapshot_id) if isinstance(snapshot_id, str) else None
        if found is None or found[0] != tenant or found[1] <= time.time():
            return None
        return {"expires": found[1], "created": found[2], "session": found[3]}

    def may_use(self, snapshot_id: object, tenant: object) -> bool:
        """Whether a box of ``tenant`` may start from (or delete) ``snapshot_id``: always, in a private launcher."""
        return not self.enabled or self.snapshot_of(snapshot_id, tenant) is not None

    def forgotten(self, snapshot_id: object) -> None:
        if isinstance(snapshot_id, str):
            self.snapshots.pop(snapshot_id, None)

    def expired_snapshots(self) -> list[str]:
        now = time.time()
        return [snapshot_id for snapshot_id, (_, expires, _, _) in self.snapshots.items() if expires <= now]

    # -- the server's own end -------------------------------------------------------------------------

    def next_wake(self, now: float, idle: bool) -> float | None:
        """Seconds until a kept box or snapshot expires, or (``idle``: nothing held) the server may exit."""
        if not self.enabled:
            return None
        times = [box.last_used + box.idle - now for box in self.sessions.values() if not box.channels]
        times += [expires - time.time() for _, expires, _, _ in self.snapshots.values()]
        if idle:
            times.append(self.quiet_since + self.idle_exit - now)
        finite = [max(0.0, t) for t in times if math.isfinite(t)]
        return min(finite) + 0.01 if finite else None

    def may_exit(self, now: float, idle: bool) -> bool:
        """Whether to exit now: nothing held for ``idle_exit`` seconds, and no client starting (the lock).

        On True the socket is gone from the folder: a client that comes now starts a new server.
        """
        if not self.enabled or not idle:
            self.quiet_since = now
            return False
        if now < self.quiet_since + self.idle_exit:
            return False
        try:
            lock = os.open(f"{self.name}.lock", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.folder_fd)
        except OSError:
            lock = -1
        try:
            if lock >= 0:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            common.close_fd(lock)
            self.quiet_since = now  # a client is connecting or starting: look again later
            return False
        # Held until this process exits: no client connects to a socket that is about to go.
        with contextlib.suppress(OSError):
            os.unlink(f"{self.name}.sock", dir_fd=self.folder_fd)
        assert self.listener is not None
        self.listener.close()
        return True

    def close(self) -> None:
        """The server stops: its socket leaves the folder (unless another server's took its place) and closes."""
        if self.listener is None or self.listener.fileno() < 0:
            return
        with contextlib.suppress(OSError):
            if os.stat(f"{self.name}.sock", dir_fd=self.folder_fd).st_ino == os.fstat(self.listener.fileno()).st_ino:
                os.unlink(f"{self.name}.sock", dir_fd=self.folder_fd)
        self.listener.close()
