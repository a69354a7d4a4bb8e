"""Boxes: their folders, and moving files in and out of them as the box's user.

A box is a tmpfs (a private directory in weak mode) holding ``work/``,
``out/`` and ``tmp/`` (with ``tmp/home/``), owned by the box's host uid. Every path a request names is relative
to one of them and walked one directory at a time with O_NOFOLLOW, with the
filesystem uid switched to the box's (``AsBox``): a symlink, FIFO, device or
hard link the code planted can never make the server read, write or delete
anything outside the box, or anything the code itself could not.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import time
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from . import common, linux, protocol

if TYPE_CHECKING:
    from .runs import ServerBox


class AsBox:
    """File operations as the box's user: permissions are checked as for the code itself."""

    def __init__(self, box: ServerBox) -> None:
        self.box = box

    def __enter__(self) -> None:
        if self.box.drop_fsids:
            linux.setfsids(self.box.uid, self.box.gid)

    def __exit__(self, *exc: object) -> None:
        if self.box.drop_fsids:
            linux.setfsids(0, 0)


def make_box_fs(box: ServerBox, base: str, *, tmpfs: bool) -> None:
    """Create the box's directory (a tmpfs of its disk size in namespace mode) with work/, out/ and tmp/ in it."""
    path = os.path.join(base, f"box-{box.slot}")
    try:
        os.mkdir(path, 0o711)
        box.path = path
        if tmpfs:
            inodes = f",nr_inodes={box.max_files}" if box.max_files is not None else ""
            linux.mount(
                "tmpfs", path, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, f"size={box.disk_bytes}{inodes},mode=0755"
            )
        for name in ("work", "out"):
            sub = os.path.join(path, name)
            os.mkdir(sub, 0o755)
            os.chown(sub, box.uid, box.gid)
        make_tmp(path, box.uid, box.gid, tmpfs=tmpfs)
        box.work_fd = os.open(os.path.join(path, "work"), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        box.out_fd = os.open(os.path.join(path, "out"), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise common.launch_error("box", exc) from None


def make_tmp(path: str, uid: int, gid: int, *, tmpfs: bool) -> None:
    """Make ``path``/tmp (the box's /tmp) and tmp/home (its HOME), both the box user's.

    On the box's tmpfs in namespace mode, so what /tmp holds counts against the disk limit and goes with the
    box: mode 1777 as a /tmp has (only the box's user is mapped in its user namespace). In weak mode it is a
    folder of the box's private directory, named by TMPDIR: 0700, as other weak boxes run on the same host.
    """
    tmp = os.path.join(path, "tmp")
    os.mkdir(tmp, 0o700)
    os.chown(tmp, uid, gid)
    if tmpfs:
        os.chmod(tmp, 0o1777)  # not through mkdir: its mode passes the umask
    home = os.path.join(tmp, common.HOME_IN_TMP)
    os.mkdir(home, 0o700)
    os.chown(home, uid, gid)


def remove_box_fs(box: ServerBox, *, tmpfs: bool) -> None:
    """Remove the box's files: unmount its tmpfs, or delete its directory (weak mode)."""
    common.close_fd(box.work_fd)
    common.close_fd(box.out_fd)
    box.work_fd = box.out_fd = -1
    if not box.path:
        return
    if tmpfs:
        with contextlib.suppress(OSError):
            linux.umount(box.path)
        with contextlib.suppress(OSError):
            os.rmdir(box.path)
    else:
        import shutil  # here, not at the top: only weak mode removes boxes file by file

        # The code owns what is inside work/, out/ and tmp/: delete that as the box's user, so
        # nothing it planted can make us delete elsewhere (rmtree does not follow symlinks
        # either). Those three and the box directory are ours: root removes them.
        for name in common.BOX_FOLDERS:
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
        raise common.RequestError("value", "path must be a string")
    in_out = path.startswith("../out/")
    rel = path[len("../out/") :] if in_out else path
    if "\0" in path:
        raise common.RequestError("value", f"path {path!r} contains NUL")
    if rel.startswith("/") or not rel:
        raise common.RequestError("value", f"path {path!r} must be relative to /work (or ../out/...)")
    parts = rel.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise common.RequestError("value", f"path {path!r} has an empty, '.' or '..' segment")
    return in_out, parts


def _open_parent(box: ServerBox, path: object, create: bool) -> tuple[int, str]:
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


def write_file(box: ServerBox, path: object, data: bytes) -> None:
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
        raise common.RequestError("os", f"write {path}: {exc.strerror or exc}", exc.errno) from None


def read_file(box: ServerBox, path: object) -> bytes:
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
                    raise common.RequestError("os", f"read {path}: not a regular file", errno.EINVAL)
                return read_all(fd, box.disk_bytes + 1)
            finally:
                os.close(fd)
    except OSError as exc:
        raise common.RequestError("os", f"read {path}: {exc.strerror or exc}", exc.errno) from None


# Bounds on collecting out/ (the README's "Out files" says them). A cut sets ``truncated``: the
# run then stops with "output" and keeps what fit. They also bound the reply's header, which
# must stay under the protocol's MAX_HEADER whatever names the code chose.
MAX_DISK = (1 << 63) - 1  # a box's disk size in bytes: what RLIMIT_FSIZE (a C long) can hold


def take_settings(box: ServerBox, header: dict[str, Any]) -> tuple[int | None, int | None]:
    """A box request's settings, checked, onto ``box`` (disk_bytes, session, max_files); raises ``RequestError``.

    Returns its memory_bytes and max_sockets (each null or a positive integer), which the box's limits take.
    """
    disk_bytes, session, max_files = header.get("disk_bytes"), header.get("session", True), header.get("max_files")
    memory_bytes, max_sockets = header.get("memory_bytes"), header.get("max_sockets")
    if not isinstance(disk_bytes, int) or isinstance(disk_bytes, bool) or not 4096 <= disk_bytes <= MAX_DISK:
        # Above MAX_DISK no RLIMIT_FSIZE can hold it: refused here, before anything runs, not by C's setrlimit
        # (the cold path's setup error) or a warm interpreter's (which looked like the code's exit 1).
        raise common.RequestError("value", f"disk_bytes must be an integer from 4096 to {MAX_DISK}")
    box.disk_bytes = disk_bytes
    if not isinstance(session, bool):
        raise common.RequestError("value", "session must be true or false")
    box.session = session
    if max_files is not None and (not isinstance(max_files, int) or isinstance(max_files, bool) or max_files < 64):
        raise common.RequestError("value", "max_files must be null or an integer of at least 64")
    box.max_files = max_files
    for name, value in (("memory_bytes", memory_bytes), ("max_sockets", max_sockets)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise common.RequestError("value", f"{name} must be null or a positive integer")
    return memory_bytes, max_sockets


MAX_OUT_FILES = 1000  # files returned
MAX_OUT_ENTRIES = 10_000  # directory entries looked at, of any kind
MAX_OUT_DEPTH = 32  # folders below out/ that are entered
MAX_OUT_NAME_BYTES = 512 * 1024  # the returned names, as JSON
MAX_OUT_SKIPPED = 100  # skipped entries listed (then one more saying how many were not)
SKIPPED_NAME_CHARS = 200  # a skipped entry's name is cut to this
COLLECT_SECONDS = protocol.COLLECT_SECONDS  # wall time for one collection, across its slices
_READ_STEP = 1 << 20  # a file is read in steps of this, so a large one does not hold the loop


class OutCollector:
    """Collects the regular files under out/ in name order, a slice at a time.

    The server runs ``step`` from its loop until it returns True, so collecting
    a large or deep out/ never holds up other boxes (nor anything else the loop
    does). The walk keeps one open descriptor per folder on its path (at most
    MAX_OUT_DEPTH + 1), so it is O(entries), never O(depth²). Within a folder
    its files come in name order, then its subfolders, each in name order.
    """

    def __init__(self, box: ServerBox, max_bytes: object) -> None:
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0:
            raise common.RequestError("value", "max_bytes must be a non-negative integer")
        self.box = box
        self.max_bytes = max_bytes
        self.files: list[list[Any]] = []
        self.skipped: list[list[str]] = []
        self.skipped_more = 0
        self.chunks: list[bytes] = []
        self.total = 0
        self.truncated = False  # something was left out: the run stops with "output"
        self.full = False  # a bound on what is returned was reached: take nothing more
        self.entries = 0
        self.name_bytes = 0
        self.started = time.monotonic()
        self._walk = self._walk_out()

    def step(self, until: float) -> bool:
        """Collect until ``until`` (monotonic); True once done. Call as the box's user (``AsBox``)."""
        try:
            for _ in self._walk:
                now = time.monotonic()
                if now >= self.started + COLLECT_SECONDS:
                    self.truncated = self.full = True
                    self.close()
                    return True
                if now >= until:
                    return False
        except OSError as exc:  # out/ itself: the code may have made it unreadable
            self._skip("", f"unreadable directory: {exc.strerror}")
        return True

    def close(self) -> None:
        """Stop: close the descriptors the walk holds."""
        self._walk.close()

    def reply(self) -> tuple[dict[str, Any], bytes]:
        """The reply's header fields and payload (the files' bytes, in order)."""
        skipped = list(self.skipped)
        if self.skipped_more:
            skipped.append(["...", f"{self.skipped_more} more skipped entries not listed"])
        return {"files": self.files, "truncated": self.truncated, "skipped": skipped}, b"".join(self.chunks)

    def _skip(self, rel: str, why: str) -> None:
        if len(self.skipped) < MAX_OUT_SKIPPED:
            name = rel if len(rel) <= SKIPPED_NAME_CHARS else rel[:SKIPPED_NAME_CHARS] + "..."
            self.skipped.append([name, why])
        else:
            self.skipped_more += 1

    def _walk_out(self) -> Generator[None, None, None]:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self.box.out_fd)
        try:
            yield from self._walk_dir(fd, "", 0)
        finally:
            os.close(fd)

    def _walk_dir(self, dfd: int, prefix: str, depth: int) -> Generator[None, None, None]:
        """Walk the folder open at ``dfd``; stops early (setting ``truncated``) at a bound."""
        names: list[tuple[str, bool]] = []  # (name, is a folder)
        with os.scandir(dfd) as listing:
            for entry in listing:
                if self.entries >= MAX_OUT_ENTRIES:
                    self.truncated = True  # the entries listed so far are still taken
                    break
                self.entries += 1
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    is_dir = False  # the lstat below says why
                names.append((entry.name, is_dir))
                if self.entries % 256 == 0:
                    yield
        names.sort()
        subdirs: list[str] = []
        for name, is_dir in names:
            yield  # one entry at a time: the loop checks the clock between them
            rel = prefix + name
            try:
                rel.encode()
            except UnicodeEncodeError:
                self._skip(rel.encode(errors="replace").decode(), "name is not UTF-8")
                continue
            if is_dir:
                subdirs.append(name)
                continue
            yield from self._take_file(dfd, name, rel)
            if self.full:
                return
        for name in subdirs:
            if depth + 1 > MAX_OUT_DEPTH or self.entries >= MAX_OUT_ENTRIES:
                self.truncated = True  # deeper folders are not entered: a cut, like the byte limit
                return
            try:
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            except OSError as exc:
                self._skip(prefix + name, f"unreadable directory: {exc.strerror}")
                continue
            try:
                yield from self._walk_dir(sub, prefix + name + "/", depth + 1)
            except OSError as exc:
                self._skip(prefix + name, f"unreadable directory: {exc.strerror}")
            finally:
                os.close(sub)
            if self.full:
                return

    def _take_file(self, dfd: int, name: str, rel: str) -> Generator[None, None, None]:
        """Read one entry that is not a folder: a regular file is taken, anything else skipped with a reason."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as exc:
            try:  # a symlink (ELOOP), a socket (ENXIO): say what it is
                kind = entry_kind(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode)
            except OSError:
                kind = "file"
            self._skip(rel, kind if kind != "file" else f"unreadable: {exc.strerror}")
            return
        try:
            st = os.fstat(fd)
            kind = entry_kind(st.st_mode)
            if kind != "file":
                self._skip(rel, kind)
                return
            cost = len(json.dumps(rel, ensure_ascii=False).encode()) + 16
            budget = self.max_bytes - self.total
            if len(self.files) >= MAX_OUT_FILES or self.name_bytes + cost > MAX_OUT_NAME_BYTES:
                self.truncated = self.full = True  # one more regular file than may be returned
                return
            if st.st_size > budget:
                # Too large for what is left of limits.files: named, and the walk goes on, so the smaller
                # files after it still come back (a 60 MB file must not take a 2-byte one down with it).
                self.truncated = True
                self._skip(rel, "larger than what is left of limits.files")
                return
            chunks: list[bytes] = []
            size = 0
            while size <= budget:
                chunk = os.read(fd, min(_READ_STEP, budget + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                yield
            if size > budget:  # it grew after our fstat
                self.truncated = True
                self._skip(rel, "larger than what is left of limits.files")
                return
        finally:
            os.close(fd)
        self.name_bytes += cost
        self.total += size
        self.files.append([rel, size])
        self.chunks.append(b"".join(chunks))


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
