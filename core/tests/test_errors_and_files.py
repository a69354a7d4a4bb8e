"""Error codes carry a status and retryability; FileRefs are read only by their tenant."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from mainsdk import errors
from mainsdk.errors import SandboxError
from mainsdk.files import LocalDirectoryFileStore


def test_codes_carry_status_and_retryability() -> None:
    outage = SandboxError(errors.DRIVER_UNAVAILABLE, "provider down")
    assert (outage.status, outage.retryable) == (503, True)
    invalid = SandboxError(errors.INVALID_OPTION, "bad")
    assert (invalid.status, invalid.retryable) == (400, False)
    assert str(invalid) == "MAIN-SANDBOX-0001: bad"
    assert SandboxError(errors.COST, "x").status == 402
    assert SandboxError(errors.NO_SESSION, "x").status == 404


def test_a_file_is_read_back_by_its_tenant_only(tmp_path: Path) -> None:
    store = LocalDirectoryFileStore(tmp_path)
    ref = store.put("tenant-a", "count.txt", b"42")
    assert (ref.name, ref.size, ref.sha256) == ("count.txt", 2, hashlib.sha256(b"42").hexdigest())
    assert store.read("tenant-a", ref.id) == b"42"
    with pytest.raises(SandboxError) as other:
        store.read("tenant-b", ref.id)
    with pytest.raises(SandboxError) as unknown:
        store.read("tenant-a", "file_" + "0" * 32)
    # The other tenant learns nothing more than for an id that does not exist.
    assert other.value.code == unknown.value.code == errors.NO_SESSION
    assert other.value.message.replace(ref.id, "X") == unknown.value.message.replace("file_" + "0" * 32, "X")


def test_a_path_like_file_id_is_refused(tmp_path: Path) -> None:
    store = LocalDirectoryFileStore(tmp_path)
    with pytest.raises(SandboxError):
        store.read("tenant-a", "../../etc/passwd")
