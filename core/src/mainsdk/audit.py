"""The audit event: one per run, per session command or cell, and per refused call.

It holds the SHA-256 of the code and the names of what the run was given,
never the code, its output or a secret value.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal

import attrs

log = logging.getLogger("mainsdk.audit")

EventKind = Literal["run", "command", "cell", "refused", "pause", "resume", "snapshot", "fork", "delete_snapshot"]


def code_sha256(code: str) -> str:
    """The hash an audit event carries in place of the code."""
    return hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@attrs.frozen
class AuditEvent:
    """What happened in one run, without what the code said or saw."""

    id: str
    kind: EventKind
    driver: str
    feature: str | None
    tenant: str
    code_sha256: str | None = None
    language: str | None = None
    isolation: str | None = None
    duration: float | None = None
    exit_code: int | None = None
    stop: str | None = None
    error: str | None = None  # the code a refused or failed call raised
    hosts: tuple[str, ...] = ()
    hosts_refused: tuple[str, ...] = ()  # redacted, at most 50 (mainsdk.limits.MAX_HOSTS_REFUSED)
    hosts_refused_dropped: int = 0  # how many more the code was refused
    # Reach the driver opened beyond ``hosts`` because the run named some (NetworkReach.extra), e.g. E2B's DNS.
    extra_reach: tuple[str, ...] = ()
    env_names: tuple[str, ...] = ()
    # The egress policy core handed the driver's start hook (``mainsdk_network_policy``'s translation of
    # ``hosts``), so an auditor sees what the backend was asked to enforce. JSON-able, no secret in it.
    network_policy: Any = None
    # The headers the egress set, as (host, header, secret name): never a value (``mainsdk.egress``).
    egress: tuple[tuple[str, str, str], ...] = ()
    cost: Decimal | None = None
    session_id: str | None = None
    cell: int | None = None  # a session cell's number (1, 2, ...), counted across the session's interpreters
    interpreter: str | None = None  # the id of the interpreter a cell ran in (``session.interpreter``)
    # A checkpoint's: the snapshot made, deleted or started from, and (a fork's) the session it was forked from.
    snapshot_id: str | None = None
    source_session: str | None = None
    time: str = attrs.field(factory=_now)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of the event."""
        data = attrs.asdict(self)
        data["hosts"] = list(self.hosts)
        data["hosts_refused"] = list(self.hosts_refused)
        data["extra_reach"] = list(self.extra_reach)
        data["env_names"] = list(self.env_names)
        data["egress"] = [{"host": h, "header": n, "secret": s} for h, n, s in self.egress]
        data["cost"] = None if self.cost is None else str(self.cost)
        return data
