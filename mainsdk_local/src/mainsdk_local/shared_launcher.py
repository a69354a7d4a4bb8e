"""The app's side of a shared launcher (``sandbox.local.launcher: shared``; the server's is ``launcher/shared.py``).

The server listens on ``<folder>/<name>.sock``, where the folder is ``$XDG_RUNTIME_DIR/mainsdk`` (when that is
a folder of this user's) or ``/tmp/mainsdk-<uid>``, and ``name`` says which server (its interpreter, weak mode,
pool) and which code it runs: a client never reaches a server started with weaker settings than its own, nor
one of another version of the launcher (an upgrade starts a new server; the old one ends once it holds nothing).
The folder must be this user's, a real folder (not a link) that no one else may enter or write: anything else, in
/tmp above all, may be another user's trap, and is refused. The client connects under ``<name>.lock`` (``flock``),
and starts the server itself when none answers, so two processes starting at once start one; the server exits under
the same lock (``launcher/shared.py``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import os
import socket
import stat
import time
from collections.abc import Iterator

from mainsdk_local.launcher import shared
from mainsdk_local.launcher.shared import peer_uid

_LOCK_TIMEOUT = 30.0  # another process starting the server holds the lock at most that long (its start)
_MAX_SOCKET_PATH = 107  # sun_path, less its NUL


class SharedLauncherError(Exception):
    """The shared launcher's folder or socket cannot be trusted or used; the message names the path and the fix."""


def folder(explicit: str | None = None) -> str:
    """The per-user folder (made 0700 when missing), checked: this user's, a real folder, closed to others."""
    uid = os.getuid()
    if explicit is not None:
        path = explicit
    else:
        runtime = os.environ.get("XDG_RUNTIME_DIR", "")
        try:
            info = os.lstat(runtime) if runtime.startswith("/") else None
        except OSError:
            info = None
        usable = info is not None and stat.S_ISDIR(info.st_mode) and info.st_uid == uid
        path = os.path.join(runtime, "mainsdk") if usable else f"/tmp/mainsdk-{uid}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    check_folder(path)
    return path


def check_folder(path: str) -> None:
    """Refuse a folder that is a link, not a folder, another user's, or open to others (group or world)."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise SharedLauncherError(f"the shared launcher's folder {path} cannot be read: {exc.strerror}") from None
    fix = "remove it (it is made again, 0700, on next use) or set sandbox.local.launcher: private"
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise SharedLauncherError(f"the shared launcher's folder {path} is not a folder (a link?); {fix}")
    if info.st_uid != os.getuid():
        raise SharedLauncherError(
            f"the shared launcher's folder {path} belongs to uid {info.st_uid}, not this user's {os.getuid()}; {fix}"
        )
    if info.st_mode & 0o077:
        raise SharedLauncherError(
            f"the shared launcher's folder {path} is open to other users (mode {stat.S_IMODE(info.st_mode):o}); "
            f"chmod 700 it, or {fix}"
        )


def server_name(settings: object) -> str:
    """The server's name in the folder: one per set of settings (interpreter, weak mode, pool) and launcher code."""
    named = json.dumps([settings, launcher_code_digest()], sort_keys=True).encode()
    return f"launcher-{hashlib.sha256(named).hexdigest()[:16]}"


@functools.cache  # the code of this process's launcher does not change under it
def launcher_code_digest() -> str:
    """The digest of this process's launcher package (``code_digest``): the server and protocol it speaks."""
    return code_digest(os.path.dirname(os.path.abspath(shared.__file__)))


def code_digest(package: str) -> str:
    """sha256 over the names and bytes of the modules of the launcher package at ``package``."""
    digest = hashlib.sha256()
    for name in sorted(os.listdir(package)):
        if name.endswith(".py"):
            with open(os.path.join(package, name), "rb") as fh:
                digest.update(name.encode() + b"\0" + hashlib.sha256(fh.read()).digest())
    return digest.hexdigest()


@contextlib.contextmanager
def start_lock(path: str, name: str) -> Iterator[int]:
    """Hold ``<name>.lock`` in the folder (made 0600): yields the folder's descriptor, for the server to keep."""
    folder_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        lock = os.open(f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder_fd)
        try:
            deadline = time.monotonic() + _LOCK_TIMEOUT
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise SharedLauncherError(
                            f"{path}/{name}.lock was held for {_LOCK_TIMEOUT:.0f}s by another process starting "
                            "the shared launcher"
                        ) from None
                    time.sleep(0.01)
            yield folder_fd
        finally:
            os.close(lock)  # and the lock with it
    finally:
        os.close(folder_fd)


def _socket_path(path: str, name: str) -> str:
    where = os.path.join(path, f"{name}.sock")
    if len(os.fsencode(where)) > _MAX_SOCKET_PATH:
        raise SharedLauncherError(f"the shared launcher's socket path {where} is too long for a Unix socket")
    return where


def connect(path: str, name: str) -> socket.socket | None:
    """A connection to the running server, checked to be this user's; None when none listens there."""
    where = _socket_path(path, name)
    try:
        info = os.lstat(where)
    except FileNotFoundError:
        return None
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
        raise SharedLauncherError(f"{where} is not a socket of this user's; remove it")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.connect(where)
        if peer_uid(sock) != os.getuid():
            raise SharedLauncherError(f"the server at {where} runs as another user; remove the socket")
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
            return None  # a server that exited (or crashed) left it: a new one is started in its place
        raise
    except BaseException:
        sock.close()
        raise
    return sock


def bind(path: str, name: str) -> socket.socket:
    """A new listening socket in place of a stale one (the caller holds the lock), 0600."""
    where = _socket_path(path, name)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(where)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        listener.bind(where)
        os.chmod(where, 0o600)  # the folder is closed to others already; the socket too, all the same
        listener.listen(64)
    except BaseException:
        listener.close()
        raise
    return listener


def log_file(path: str, name: str) -> int:
    """Where a shared server's stderr goes once its app is gone: ``<name>.log`` in the folder, 0600."""
    return os.open(
        os.path.join(path, f"{name}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )
