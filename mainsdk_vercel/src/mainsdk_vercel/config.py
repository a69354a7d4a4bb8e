"""``sandbox.vercel``: the Vercel driver's own section of ``main.yaml``, declared in ``mainsdk.driver_configs``."""

from __future__ import annotations

from typing import Any

import attrs
from mainsdk.driver import Credential, parse_duration

from mainsdk_vercel._images import image_problem

__all__ = ["PLAN_MAX_DURATION", "VercelConfig"]

# The longest a sandbox session may live, from its start, per Vercel plan (seconds): 45 minutes on Hobby, 24 hours
# on Pro and Enterprise (github vercel/sandbox, packages/vercel-sandbox/README.md, "Limitations"; Vercel's KB
# "How Vercel Sandbox duration and persistence work", 2026: "up to 24 hours on Pro and Enterprise"; the docs page
# "Pricing and Limits" said 5 hours for Pro and Enterprise before). extend-timeout cannot pass it.
PLAN_MAX_DURATION = {"hobby": 45 * 60.0, "pro": 24 * 3600.0, "enterprise": 24 * 3600.0}


def _plan(instance: Any, attribute: Any, value: str) -> None:
    if value not in PLAN_MAX_DURATION:
        raise ValueError(f"plan {value!r} is not a Vercel plan; use one of {', '.join(PLAN_MAX_DURATION)}")


def _duration(instance: Any, attribute: Any, value: str | None) -> None:
    if value is not None:
        try:
            parse_duration(value, maximum=PLAN_MAX_DURATION["pro"])
        except ValueError as exc:
            raise ValueError(f"max_duration: {exc}") from None


@attrs.frozen
class VercelConfig:
    """``sandbox.vercel``: the token (a secret reference core resolves), project, team, image and plan.

    ``image`` is the image a sandbox starts from (``vercel/sandbox/python:3.14``, a repository of the project's own
    registry; none: Vercel's universal image); ``runtime`` is its older name, and a legacy runtime's name
    (``python3.13``) in either is sent as that runtime (``_images.create_request``). ``plan`` sets the longest a
    session may live (``PLAN_MAX_DURATION``); ``max_duration`` (``"45m"``, ``"5h"``) overrides it, for a contract
    with another figure.
    """

    token: Credential = attrs.field(default=Credential.named("VERCEL_TOKEN"))
    project: str | None = None
    team: str | None = None
    runtime: str | None = None
    image: str | None = None
    plan: str = attrs.field(default="hobby", validator=_plan)
    max_duration: str | None = attrs.field(default=None, validator=_duration)

    def __attrs_post_init__(self) -> None:
        problem = image_problem(self.image, self.runtime)
        if problem is not None:
            raise ValueError(problem)

    @property
    def session_cap(self) -> float:
        """Seconds a session may live from its start: ``max_duration``, else the plan's."""
        if self.max_duration is not None:
            return parse_duration(self.max_duration, maximum=PLAN_MAX_DURATION["pro"])
        return PLAN_MAX_DURATION[self.plan]
