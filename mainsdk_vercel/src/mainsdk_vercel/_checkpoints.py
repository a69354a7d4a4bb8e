"""Snapshots, pause and resume on Vercel (issue 33), mapped onto Vercel's own calls.

From the official clients (PyPI ``vercel-sandbox`` 0.10.0, ``vercel/sandbox/_internal/api_client.py``;
github vercel/sandbox ``packages/vercel-sandbox/src/api-client/api-client.ts``):

- ``session.snapshot`` -> ``POST /v2/sandboxes/sessions/{sessionId}/snapshot`` (``create_snapshot``), answering
  ``{snapshot, session}``. A Vercel snapshot keeps the sandbox's filesystem only, and it **stops the source**:
  its session goes ``snapshotting``, then ``stopped``. The driver then opens the source again from the snapshot
  it just made, under the same name (``DELETE /v2/sandboxes/{name}``, which keeps the sandbox's snapshots, then a
  create with ``source: {type: "snapshot", snapshotId}``), so the session goes on as core's contract says, with
  its files and a new VM: nothing that ran survives (core ended the interpreters before; the next cell says
  ``restarted``). The snapshot expires when Vercel says (``expiresAt``), which ``Snapshot.expires`` gives.
- ``sandbox.create(snapshot=...)`` and each of ``session.fork``'s sessions -> the create with that snapshot as
  its ``source``. Vercel's own ``POST /v2/sandboxes/{name}/fork`` is not used: core's fork is one snapshot and a
  create per fork, each with its own limits, policy and secrets bound again by the app (a create's ``env`` is
  never sent: variables go per command, so no snapshot and no fork holds a value of ours).
- ``sandbox.delete_snapshot`` -> ``DELETE /v2/sandboxes/snapshots/{snapshotId}``.
- ``session.pause`` -> the same snapshot call, the source left stopped: a stopped sandbox runs nothing and costs
  no compute, its files kept in the snapshot, as a named persistent sandbox's stop keeps them. ``sandbox.resume``
  -> the sandbox opened again from that snapshot (as above), then the snapshot deleted. A filesystem pause:
  ``pause_keeps_memory`` is not declared, since Vercel keeps no memory.

The map from core's snapshot ids to Vercel's is this process's, as core's registry of snapshots is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mainsdk.driver import NO_SESSION, BoxGone, SandboxError

from mainsdk_vercel._api import NotFound, VercelApi, VercelError
from mainsdk_vercel._box import SESSIONS, VercelBox
from mainsdk_vercel._lifetimes import READY_POLL, Lifetimes

log = logging.getLogger("mainsdk.vercel")
# A snapshot's source is ``snapshotting`` until its filesystem is kept, then ``stopped`` (vercel-sandbox 0.10.0
# ``_internal/models.py`` ``SandboxStatus``; ``service.py`` polls ``snapshotting`` and ``stopping`` as transitional):
# the stopped sandbox is deleted only once it has settled.
SETTLING = frozenset({"snapshotting", "stopping"})
SETTLE_POLLS = 240  # READY_POLL apart: two minutes for a snapshot to be kept before the driver gives up

Reopen = Callable[[VercelBox, str], Awaitable[None]]


class Checkpoints:
    """The driver's snapshots (core's id to Vercel's), and its pause and resume."""

    def __init__(self, api: VercelApi, lifetimes: Lifetimes, project: str | None, reopen: Reopen) -> None:
        self._api = api
        self._lifetimes = lifetimes
        self._project = project
        self._reopen = reopen  # the driver's create of ``box`` from a Vercel snapshot id, under its name
        self.vercel_ids: dict[str, str] = {}

    async def snapshot(self, box: VercelBox, snapshot_id: str) -> float | None:
        """Keep ``box``'s files as ``snapshot_id``, then open the stopped source again from them."""
        vercel_id, expires = await self._take(box)
        self.vercel_ids[snapshot_id] = vercel_id
        await self._open_again(box, vercel_id)
        return expires

    def source(self, snapshot_id: str) -> str:
        """The Vercel snapshot a box of ``snapshot_id`` starts from; 0008 when this driver made no such snapshot."""
        vercel_id = self.vercel_ids.get(snapshot_id)
        if vercel_id is None:
            message = f"no snapshot {snapshot_id!r:.80} kept by this driver (deleted, or made by another process)"
            raise SandboxError(NO_SESSION, message, status=404, retryable=False)
        return vercel_id

    async def delete(self, snapshot_id: str) -> None:
        """Forget ``snapshot_id`` and delete Vercel's snapshot; boxes started from it keep their files."""
        vercel_id = self.vercel_ids.pop(snapshot_id, None)
        if vercel_id is not None:
            await self._delete(vercel_id)

    async def pause(self, box: VercelBox) -> None:
        """Snapshot the sandbox and leave it stopped: nothing runs, its files wait in the snapshot."""
        box.paused, _ = await self._take(box)

    async def resume(self, box: VercelBox) -> None:
        """Open the paused sandbox again from its snapshot, then delete that snapshot."""
        vercel_id = box.paused
        if vercel_id is None:
            return
        # Not the box's while it is made again: a create that fails stops the box (``mainsdk_driver_stop``), which
        # must not delete the files a retried resume still needs.
        box.paused, running = None, False
        try:
            await self._open_again(box, vercel_id)
            running = True
        finally:
            if not running:
                box.paused = vercel_id  # failed or cancelled: still paused, its snapshot kept for the next resume
        await self.forget(vercel_id)

    async def forget(self, vercel_id: str) -> None:
        """Delete a snapshot of the driver's own (a pause's), saying so in the log when Vercel refuses."""
        try:
            await self._delete(vercel_id)
        except SandboxError as exc:
            log.warning("could not delete Vercel snapshot %s: %s", vercel_id, exc.message)

    async def _take(self, box: VercelBox) -> tuple[str, float | None]:
        """One ``snapshot`` call; Vercel's id and expiry. The source is stopped from here on (``box.gone``)."""
        await self._lifetimes.ensure(box)
        answer = await self._api.json(
            "POST", f"{SESSIONS}/{box.session_id}/snapshot", "snapshot", json_body={}, idempotent=False
        )
        box.gone = True  # Vercel stops the source with every snapshot
        snapshot = answer.get("snapshot") if isinstance(answer, dict) else None
        if not isinstance(snapshot, dict) or not isinstance(snapshot.get("id"), str):
            raise self._api.error("snapshot", None, cause="the answer names no snapshot id")
        if snapshot.get("status") != "created":
            raise self._api.error("snapshot", None, cause=f"the snapshot is {snapshot.get('status')!r}, not created")
        return snapshot["id"], _expires(snapshot)

    async def _open_again(self, box: VercelBox, vercel_id: str) -> None:
        """The source, stopped by a snapshot, made again from it under its name: once it is stopped, deleted."""
        for _ in range(SETTLE_POLLS):
            try:
                answer = await self._api.read_sandbox(str(box.name), str(self._project))
            except NotFound:
                break
            session = answer.get("session") if isinstance(answer, dict) else None
            if not isinstance(session, dict) or session.get("status") not in SETTLING:
                break
            await asyncio.sleep(READY_POLL)
        else:
            raise BoxGone(f"the Vercel sandbox of box {box.id} was still snapshotting after two minutes")
        with contextlib.suppress(NotFound):
            # Without ``deleteOrphanSnapshots``: the snapshots stay (vercel-sandbox ``destroy_sandbox``).
            await self._api.request(
                "DELETE",
                f"/v2/sandboxes/{box.name}",
                "delete the stopped sandbox",
                query={"projectId": str(self._project)},
                idempotent=True,
            )
        # A new sandbox from here: a create that fails stops it (``mainsdk_driver_stop``) and marks the box gone.
        box.session_id, box.gone = None, False
        await self._reopen(box, vercel_id)

    async def _delete(self, vercel_id: str) -> None:
        try:
            await self._api.request(
                "DELETE", f"/v2/sandboxes/snapshots/{vercel_id}", "delete a snapshot", idempotent=True
            )
        except VercelError as exc:
            if exc.vercel_status != 404:  # gone already (deleted, or expired): as good as deleted
                raise


def _expires(snapshot: dict[str, Any]) -> float | None:
    """When a new snapshot expires on our clock: its lifetime (``expiresAt - createdAt``, ms) from now.

    Not ``expiresAt`` itself: Vercel's clock and ours differ, and a replayed answer's times are the recording's.
    None when Vercel keeps it until deleted (no ``expiresAt``).
    """
    expires, created = snapshot.get("expiresAt"), snapshot.get("createdAt")
    if not isinstance(expires, (int, float)) or expires <= 0:
        return None
    lifetime = expires - created if isinstance(created, (int, float)) else 0
    return time.time() + max(lifetime, 0) / 1000


def snapshot_body(vercel_id: str) -> dict[str, Any]:
    """A create's ``source`` for a box made from a Vercel snapshot (vercel-sandbox ``SnapshotSource``)."""
    return {"type": "snapshot", "snapshotId": vercel_id}
