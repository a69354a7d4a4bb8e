"""``sandbox.vercel``: the Vercel driver's own section of ``main.yaml``, declared in ``mainsdk.driver_configs``."""

from __future__ import annotations

import attrs
from mainsdk.secrets import Credential

__all__ = ["VercelConfig"]


@attrs.frozen
class VercelConfig:
    """``sandbox.vercel``: the token (a secret reference core resolves), project, team and runtime image."""

    token: Credential = attrs.field(default=Credential.named("VERCEL_TOKEN"))
    project: str | None = None
    team: str | None = None
    runtime: str | None = None
