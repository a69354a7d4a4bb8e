"""Snapshots, pause and resume on E2B (issue 33), mapped onto e2b 2.63's own calls.

- ``session.snapshot`` -> ``sandbox.create_snapshot()`` (``POST /sandboxes/{id}/snapshots``): E2B keeps the
  sandbox's state as a template of its own, whose id a create takes (``AsyncSandbox.create(template=...)``), and
  the source runs on. The driver declares only ``"filesystem"``: core ends the session's interpreters first, and a
  box started from the snapshot gets the files (E2B's default full snapshot also keeps memory, of which nothing of
  the driver's survives: the command streams are the old box's).
- ``sandbox.delete_snapshot`` -> ``AsyncSandbox.delete_snapshot`` (``DELETE /templates/{id}``).
- ``session.pause`` -> ``sandbox.pause()`` (``POST /sandboxes/{id}/pause``; 409 when already paused, which the
  SDK answers False); ``sandbox.resume`` -> ``AsyncSandbox.connect(id, timeout=...)``, which resumes a paused
  sandbox (``handlers/sandbox_connect.go``: a sandbox not running is resumed from its last snapshot) and is a
  keep-alive that never shortens for a running one: a second resume is harmless. ``pause_keeps_memory`` is not
  declared: E2B keeps the VM's memory, but the driver's streams to its commands end with the pause.
- ``session.fork`` is core's: one snapshot, then a create from it per fork (E2B's own ``fork(count=1..20)``
  checkpoints the source in place and answers sandboxes the driver did not create with its metadata, limits and
  egress policy, so it is not used).

The map from core's snapshot ids to E2B's is this process's, as core's registry of snapshots is.
"""

from __future__ import annotations

import time
from typing import Any

import attrs
from e2b import AsyncSandbox
from mainsdk.driver import NO_SESSION, SandboxError

from mainsdk_e2b.box import E2BBox
from mainsdk_e2b.lifetime import Lifetimes
from mainsdk_e2b.provider import ProviderErrors


@attrs.define
class Checkpoints:
    """The driver's snapshots (core's id to E2B's), and its pause and resume."""

    provider: ProviderErrors
    lifetimes: Lifetimes
    e2b_ids: dict[str, str] = attrs.field(factory=dict)

    async def snapshot(self, box: E2BBox, snapshot_id: str) -> None:
        """Keep ``box``'s files as ``snapshot_id`` (one ``create_snapshot``); E2B keeps it until it is deleted."""
        self.lifetimes.check_cap(box)
        with self.provider("snapshot the sandbox", box):
            info = await box.sandbox.create_snapshot()
        self.e2b_ids[snapshot_id] = info.snapshot_id

    def template(self, snapshot_id: str) -> str:
        """The E2B template a box of ``snapshot_id`` starts from; 0008 when this driver made no such snapshot."""
        e2b_id = self.e2b_ids.get(snapshot_id)
        if e2b_id is None:
            message = f"no snapshot {snapshot_id!r:.80} kept by this driver (deleted, or made by another process)"
            raise SandboxError(NO_SESSION, message, status=404, retryable=False)
        return e2b_id

    async def delete(self, snapshot_id: str, opts: dict[str, Any]) -> None:
        """Forget ``snapshot_id`` and delete E2B's template; boxes started from it keep their files."""
        e2b_id = self.e2b_ids.pop(snapshot_id, None)
        if e2b_id is None:
            return
        with self.provider("delete a snapshot"):
            await AsyncSandbox.delete_snapshot(e2b_id, **opts)

    async def pause(self, box: E2BBox) -> None:
        """Pause the sandbox: nothing in it runs; its files stay (a second pause is E2B's 409, answered False)."""
        self.lifetimes.check_cap(box)
        with self.provider("pause the sandbox", box):
            await box.sandbox.pause()

    async def resume(self, box: E2BBox, opts: dict[str, Any]) -> None:
        """Resume the paused sandbox for its lifetime (``connect``; for a running one, a keep-alive)."""
        self.lifetimes.check_cap(box)
        lifetime = min(box.lifetime, max(int(box.cap_at - time.monotonic()), 1))
        with self.provider("resume the sandbox", box):
            box.sandbox = await AsyncSandbox.connect(box.sandbox_id, timeout=lifetime, **opts)
        box.expires = max(box.expires, time.monotonic() + lifetime)
