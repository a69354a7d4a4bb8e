"""The local driver's checkpoint hooks: filesystem snapshots and forks (overlayfs), pause (the cgroup freezer).

The launcher does the work (``launcher/checkpoints.py``); these hooks are its side of core's contract. A
snapshot lives in the launcher process: it is gone when the launcher stops (the app exits), and a session made
from it after that is MAIN-SANDBOX-0008. Memory snapshots need CRIU 4.1 or later, which this driver does not
use yet: it declares only "filesystem", so a "memory" snapshot is refused by core, naming the driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mainsdk.driver import NO_SESSION, SandboxError
from mainsdk.hookspecs import hookimpl

if TYPE_CHECKING:
    from mainsdk_local.driver import LocalBox
    from mainsdk_local.launcher_client import Launcher


class CheckpointHooks:
    """The checkpoint hooks of ``LocalDriver`` (a base class of it, so pluggy finds them on the driver)."""

    _launcher: Launcher

    @hookimpl
    async def mainsdk_driver_snapshot(self, box: LocalBox, snapshot_id: str, kind: str) -> float | None:
        if kind != "filesystem":
            # Core refuses first (the capabilities say "filesystem"); this is the driver's own word on it.
            raise SandboxError("MAIN-SANDBOX-0001", f"the local driver keeps no {kind!r} snapshots")
        await box.box.snapshot(snapshot_id)
        return None  # kept while the launcher lives

    @hookimpl
    async def mainsdk_driver_delete_snapshot(self, snapshot_id: str) -> None:
        self._launcher.forget_snapshot(snapshot_id)

    @hookimpl
    async def mainsdk_driver_pause(self, box: LocalBox) -> None:
        await box.box.pause()

    @hookimpl
    async def mainsdk_driver_resume(self, box: LocalBox) -> None:
        await box.box.resume()


def snapshot_gone(snapshot_id: str) -> SandboxError:
    """MAIN-SANDBOX-0008 for a snapshot the launcher no longer has (it restarted since)."""
    return SandboxError(
        NO_SESSION, f"no snapshot {snapshot_id!r} in the local launcher (it stopped since, taking its snapshots)"
    )
