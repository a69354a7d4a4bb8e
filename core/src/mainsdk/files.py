"""FileRefs: what a run left in its out folder, kept for the tenant that ran it.

The default store is a private temporary folder, bounded in size and age (the oldest files go first) and
removed when the process exits. A folder left by a process that died without running ``atexit`` (SIGKILL,
``os._exit``) is removed by the next default store that starts on the machine.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import attrs

from mainsdk import arguments, units
from mainsdk.errors import INVALID_OPTION, NO_SESSION, SandboxError

_FILE_ID = re.compile(r"file_[0-9a-f]{32}")  # matched whole: ``$`` would let a final newline by
DEFAULT_MAX_BYTES = 1024**3  # 1 GB of out files kept per store
DEFAULT_MAX_AGE = 3600.0  # a ref can be read for an hour
TEMP_PREFIX = "mainsdk-files-"
# A default store's folder: mainsdk-files-<boot>-<pid namespace>-<pid>-<process start>-<random>. The pid alone
# would not do: a dead process's pid is reused, and a pid means another process in another pid namespace.
_STORE_FOLDER = re.compile(rf"^{TEMP_PREFIX}([0-9a-f]+)-(\d+)-(\d+)-(\d+)-")


@attrs.frozen
class FileRef:
    """A file a run wrote to its out folder. Read it with ``sandbox.files.read(ref)``."""

    id: str
    name: str
    size: int
    sha256: str


def file_ref_id(value: object) -> str:
    """What ``files.read`` takes: a FileRef or its id string."""
    if isinstance(value, FileRef):
        return value.id
    if isinstance(value, str):
        return arguments.text(value, "ref", max_bytes=256)
    raise arguments.invalid("ref", f"must be a FileRef or its id, not {arguments.type_name(value)}")


class FileStore(Protocol):
    """Where FileRefs are kept. Every call names the tenant; a file is only ever read by its own.

    ``put`` raises ``OSError`` when it cannot keep a file (its disk is full, the file is larger than the
    store may hold); the run's result then stands and names the file in ``files_dropped``.
    """

    def put(self, tenant: str, name: str, data: bytes) -> FileRef:
        """Keep ``data`` for ``tenant`` and return its ref."""

    def read(self, tenant: str, file_id: str) -> bytes:
        """Return the bytes of ``file_id`` if ``tenant`` owns it; else ``MAIN-SANDBOX-0008``."""


class FileStoreFull(OSError):
    """A file the store cannot keep: larger than its ``max_bytes`` on its own."""


@arguments.checked_calls("store")
class LocalDirectoryFileStore:
    """A file store in a local directory: one folder per tenant, one file per ref.

    With no directory given it uses a private temporary one, removed when the process exits: refs then
    live as long as the app, and stale folders of dead processes are removed when it starts.

    ``max_bytes`` (default 1 GB; an int or a size like ``"100MB"``) and ``max_age`` (default 1 hour;
    seconds or a duration like ``"10m"``) bound what it keeps: a new file makes room by removing the oldest,
    and a file older than ``max_age`` is removed. Reading a removed ref is ``MAIN-SANDBOX-0008``. The bound
    counts the files this store object wrote or found at start.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        max_bytes: int | str = DEFAULT_MAX_BYTES,
        max_age: float | str = DEFAULT_MAX_AGE,
    ) -> None:
        self.max_bytes = int(_option(units.parse_size, max_bytes, "max_bytes"))
        self.max_age = _option(units.parse_duration, max_age, "max_age")
        if root is None:
            remove_stale_folders(tempfile.gettempdir())
            root = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{_process_identity(os.getpid())}-")
            atexit.register(shutil.rmtree, root, True)
        self._root = Path(root)
        self._root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = threading.Lock()  # the sync API runs calls from many threads
        # Every kept file, oldest first: its data path -> (bytes held with its metadata, when it was kept).
        self._kept: OrderedDict[Path, tuple[int, float]] = OrderedDict()
        self._held = 0
        self._index_existing()

    @property
    def root(self) -> Path:
        """The directory the files are kept in."""
        return self._root

    @property
    def held(self) -> int:
        """The bytes this store holds now (files and their metadata)."""
        return self._held

    def _tenant_dir(self, tenant: str) -> Path:
        # Tenant ids are the app's own strings: hash them into a safe folder name.
        return self._root / hashlib.sha256(tenant.encode()).hexdigest()[:32]

    def put(self, tenant: str, name: str, data: bytes) -> FileRef:
        """Keep ``data`` for ``tenant`` and return its ref; ``OSError`` if it cannot be kept (see ``FileStore``)."""
        ref = FileRef(
            id=f"file_{secrets.token_hex(16)}", name=name, size=len(data), sha256=hashlib.sha256(data).hexdigest()
        )
        meta = json.dumps(attrs.asdict(ref)).encode()
        size = len(data) + len(meta)
        if size > self.max_bytes:
            raise FileStoreFull(
                errno.EFBIG, f"a {len(data)}-byte file is larger than the file store's max_bytes ({self.max_bytes})"
            )
        folder = self._tenant_dir(tenant)
        path = folder / ref.id
        with self._lock:
            now = time.time()
            self._evict(now, room=size)
            folder.mkdir(exist_ok=True, mode=0o700)
            try:
                path.write_bytes(data)
                path.with_name(f"{ref.id}.json").write_bytes(meta)
            except OSError:
                # A full disk mid-write: leave no partial file behind to be read back as if whole.
                self._unlink(path)
                raise
            self._kept[path] = (size, now)
            self._held += size
        return ref

    def read(self, tenant: str, file_id: str) -> bytes:
        """Return the bytes of ``file_id`` if ``tenant`` owns it; else ``MAIN-SANDBOX-0008``."""
        if isinstance(file_id, str) and _FILE_ID.fullmatch(file_id):
            path = self._tenant_dir(tenant) / file_id
            with self._lock:
                self._evict(time.time(), room=0)
            try:
                return path.read_bytes()
            except FileNotFoundError:
                pass
        # The same words whether it never existed, is another tenant's or was removed by the bounds.
        raise SandboxError(
            NO_SESSION,
            f"no file {file_id!r} in the current tenant (files are kept {units.format_duration(self.max_age)} "
            f"and {units.format_size(self.max_bytes)} at most; read a file soon after its run)",
            status=404,
        )

    def _evict(self, now: float, room: int) -> None:
        """Remove files past ``max_age``, then the oldest until ``room`` more bytes fit. Holds the lock."""
        while self._kept:
            path, (size, kept_at) = next(iter(self._kept.items()))
            if now - kept_at <= self.max_age and self._held + room <= self.max_bytes:
                return
            del self._kept[path]
            self._held -= size
            self._unlink(path)

    @staticmethod
    def _unlink(path: Path) -> None:
        for part in (path, path.with_name(f"{path.name}.json")):
            with contextlib.suppress(OSError):
                part.unlink()

    def _index_existing(self) -> None:
        """Count files already in ``root`` (a directory the app reuses), oldest first, so the bounds hold."""
        found: list[tuple[float, Path, int]] = []
        for folder in self._root.iterdir():
            if not folder.is_dir() or folder.is_symlink():
                continue
            for path in folder.iterdir():
                if not _FILE_ID.fullmatch(path.name):
                    continue
                with contextlib.suppress(OSError):
                    stat = path.stat()
                    meta = path.with_name(f"{path.name}.json")
                    size = stat.st_size + (meta.stat().st_size if meta.exists() else 0)
                    found.append((stat.st_mtime, path, size))
        for mtime, path, size in sorted(found):
            self._kept[path] = (size, mtime)
            self._held += size
        with self._lock:
            self._evict(time.time(), room=0)


def _option(parse: Callable[[object], float], value: object, name: str) -> float:
    """An option parsed by ``mainsdk.units``, or MAIN-SANDBOX-0001 naming it and the fix."""
    try:
        return parse(value)
    except (ValueError, TypeError) as exc:
        raise SandboxError(INVALID_OPTION, f"LocalDirectoryFileStore({name}=...): {exc}") from None


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:12]
    except OSError:
        return "0"


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def _process_start(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot, /proc/<pid>/stat field 22); None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ")": split after the last one.
    fields = stat.rsplit(")", 1)[1].split()
    return fields[19] if len(fields) > 19 else None


def _process_identity(pid: int) -> str:
    """``<boot>-<pid namespace>-<pid>-<start>``: what names this process and no other, ever, on this machine."""
    return f"{_boot_id()}-{_pid_namespace()}-{pid}-{_process_start(pid) or 0}"


def _owner_alive(boot: str, pid_namespace: str, pid: int, start: str) -> bool:
    """Whether the process that made a store folder may still be running; True whenever it cannot be known."""
    our_boot, our_namespace = _boot_id(), _pid_namespace()
    if "0" in (boot, our_boot):
        if boot != our_boot:
            return True  # one side cannot tell its boot: no judgement
    elif boot != our_boot:
        return False  # made before this boot: everything of that boot is gone
    if pid_namespace != our_namespace:
        return True  # another pid namespace (a container sharing /tmp): its pids mean nothing here
    if our_namespace == "0":
        # No /proc (not Linux): the pid alone. A reused pid then keeps a stale folder, never the reverse.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True
        return True
    current = _process_start(pid)
    return current is not None and current == start


def remove_stale_folders(temp_dir: str | os.PathLike[str]) -> list[str]:
    """Remove the default stores of dead processes in ``temp_dir``; return the folders removed.

    Only folders named by a default store, owned by this user and not a link; never one whose process
    still runs (a pid that was reused has another start time, so it does not protect a stale folder).
    """
    removed: list[str] = []
    try:
        entries = list(os.scandir(temp_dir))
    except OSError:
        return removed
    uid = os.getuid() if hasattr(os, "getuid") else None
    for entry in entries:
        match = _STORE_FOLDER.match(entry.name)
        if match is None:
            continue
        try:
            stat = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not entry.is_dir(follow_symlinks=False) or (uid is not None and stat.st_uid != uid):
            continue
        boot, pid_namespace, pid, start = match[1], match[2], int(match[3]), match[4]
        if _owner_alive(boot, pid_namespace, pid, start):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    return removed


def checked_tenant(tenancy: Callable[[], str]) -> str:
    """What ``tenancy()`` returns, which must be a non-empty string."""
    tenant = tenancy()
    if not isinstance(tenant, str) or not tenant:
        raise SandboxError(
            INVALID_OPTION,
            f"deps.tenancy returned {type(tenant).__name__} {tenant!r:.40}; it must return the tenant id as a string",
        )
    return arguments.text(tenant, "the tenant id from deps.tenancy", max_bytes=1024)


@arguments.checked_calls("sandbox.files")
class AsyncFiles:
    """The FileRefs of the current tenant."""

    def __init__(self, store: FileStore, tenancy: Callable[[], str]) -> None:
        self._store = store
        self._tenancy = tenancy

    async def read(self, ref: FileRef | str) -> bytes:
        """The bytes of a FileRef the current tenant owns; ``MAIN-SANDBOX-0008`` otherwise."""
        file_id = file_ref_id(ref)
        return self._store.read(checked_tenant(self._tenancy), file_id)
