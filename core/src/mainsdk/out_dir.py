"""Writing a run's out files into a folder on the host, never outside it (``mainsdk sandbox run --out DIR``).

The names were chosen by the code in the box, so each is checked as hostile:
a plain relative path (no absolute path, no ``..``, ``.`` or empty part, no
NUL), and written by walking the folder one part at a time with ``O_NOFOLLOW``
from an open descriptor of ``DIR``, so a symlink already in ``DIR`` (or swapped
in during the write) cannot lead the file elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path


class UnsafeName(ValueError):
    """An out file's name that cannot be written under the folder; the message says why."""


def check_name(name: str) -> list[str]:
    """The parts of ``name`` if it is a plain relative path; ``UnsafeName`` otherwise."""
    if not name or "\0" in name:
        raise UnsafeName("an empty name or one with a NUL byte")
    if name.startswith("/"):
        raise UnsafeName("an absolute path")
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise UnsafeName("a path with an empty, '.' or '..' part")
    return parts


def write_under(directory: str | os.PathLike[str], name: str, data: bytes, *, make: bool = True) -> Path:
    """Write ``data`` to ``directory/name`` (its folders made as needed) and return that path.

    ``UnsafeName`` when the name is not a plain relative path, or when a part of
    it on disk is a symlink or not a folder; nothing is then written.
    ``make=False``: ``directory`` must already exist and is itself opened without
    following a link (a box's folder, which code in the box could have replaced).
    """
    parts = check_name(name)
    root = Path(directory)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    if make:
        root.mkdir(parents=True, exist_ok=True)
    else:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(root, flags)
    except OSError as exc:
        raise UnsafeName(f"the folder is a symlink or not a folder ({exc.strerror})") from None
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                raise UnsafeName(f"{part!r} in the folder is a symlink or not a folder ({exc.strerror})") from None
            os.close(fd)
            fd = child
        # O_NONBLOCK: a fifo already there fails at once rather than waiting for a reader; truncated only once
        # known to be a regular file.
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            out = os.open(parts[-1], flags, 0o644, dir_fd=fd)
        except OSError as exc:
            raise UnsafeName(f"it is a symlink or not a regular file in the folder ({exc.strerror})") from None
        with os.fdopen(out, "wb") as file:
            if not stat.S_ISREG(os.fstat(out).st_mode):
                raise UnsafeName("it is not a regular file in the folder")
            os.ftruncate(out, 0)
            file.write(data)
    finally:
        os.close(fd)
    return root.joinpath(*parts)
