"""FileRefs: what a run left in its out folder, kept for the tenant that ran it."""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Protocol

import attrs

from mainsdk.errors import NO_SESSION, SandboxError

_FILE_ID = re.compile(r"^file_[0-9a-f]{32}$")


@attrs.frozen
class FileRef:
    """A file a run wrote to its out folder. Read it with ``sandbox.files.read(ref)``."""

    id: str
    name: str
    size: int
    sha256: str


class FileStore(Protocol):
    """Where FileRefs are kept. Every call names the tenant; a file is only ever read by its own."""

    def put(self, tenant: str, name: str, data: bytes) -> FileRef:
        """Keep ``data`` for ``tenant`` and return its ref."""

    def read(self, tenant: str, file_id: str) -> bytes:
        """Return the bytes of ``file_id`` if ``tenant`` owns it; else ``MAIN-SANDBOX-0008``."""


class LocalDirectoryFileStore:
    """A file store in a local directory: one folder per tenant, one file per ref.

    With no directory given it uses a private temporary one, removed when the
    process exits: refs then live as long as the app.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        if root is None:
            root = tempfile.mkdtemp(prefix="mainsdk-files-")
            atexit.register(shutil.rmtree, root, True)
        self._root = Path(root)
        self._root.mkdir(parents=True, exist_ok=True, mode=0o700)

    def _tenant_dir(self, tenant: str) -> Path:
        # Tenant ids are the app's own strings: hash them into a safe folder name.
        return self._root / hashlib.sha256(tenant.encode()).hexdigest()[:32]

    def put(self, tenant: str, name: str, data: bytes) -> FileRef:
        """Keep ``data`` for ``tenant`` and return its ref."""
        ref = FileRef(
            id=f"file_{secrets.token_hex(16)}", name=name, size=len(data), sha256=hashlib.sha256(data).hexdigest()
        )
        folder = self._tenant_dir(tenant)
        folder.mkdir(exist_ok=True, mode=0o700)
        (folder / ref.id).write_bytes(data)
        (folder / f"{ref.id}.json").write_text(json.dumps(attrs.asdict(ref)))
        return ref

    def read(self, tenant: str, file_id: str) -> bytes:
        """Return the bytes of ``file_id`` if ``tenant`` owns it; else ``MAIN-SANDBOX-0008``."""
        if _FILE_ID.match(file_id):
            try:
                return (self._tenant_dir(tenant) / file_id).read_bytes()
            except FileNotFoundError:
                pass
        raise SandboxError(NO_SESSION, f"no file {file_id!r} in the current tenant", status=404)
