"""``sandbox.e2b``: the E2B driver's own section of ``main.yaml``, declared to core in ``mainsdk.driver_configs``."""

from __future__ import annotations

from typing import Any

import attrs
from mainsdk.driver import Credential

__all__ = ["PLAN_HOURS", "E2BConfig"]

# The longest a sandbox runs from its start, per plan (E2B's docs, "Sandbox lifecycle": "up to 24 hours (Pro) or
# 1 hour (Base)"; Hobby is the Base tier's former name). The API holds every team to its own MaxLengthHours
# (e2b-dev/infra packages/api/internal/orchestrator/keep_alive.go getMaxAllowedTTL, handlers/timeout_helper.go).
PLAN_HOURS = {"base": 1, "hobby": 1, "pro": 24}


def _plan(_instance: Any, _attribute: Any, value: str) -> None:
    if value not in PLAN_HOURS:
        raise ValueError(f"plan: expected one of {', '.join(sorted(PLAN_HOURS))}, not {value!r}; or set max_hours")


def _hours(_instance: Any, _attribute: Any, value: int | None) -> None:
    if value is not None and not 1 <= value <= 24 * 366:
        raise ValueError(f"max_hours: expected whole hours from 1 (your team's maximum sandbox length), not {value!r}")


@attrs.frozen
class E2BConfig:
    """``sandbox.e2b``: the API key (a secret reference core resolves), the template, and the plan's length cap.

    ``plan`` (``base``, the default, also ``hobby``; or ``pro``) gives the longest a sandbox may run from its
    start; ``max_hours`` sets it for a team with another limit (an enterprise plan) and wins over ``plan``.
    """

    key: Credential = attrs.field(default=Credential.named("E2B_API_KEY"))
    template: str | None = None
    plan: str = attrs.field(default="base", validator=_plan)
    max_hours: int | None = attrs.field(default=None, validator=_hours)

    @property
    def max_length(self) -> int:
        """Seconds a sandbox may run from its start on this team (``max_hours``, else the plan's)."""
        return 3600 * (self.max_hours if self.max_hours is not None else PLAN_HOURS[self.plan])
