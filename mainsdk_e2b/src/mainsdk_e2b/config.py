"""``sandbox.e2b``: the E2B driver's own section of ``main.yaml``, declared to core in ``mainsdk.driver_configs``."""

from __future__ import annotations

import attrs
from mainsdk.secrets import Credential

__all__ = ["E2BConfig"]


@attrs.frozen
class E2BConfig:
    """``sandbox.e2b``: the API key (a secret reference core resolves) and the template."""

    key: Credential = attrs.field(default=Credential.named("E2B_API_KEY"))
    template: str | None = None
