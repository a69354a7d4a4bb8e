"""Checkpoints: snapshots of a session's box, the options a session was opened with, and the kinds a driver offers.

A snapshot belongs to the tenant whose session made it, like a session. It keeps the box's files ("filesystem")
or its processes too ("memory"), never a secret value or egress credential of ours: a session made from it, a fork
and a resumed session get their secrets bound again, from the names the session was given, through the app's
resolver (``deps.secret``) at that moment. ``AsyncSession.snapshot``/``fork``/``pause`` and
``AsyncSandbox.resume``/``snapshots``/``delete_snapshot`` use what is here.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Literal

import attrs

from mainsdk import arguments, errors
from mainsdk.driver import CHECKPOINT_KINDS, Capabilities, FoundSnapshot
from mainsdk.errors import SandboxError
from mainsdk.preflight import BoxOptions

MAX_FORKS = 20  # forks in one call, as E2B's fork(count=1..20)
MAX_SNAPSHOTS = 1000  # snapshots one sandbox keeps at once, so a loop of snapshot() cannot hold the host's disk

SnapshotKind = Literal["filesystem", "memory"]


@attrs.frozen
class Snapshot:
    """A kept state of a session's box: start a session from it with ``sandbox.create(snapshot=...)``.

    ``kind``: "filesystem" (the files; interpreters start empty) or "memory" (the running processes too).
    ``created``/``expires``: UTC times; ``expires`` None when the driver keeps it until deleted (the local
    driver's private launcher: while it lives). ``session_id``: the session it was taken from.
    """

    id: str
    name: str | None
    kind: SnapshotKind
    created: datetime
    expires: datetime | None
    session_id: str


@attrs.frozen
class SessionOptions:
    """What a session was opened with, as the app gave it: secrets by name (``SecretRef``), never by value.

    Kept so a fork and a session made from a snapshot are planned again exactly as their source was, with
    every secret resolved anew.
    """

    feature: object = None
    idle: object = None
    box: BoxOptions = attrs.field(factory=BoxOptions)

    def without_files(self) -> SessionOptions:
        """The same options without the opening's files: a fork has its source's files from the snapshot."""
        return attrs.evolve(self, box=attrs.evolve(self.box, files=None))


@attrs.define
class SnapshotRecord:
    """A snapshot, whose it is and what its session was opened with; ``hidden`` for a fork's own."""

    snapshot: Snapshot
    tenant: str
    options: SessionOptions
    hidden: bool = False

    def expired(self, now: float | None = None) -> bool:
        """Whether the driver's expiry has passed."""
        expires = self.snapshot.expires
        return expires is not None and expires.timestamp() <= (time.time() if now is None else now)


def no_snapshot(snapshot_id: object) -> SandboxError:
    """MAIN-SANDBOX-0008 for a snapshot: the same words for unknown, deleted, expired and another tenant's."""
    shown = f"{str(snapshot_id)!r:.80}"
    message = f"no snapshot {shown} in the current tenant (deleted or expired?)"
    return SandboxError(errors.NO_SESSION, message, status=404)


def check_kind(caps: Capabilities, driver_id: str, kind: object, what: str = "kind") -> SnapshotKind:
    """``kind`` when the driver offers it; MAIN-SANDBOX-0001 naming the driver and what it offers otherwise."""
    if kind not in CHECKPOINT_KINDS:
        raise arguments.invalid(what, f"must be one of {', '.join(CHECKPOINT_KINDS)}, not {kind!r:.40}")
    if kind not in caps.checkpoint_kinds:
        offered = ", ".join(sorted(caps.checkpoint_kinds)) or "none"
        raise SandboxError(
            errors.INVALID_OPTION,
            f"the {driver_id!r} driver cannot keep {kind!r} checkpoints; it offers: {offered} "
            f"(Capabilities.checkpoint_kinds){': ' + caps.checkpoint_why if caps.checkpoint_why else ''}",
        )
    return kind


def check_pause(caps: Capabilities, driver_id: str) -> None:
    """MAIN-SANDBOX-0001 naming the driver when it cannot pause a box."""
    if not caps.pause:
        offered = ", ".join(sorted(caps.checkpoint_kinds)) or "none"
        raise SandboxError(
            errors.INVALID_OPTION,
            f"the {driver_id!r} driver cannot pause a session (Capabilities.pause); its checkpoint kinds: {offered}",
        )


def check_count(count: object) -> int:
    """A fork count: a whole number from 1 to MAX_FORKS."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_FORKS:
        raise arguments.invalid("count", f"must be a whole number from 1 to {MAX_FORKS}, not {count!r:.40}")
    return count


def made(snapshot_id: str, name: str | None, kind: SnapshotKind, session_id: str, expires: float | None) -> Snapshot:
    """The snapshot a driver just made, as the app sees it."""
    when = datetime.fromtimestamp(expires, UTC) if expires is not None else None
    return Snapshot(snapshot_id, name, kind, datetime.now(UTC), when, session_id)


def found(snapshot_id: str, info: FoundSnapshot) -> Snapshot:
    """A snapshot another process made, as the driver found it (``mainsdk_driver_find_snapshot``): no name."""
    kind: SnapshotKind = "memory" if info.kind == "memory" else "filesystem"
    expires = datetime.fromtimestamp(info.expires, UTC) if info.expires is not None else None
    return Snapshot(snapshot_id, None, kind, datetime.fromtimestamp(info.created, UTC), expires, info.session_id)


class Snapshots:
    """The snapshots one sandbox made, by id: each found only by its own tenant, and never once expired."""

    def __init__(self) -> None:
        self._records: dict[str, SnapshotRecord] = {}

    def add(self, record: SnapshotRecord) -> None:
        """Keep a new snapshot."""
        self._records[record.snapshot.id] = record

    def room(self) -> None:
        """MAIN-SANDBOX-0001 when this sandbox already keeps MAX_SNAPSHOTS."""
        if len(self._records) >= MAX_SNAPSHOTS:
            raise SandboxError(
                errors.INVALID_OPTION,
                f"this sandbox keeps {MAX_SNAPSHOTS} snapshots already; delete some (sandbox.delete_snapshot) first",
            )

    def find(self, snapshot: object, tenant: str) -> SnapshotRecord:
        """The live snapshot ``snapshot`` (a ``Snapshot`` or its id) of ``tenant``; MAIN-SANDBOX-0008 otherwise."""
        snapshot_id = snapshot.id if isinstance(snapshot, Snapshot) else snapshot
        record = self._records.get(snapshot_id) if isinstance(snapshot_id, str) else None
        if record is None or record.tenant != tenant or record.hidden or record.expired():
            raise no_snapshot(snapshot_id)
        return record

    def pop(self, snapshot_id: str) -> None:
        """Forget a snapshot (deleted)."""
        self._records.pop(snapshot_id, None)

    def listed(self, tenant: str) -> list[Snapshot]:
        """``tenant``'s live snapshots, oldest first."""
        return [r.snapshot for r in self._records.values() if r.tenant == tenant and not r.hidden and not r.expired()]
