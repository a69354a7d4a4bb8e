"""The local driver's checkpoint hooks: filesystem snapshots and forks (overlayfs), pause (the cgroup freezer).

The launcher does the work (``launcher/checkpoints.py``); these hooks are its side of core's contract. A
snapshot lives in the launcher process: a private launcher's is gone when it stops (the app exits), and a session
made from it after that is MAIN-SANDBOX-0008. A shared launcher's (``sandbox.local.launcher: shared``) serves the
user's other processes, for the tenant that made it, and expires after an hour (``launcher/shared.py``). Memory
snapshots need CRIU 4.1 or later, which this driver does not use yet: it declares only "filesystem", so a "memory"
snapshot is refused by core, naming the driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mainsdk.driver import DRIVER_UNAVAILABLE, NO_SESSION, FoundSnapshot, SandboxError
from mainsdk.hookspecs import hookimpl

from mainsdk_local.launcher_client import LauncherError

if TYPE_CHECKING:
    from mainsdk_local.driver import LocalBox
    from mainsdk_local.launcher_client import Launcher


class CheckpointHooks:
    """The checkpoint hooks of ``LocalDriver`` (a base class of it, so pluggy finds them on the driver)."""

    _launcher: Launcher
    _snapshot_tenants: dict[str, str]

    @hookimpl
    async def mainsdk_driver_snapshot(self, box: LocalBox, snapshot_id: str, kind: str) -> float | None:
        if kind != "filesystem":
            # Core refuses first (the capabilities say "filesystem"); this is the driver's own word on it.
            raise SandboxError("MAIN-SANDBOX-0001", f"the local driver keeps no {kind!r} snapshots")
        expires = await box.box.snapshot(snapshot_id)  # None: kept while the (private) launcher lives
        self._snapshot_tenants[snapshot_id] = box.tenant
        return expires

    @hookimpl
    async def mainsdk_driver_delete_snapshot(self, snapshot_id: str) -> None:
        # Core found it for its tenant first; a shared launcher checks that tenant again.
        self._launcher.forget_snapshot(snapshot_id, self._snapshot_tenants.pop(snapshot_id, ""))

    @hookimpl
    async def mainsdk_driver_find_snapshot(self, snapshot_id: str, tenant: str) -> FoundSnapshot | None:
        """A shared launcher's snapshot of ``tenant`` another process made; None with a private launcher."""
        try:
            found = await self._launcher.find_snapshot(snapshot_id, tenant)
        except LauncherError as exc:
            raise SandboxError(DRIVER_UNAVAILABLE, f"the local driver's shared launcher did not answer: {exc}") from exc
        if found is None:
            return None
        self._snapshot_tenants[snapshot_id] = tenant
        return FoundSnapshot("filesystem", found["created"], found["expires"], found["session"])

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
