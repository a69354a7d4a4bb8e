"""Writing a run's out files into a folder on the host, never outside it (``mainsdk sandbox run --out DIR``).

``OutDir`` is the folder checked before the code runs, each file created new.
(``mainsdk_driverkit.hostbox.write_under`` writes into a box's own folder,
replacing, with the same ``check_name``, core's ``mainsdk.out_names``.)

The names were chosen by the code in the box, so each is checked as hostile:
a plain relative path (``check_name``: no absolute path, no ``..``, ``.`` or empty part, no
NUL), and written by walking the folder one part at a time with ``O_NOFOLLOW``
from an open descriptor of ``DIR``, so a symlink already in ``DIR`` (or swapped
in during the write) cannot lead the file elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path

from mainsdk.out_names import UnsafeName, check_name


class OutDirError(ValueError):
    """``--out DIR`` cannot take out files (missing, not a folder, not writable, or where config lives)."""


class NotWritten(ValueError):
    """One out file was not written; the message says why, and that nothing on disk was changed."""


class OutDir:
    """A folder checked once, before the code runs, and then written through its open descriptor only.

    Every file is created new (``O_CREAT | O_EXCL | O_NOFOLLOW``): an existing
    name, a symlink or anything else already there is left as it is and
    reported. Sub-folders are walked from the folder's descriptor one part at a
    time with ``O_NOFOLLOW | O_DIRECTORY``, so a link planted in the folder is
    never followed; and the folder itself, once opened, is the one written to,
    even if its path is renamed or swapped for a link while the code runs.
    """

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def open(cls, path: str, *, refuse: Sequence[tuple[str, str]] = ()) -> OutDir:
        """Open ``path`` for out files; ``OutDirError`` saying what is wrong, before anything runs.

        ``refuse``: ``(what, folder)`` pairs (the current folder, the config's)
        that ``path`` may neither be nor hold: tools read configuration from
        there (main.yaml, uv.toml, pip.conf, .npmrc, conftest.py, ...).
        """
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise OutDirError("no such folder; create it first (mkdir)") from None
        except NotADirectoryError:
            raise OutDirError("not a folder (a file or a device); give a folder") from None
        except OSError as exc:
            raise OutDirError(f"cannot open it: {exc.strerror}") from None
        try:
            where = os.path.realpath(f"/proc/self/fd/{fd}") if os.path.isdir("/proc/self/fd") else path
            for what, folder in refuse:
                held = os.path.realpath(folder)
                if held == where or held.startswith(where.rstrip("/") + "/"):
                    raise OutDirError(
                        f"it {'is' if held == where else 'holds'} {what} ({held}), where main.yaml and "
                        "tool configuration live, and a file the code writes there could steer a tool run from "
                        "it; give a subfolder of its own, like --out out"
                    )
            _probe_writable(fd)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd)

    def write(self, name: str, data: bytes) -> Path:
        """Create ``name`` (its folders made as needed) holding ``data``; ``NotWritten`` if it cannot be created."""
        try:
            parts = check_name(name)
        except UnsafeName as exc:
            raise NotWritten(str(exc)) from None
        fd = os.dup(self._fd)
        try:
            for number, part in enumerate(parts[:-1]):
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise NotWritten(f"cannot make the folder {part!r} ({exc.strerror})") from None
                try:
                    child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                except OSError as exc:
                    folder = "/".join(parts[: number + 1])
                    raise NotWritten(
                        f"{folder!r} in the folder is a symlink or not a folder ({exc.strerror}); left as it was"
                    ) from None
                os.close(fd)
                fd = child
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                out = os.open(parts[-1], flags, 0o644, dir_fd=fd)
            except FileExistsError:
                raise NotWritten(
                    f"{_what_is_there(parts[-1], fd)} of that name is already there; it was left as it was"
                ) from None
            except OSError as exc:
                raise NotWritten(f"cannot create it ({exc.strerror})") from None
            with os.fdopen(out, "wb") as file:
                try:
                    file.write(data)
                    file.flush()
                except OSError as exc:
                    # A partial file is worse than none: the name was ours (O_EXCL), so it is removed.
                    with contextlib.suppress(OSError):
                        os.unlink(parts[-1], dir_fd=fd)
                    raise NotWritten(f"cannot write it ({exc.strerror})") from None
        finally:
            os.close(fd)
        return Path(self.path).joinpath(*parts)

    def close(self) -> None:
        """Close the folder's descriptor."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _what_is_there(name: str, fd: int) -> str:
    try:
        mode = os.lstat(name, dir_fd=fd).st_mode
    except OSError:
        return "a file"
    return "a symlink" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else "a file"


def _probe_writable(fd: int) -> None:
    """Create and remove a file in the folder: ``os.access`` says yes to root on /proc, a read-only mount, ..."""
    name = f".mainsdk-out-check-{secrets.token_hex(8)}"
    try:
        probe = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
    except OSError as exc:
        raise OutDirError(f"cannot create files in it ({exc.strerror})") from None
    os.close(probe)
    os.unlink(name, dir_fd=fd)
