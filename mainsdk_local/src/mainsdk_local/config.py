"""``sandbox.local``: the local driver's own section of ``main.yaml``, declared in ``mainsdk.driver_configs``."""

from __future__ import annotations

import attrs
from mainsdk.driver import INVALID_OPTION, SandboxError

from mainsdk_local.launcher.common import MAX_POOL

__all__ = ["DEFAULT_POOL", "LAUNCHERS", "MAX_POOL", "LocalPrograms"]

# Warm Python interpreters kept idle at most (about 10 MB each, only while runs ask for them); 0: no pool.
DEFAULT_POOL = 4


def _pool_size(_instance: object, _attribute: object, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_POOL:
        raise SandboxError(
            INVALID_OPTION,
            f"sandbox.local.pool: {value!r} must be a whole number from 0 (no warm pool) to {MAX_POOL}",
        )


# ``sandbox.local.launcher``: private (the app's child, gone with it) or shared (one per user, outliving its apps).
LAUNCHERS = ("private", "shared")


def _launcher(_instance: object, _attribute: object, value: object) -> None:
    if value not in LAUNCHERS:
        raise SandboxError(
            INVALID_OPTION,
            f"sandbox.local.launcher: {value!r} must be private (the default: the launcher dies with the app) or "
            "shared (one launcher per user, which keeps sessions and snapshots for the user's other processes)",
        )


@attrs.frozen
class LocalPrograms:
    """``sandbox.local``: the interpreter for each language on the ``local`` driver, and its warm pool.

    ``pool``: how many warm Python interpreters (started ahead, each in its own fresh box,
    each used for one run) the driver may keep idle; 0 turns the pool off. ``criu``: the CRIU program the
    driver looks for (memory snapshots; ``mainsdk_local.criu`` says why none are kept yet).

    ``launcher``: ``private`` (default), a launcher that is the app's child and dies with it, taking its sessions
    and snapshots; ``shared``, one launcher per user, detached, reached on a socket only that user may use, which
    keeps sessions and snapshots for the user's other app processes (``sandbox.get``, ``sandbox.resume``,
    ``sandbox.create(snapshot=...)``) and exits once it holds nothing.
    """

    python: str = "python3"
    node: str = "node"
    bash: str = "bash"
    pool: int = attrs.field(default=DEFAULT_POOL, validator=_pool_size)
    criu: str = "criu"
    launcher: str = attrs.field(default="private", validator=_launcher)
