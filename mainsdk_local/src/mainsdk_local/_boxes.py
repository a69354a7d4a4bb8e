"""Boxes: their folders, and moving files in and out of them as the box's user.

A box is a tmpfs (a private directory in weak mode) holding ``work/`` and
``out/``, owned by the box's host uid. Every path a request names is relative
to one of them and walked one directory at a time with O_NOFOLLOW, with the
filesystem uid switched to the box's (``AsBox``): a symlink, FIFO, device or
hard link the code planted can never make the server read, write or delete
anything outside the box, or anything the code itself could not.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import socket
import stat
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mainsdk_local import _common as C
    from mainsdk_local import _linux as L
    from mainsdk_local import _protocol as P
    from mainsdk_local._runs import Run
elif __package__:
    from . import _common as C
    from . import _linux as L
    from . import _protocol as P
else:  # imported by the server script, whose directory is on sys.path
    import _common as C
    import _linux as L
    import _protocol as P


class Box:
    """One box: its tmpfs (or private directory in weak mode), host uid and channel."""

    def __init__(self, slot: int, uid: int, gid: int, sock: socket.socket, *, drop_fsids: bool) -> None:
        self.slot = slot
        self.uid = uid
        self.gid = gid
        self.drop_fsids = drop_fsids  # file operations switch to the box's uid (the server is root)
        self.sock = sock
        self.decoder = P.Decoder()
        self.outq: collections.deque[tuple[memoryview, list[int]]] = collections.deque()  # frames and their fds
        self.writing = False
        self.path = ""
        self.work_fd = -1
        self.out_fd = -1
        self.disk_bytes = 0
        self.runs: dict[int, Run] = {}  # running execs by request id
        self.destroyed = False
        self.closing = False
        self.close_id: int | None = None
        self.channel_open = True


class AsBox:
    """File operations as the box's user: permissions are checked as for the code itself."""

    def __init__(self, box: Box) -> None:
        self.box = box

    def __enter__(self) -> None:
        if self.box.drop_fsids:
            L.setfsids(self.box.uid, self.box.gid)

    def __exit__(self, *exc: object) -> None:
        if self.box.drop_fsids:
            L.setfsids(0, 0)


def make_box_fs(box: Box, base: str, *, tmpfs: bool) -> None:
    """Create the box's directory (a tmpfs of its disk size in namespace mode) with work/ and out/ in it."""
    path = os.path.join(base, f"box-{box.slot}")
    try:
        os.mkdir(path, 0o711)
        box.path = path
        if tmpfs:
            L.mount("tmpfs", path, "tmpfs", L.MS_NOSUID | L.MS_NODEV, f"size={box.disk_bytes},mode=0755")
        for name in ("work", "out"):
            sub = os.path.join(path, name)
            os.mkdir(sub, 0o755)
            os.chown(sub, box.uid, box.gid)
        box.work_fd = os.open(os.path.join(path, "work"), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        box.out_fd = os.open(os.path.join(path, "out"), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise C.launch_error("box", exc) from None


def remove_box_fs(box: Box, *, tmpfs: bool) -> None:
    """Remove the box's files: unmount its tmpfs, or delete its directory (weak mode)."""
    C.close_fd(box.work_fd)
    C.close_fd(box.out_fd)
    box.work_fd = box.out_fd = -1
    if not box.path:
        return
    if tmpfs:
        with contextlib.suppress(OSError):
            L.umount(box.path)
        with contextlib.suppress(OSError):
            os.rmdir(box.path)
    else:
        import shutil  # here, not at the top: only weak mode removes boxes file by file

        # The code owns what is inside work/ and out/: delete that as the box's user, so
        # nothing it planted can make us delete elsewhere (rmtree does not follow symlinks
        # either). work/, out/ and the box directory are ours: root removes them.
        for name in ("work", "out"):
            path = os.path.join(box.path, name)
            with AsBox(box):
                shutil.rmtree(path, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.rmdir(path)
        with contextlib.suppress(OSError):
            os.rmdir(box.path)
    box.path = ""


def split_box_path(path: object) -> tuple[bool, list[str]]:
    """Split a box path into (in_out, segments); ``../out/x`` names /out, the rest /work."""
    if not isinstance(path, str):
        raise C.RequestError("value", "path must be a string")
    in_out = path.startswith("../out/")
    rel = path[len("../out/") :] if in_out else path
    if "\0" in path:
        raise C.RequestError("value", f"path {path!r} contains NUL")
    if rel.startswith("/") or not rel:
        raise C.RequestError("value", f"path {path!r} must be relative to /work (or ../out/...)")
    parts = rel.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise C.RequestError("value", f"path {path!r} has an empty, '.' or '..' segment")
    return in_out, parts


def _open_parent(box: Box, path: object, create: bool) -> tuple[int, str]:
    """A descriptor of the directory holding ``path`` (made on the way when ``create``), and the last name."""
    in_out, parts = split_box_path(path)
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=box.out_fd if in_out else box.work_fd)
    try:
        for part in parts[:-1]:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            # O_NOFOLLOW: a symlink planted by the code must never lead us out of the box.
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def write_file(box: Box, path: object, data: bytes) -> None:
    """Write ``data`` at ``path``, replacing whatever entry is there without writing through it."""
    try:
        with AsBox(box):
            dfd, name = _open_parent(box, path, create=True)
            try:
                # Replace: unlink first, then O_EXCL, so we never write through an entry
                # (a symlink, a FIFO, a hard link) the code may have put there.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dfd)
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                fd = os.open(name, flags, 0o644, dir_fd=dfd)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                finally:
                    os.close(fd)
            finally:
                os.close(dfd)
    except OSError as exc:
        raise C.RequestError("os", f"write {path}: {exc.strerror or exc}", exc.errno) from None


def read_file(box: Box, path: object) -> bytes:
    """The bytes of the regular file at ``path``; anything else (a link, a FIFO) is an error."""
    try:
        with AsBox(box):
            dfd, name = _open_parent(box, path, create=False)
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
            finally:
                os.close(dfd)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise C.RequestError("os", f"read {path}: not a regular file", errno.EINVAL)
                return read_all(fd, box.disk_bytes + 1)
            finally:
                os.close(fd)
    except OSError as exc:
        raise C.RequestError("os", f"read {path}: {exc.strerror or exc}", exc.errno) from None


def collect_out(box: Box, max_bytes: object) -> tuple[dict[str, Any], bytes]:
    """The regular files under out/ in name order up to ``max_bytes``, and what was skipped and why."""
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0:
        raise C.RequestError("value", "max_bytes must be a non-negative integer")
    files: list[list[Any]] = []
    skipped: list[list[str]] = []
    chunks: list[bytes] = []
    total = 0
    truncated = False
    pending = [""]
    with AsBox(box):
        while pending and not truncated:
            prefix = pending.pop()
            try:
                dfd = _open_dir(box.out_fd, prefix)
            except OSError as exc:
                skipped.append([prefix.rstrip("/"), f"unreadable directory: {exc.strerror}"])
                continue
            subdirs: list[str] = []
            try:
                for name in sorted(os.listdir(dfd)):
                    rel = prefix + name
                    try:
                        rel.encode()
                    except UnicodeEncodeError:
                        skipped.append([rel.encode(errors="replace").decode(), "name is not UTF-8"])
                        continue
                    try:
                        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                    except OSError as exc:
                        skipped.append([rel, f"unreadable: {exc.strerror}"])
                        continue
                    kind = entry_kind(st.st_mode)
                    if kind == "dir":
                        subdirs.append(rel + "/")
                        continue
                    if kind != "file":
                        skipped.append([rel, kind])
                        continue
                    data = _read_out_file(dfd, name, rel, max_bytes - total, skipped)
                    if data is None:
                        continue
                    if total + len(data) > max_bytes:
                        truncated = True
                        break
                    total += len(data)
                    files.append([rel, len(data)])
                    chunks.append(data)
            finally:
                os.close(dfd)
            pending.extend(reversed(subdirs))
    return {"files": files, "truncated": truncated, "skipped": skipped}, b"".join(chunks)


def _read_out_file(dfd: int, name: str, rel: str, budget: int, skipped: list[list[str]]) -> bytes | None:
    """Read one regular file, or None (and a reason in ``skipped``); over budget gives budget+1 bytes."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as exc:
        skipped.append([rel, "symlink" if exc.errno == errno.ELOOP else f"unreadable: {exc.strerror}"])
        return None
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode):  # swapped after our lstat
            skipped.append([rel, entry_kind(fst.st_mode)])
            return None
        if fst.st_size > budget:
            return b"\0" * (budget + 1) if budget < 1 << 16 else read_all(fd, budget + 1)
        return read_all(fd, budget + 1)
    finally:
        os.close(fd)


def _open_dir(base_fd: int, prefix: str) -> int:
    """Open ``prefix`` under ``base_fd`` one directory at a time, never following a link."""
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=base_fd)
    for part in [p for p in prefix.split("/") if p]:
        try:
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nfd
    return fd


def entry_kind(mode: int) -> str:
    """What a directory entry is, in a word the client shows (``file``, ``symlink``, ``fifo`` ...)."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "other"


def read_all(fd: int, limit: int) -> bytes:
    """Read ``fd`` to its end, or to ``limit`` bytes."""
    chunks: list[bytes] = []
    total = 0
    while total < limit:
        chunk = os.read(fd, min(1 << 20, limit - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)
