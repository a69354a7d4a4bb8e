"""A full disk under the file store does not lose a finished run: what fits is kept, the rest is named.

The store's directory is a real 64 KB tmpfs, mounted for the test (root only).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from mainsdk import Sandbox, SandboxDeps
from mainsdk.config import load_config_text
from mainsdk.files import LocalDirectoryFileStore

from mainsdk_local import local_sandbox_driver

CONFIG = """
sandbox:
  driver: local
  local: { python: python3 }
  limits: { timeout: 20s, files: 1MB }
permissions:
  processes: [python3]
"""
# The code's out files: one far larger than the disk, one small; and it prints and exits 3.
CODE = (
    "open('../out/big.bin', 'wb').write(b'b' * 200_000)\n"
    "open('../out/small.txt', 'w').write('small')\n"
    "print('done'); raise SystemExit(3)\n"
)


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KB tmpfs, unmounted afterwards."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    mountpoint = tmp_path / "disk"
    mountpoint.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"this machine cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def test_the_store_leaves_no_partial_file_when_the_disk_fills(tiny_disk: Path) -> None:
    store = LocalDirectoryFileStore(tiny_disk)
    with pytest.raises(OSError) as caught:
        store.put("t", "big.bin", b"x" * 200_000)
    assert caught.value.errno == errno.ENOSPC
    assert not list(tiny_disk.rglob("file_*")) and store.held == 0
    assert store.read("t", store.put("t", "small.txt", b"small").id) == b"small"


def test_a_full_store_keeps_the_runs_result_and_names_the_dropped_file(tiny_disk: Path, tmp_path: Path) -> None:
    config = load_config_text(CONFIG, source=tmp_path / "main.yaml")
    driver = local_sandbox_driver(permissions=config.permissions)
    store = LocalDirectoryFileStore(tiny_disk)
    sandbox = Sandbox(SandboxDeps(config=config, driver=driver, files=store, load_entrypoints=False))
    try:
        result = sandbox.run(CODE)
    finally:
        sandbox.close()
    assert (result.stdout, result.exit_code, result.stop) == ("done\n", 3, None)
    assert result.files_dropped == ("big.bin",)
    assert [f.name for f in result.files] == ["small.txt"]
    assert sandbox.files.read(result.files[0]) == b"small"
    assert json.loads(json.dumps(result.to_dict()))["files_dropped"] == ["big.bin"]
