"""Out archives and uploads: the tar the driver writes into a sandbox and the one it reads back, unpacked untrusted.

An upload is one gzipped tar whose names are absolute paths relative to ``/`` and sent with ``x-cwd: /``, as
both official clients write files (github vercel/sandbox ``packages/vercel-sandbox/src/session.ts``
``writeFiles``: ``extractDir: "/"``, ``utils/normalizePath.ts``); the folders a name needs are made by the
extraction, as the sandbox's default user. A one-shot run's out folder comes back as one ``tar -czf`` archive
the code could have tampered with: ``unpack_out`` trusts nothing in it.
"""

from __future__ import annotations

import gzip
import io
import posixpath
import tarfile
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from mainsdk.driver import Collected, OutFile

# What we read of an out archive at most, past the files limit: tar headers and gzip's worst case.
ARCHIVE_SLACK = 8 * 1024 * 1024
# Entries of an out archive looked at, at most (each costs a tar header to read; the rest is truncated).
MAX_OUT_ENTRIES = 10_000
UPLOAD_CWD = "/"  # the x-cwd of every upload: names are absolute, as the official clients send them


def upload(files: Mapping[str, bytes], level: int = 9) -> bytes:
    """The ``fs/write`` body for ``files`` named by absolute paths: a tar of them relative to ``UPLOAD_CWD``."""
    named = {posixpath.relpath(posixpath.normpath(name), UPLOAD_CWD): data for name, data in files.items()}
    return _targz(named, (), level)


def unpack_out(data: bytes, max_bytes: int) -> Collected:
    """The regular files of an out archive within ``max_bytes``, by name; links and the rest are skipped.

    The archive is the code's to tamper with (a process it left in its own
    session can rewrite it before it is read), so nothing in it is trusted: a
    name must be a plain relative path, a file is read only while the total
    stays within ``max_bytes`` (a gzip bomb costs no memory), and at most
    ``MAX_OUT_ENTRIES`` entries are looked at. The archive may be cut (it was
    read up to a cap): what came before counts, and the run is ``truncated``.
    """
    files: dict[str, bytes] = {}
    skipped: list[tuple[str, str]] = []
    truncated = False
    total = 0
    inflated = _Inflate(data, limit=max_bytes + ARCHIVE_SLACK)
    try:
        with tarfile.open(fileobj=inflated, mode="r|") as archive:
            for count, member in enumerate(archive):
                if count >= MAX_OUT_ENTRIES:
                    truncated = True
                    break
                name = _out_name(member.name)
                if name is None or member.isdir():
                    if name is None and member.name.strip("./"):
                        skipped.append((member.name[:200], "not a plain relative name"))
                    continue
                if not member.isfile():
                    skipped.append((name, "not a regular file"))
                    continue
                if total + member.size > max_bytes or name in files:
                    truncated = truncated or name not in files
                    skipped.append((name, "past limits.files" if name not in files else "twice in the archive"))
                    continue
                extracted = archive.extractfile(member)
                content = extracted.read(member.size) if extracted is not None else b""
                total += len(content)
                files[name] = content
    except (tarfile.TarError, EOFError, OSError, zlib.error, TypeError, ValueError):
        # Read up to the cap, cut, or garbage (tarfile's stream mode raises TypeError on a header cut short):
        # what came before counts.
        truncated = True
    # tarfile ends quietly at a stream cut short: only a gzip stream read to its end is the whole archive.
    while not truncated and inflated.read(65536):
        pass  # the end-of-archive blocks and record padding, up to the gzip trailer
    truncated = truncated or not inflated.complete
    return Collected(
        files=tuple(OutFile(name, files[name]) for name in sorted(files)),
        truncated=truncated,
        skipped=tuple(sorted(skipped)),
    )


class _Inflate(io.RawIOBase):
    """A gzip stream inflated as it is read, never past ``limit`` bytes out (what a skipped bomb may cost)."""

    def __init__(self, data: bytes, limit: int) -> None:
        self._data = data
        self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._pending = b""
        self._fed = 0
        self._out = 0
        self._limit = limit

    @property
    def complete(self) -> bool:
        """Whether the gzip stream was read to its end (its trailer checked) within the limit."""
        return self._inflater.eof and not self._pending

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while not self._pending and not self._inflater.eof and self._out < self._limit:
            chunk = self._inflater.unconsumed_tail or self._data[self._fed : self._fed + 65536]
            if not self._inflater.unconsumed_tail:
                self._fed += len(chunk)
            if not chunk:
                break  # the data ends before the stream does: cut
            self._pending = self._inflater.decompress(chunk, 65536)
        size = min(len(view), len(self._pending), max(self._limit - self._out, 0))
        view[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        self._out += size
        return size


def _out_name(raw: str) -> str | None:
    """``raw`` as a name relative to out/ (``./a/b`` is ``a/b``), or None when it is not one (absolute, ``..``)."""
    name = raw.removeprefix("./")
    if not name or name.startswith("/") or "\0" in name:
        return None
    normal = posixpath.normpath(name)
    if normal in (".", "") or normal == ".." or normal.startswith("../"):
        return None
    return normal


def _targz(files: Mapping[str, bytes], folders: Sequence[str], level: int = 9) -> bytes:
    """A gzipped tar of ``folders`` (empty) and ``files``, deterministic: fixed times, owner and order."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            archive.addfile(info)
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), compresslevel=level, mtime=0)


_unpack_out = unpack_out  # the name the tests import it by
