"""``sandbox.local``: the local driver's own section of ``main.yaml``, declared in ``mainsdk.driver_configs``."""

from __future__ import annotations

import attrs

__all__ = ["LocalPrograms"]


@attrs.frozen
class LocalPrograms:
    """``sandbox.local``: the interpreter for each language on the ``local`` driver."""

    python: str = "python3"
    node: str = "node"
    bash: str = "bash"
