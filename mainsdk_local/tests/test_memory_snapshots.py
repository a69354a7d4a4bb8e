"""Memory snapshots on the local driver: the probe for a working CRIU says what it found, and a real CRIU 4.1
(where this machine has one) fails on a real box exactly as the driver's refusal says."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mainsdk.config import load_config_text
from mainsdk_local.criu import MIN_VERSION, NAMESPACE_BOX, _working, memory_why
from mainsdk_local.driver import driver_from_config

# Stand-ins for the CRIU versions this probe must tell apart (Debian bookworm's 3.17 is what apt gives here).
OLD = "#!/bin/sh\necho 'Version: 3.17.1'\n"
BROKEN = "#!/bin/sh\n[ \"$1\" = check ] && { echo 'Error: no memfd' >&2; exit 1; }\necho 'Version: 4.1.1'\n"
GOOD = "#!/bin/sh\n[ \"$1\" = check ] && { echo 'Looks good.'; exit 0; }\necho 'Version: 4.1.1'\n"


def _program(tmp_path: Path, text: str) -> str:
    path = tmp_path / "criu"
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (OLD, "is CRIU 3.17.1 (Debian bookworm's 3.17 fails on this kernel)"),
        (BROKEN, "check` fails: Error: no memfd"),
        (GOOD, f"CRIU 4.1.1 at {{path}} works (criu check passes), but {NAMESPACE_BOX}"),
    ],
    ids=["bookworm-3.17", "check-fails", "working-4.1"],
)
def test_the_probe_says_what_it_found_and_why_memory_is_not_kept(tmp_path: Path, text: str, said: str) -> None:
    criu = _program(tmp_path, text)
    assert said.format(path=criu) in memory_why(criu, "namespace")


def test_a_root_without_cap_sys_resource_is_named_too(tmp_path: Path) -> None:
    status = Path("/proc/self/status").read_text()
    effective = int(status.split("CapEff:")[1].split()[0], 16)
    said = "; nor can it read a box's rlimits without CAP_SYS_RESOURCE"
    assert memory_why(_program(tmp_path, GOOD), "namespace").endswith(said) == (not effective >> 24 & 1)


def test_without_criu_the_reason_names_the_program_and_the_version_needed() -> None:
    why = memory_why("mainsdk-no-such-criu", "namespace")
    assert why == "memory snapshots need CRIU 4.1 or later: no 'mainsdk-no-such-criu' found (sandbox.local.criu)"


def test_weak_mode_names_landlock_without_looking_for_criu(tmp_path: Path) -> None:
    assert "Landlock" in memory_why(_program(tmp_path, GOOD), "weak", landlock_abi=6)
    assert memory_why("mainsdk-no-such-criu", "weak", landlock_abi=0) == "memory snapshots: not in weak mode"


def test_sandbox_local_criu_names_the_program_looked_for() -> None:
    config = load_config_text("sandbox:\n  driver: local\n  local: { criu: mainsdk-no-such-criu }\n")
    driver = driver_from_config(config)
    try:
        why = driver.mainsdk_driver_capabilities().checkpoint_why
        assert "no 'mainsdk-no-such-criu' found (sandbox.local.criu)" in why
    finally:
        driver.mainsdk_driver_shutdown()


def _real_criu() -> str:
    criu = shutil.which(os.environ.get("MAINSDK_TEST_CRIU", "criu"))
    if criu is None or _working(criu)[1]:
        version = ".".join(map(str, MIN_VERSION))
        pytest.skip(f"no working CRIU {version} or later here (criu on PATH, or MAINSDK_TEST_CRIU)")
    return criu


def _kernel_supervisor() -> int:
    """The host pid of this test's session kernel supervisor (the cell kernel's first process in its box)."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            parents[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])

    def ours(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    found = []
    for pid in parents:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if ours(pid) and len(argv) > 3 and argv[2:4] == [b"-u", b"-c"] and b"executor" not in argv:
            found.append(pid)
    assert len(found) == 1, found
    return found[0]


def test_a_real_criu_cannot_dump_a_session_box_and_the_box_goes_on(
    make_sandbox: Callable[..., Any], tmp_path: Path
) -> None:
    criu = _real_criu()
    sandbox = make_sandbox().sandbox
    assert "memory" not in sandbox.capabilities().checkpoint_kinds
    with sandbox.create() as session:
        session.run_code("x = 41")
        supervisor = _kernel_supervisor()
        box_init = int(Path(f"/proc/{supervisor}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert Path(f"/proc/{box_init}/status").read_text().split("NSpid:")[1].split()[1] == "1"
        for pid, extra, error in (
            (box_init, [], "Can't dump nested user namespace"),  # the box's pid 1, in the host's user namespace
            (supervisor, ["--network-lock", "skip"], "Unable to convert uid or gid"),  # its own maps only uid 1000
        ):
            images = tmp_path / str(pid)
            images.mkdir()
            argv = [criu, "dump", "-t", str(pid), "-D", str(images), "-o", "dump.log", "--leave-running", *extra]
            dumped = subprocess.run(argv, capture_output=True, timeout=60, check=False)
            assert dumped.returncode != 0
            assert error in (images / "dump.log").read_text()
        assert session.run_code("print(x + 1)").stdout == "42\n"  # CRIU let the box go as it was
