"""What a suite test needs, as a marker the plugin reads before the test runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from mainsdk.driver import CELL_LANGUAGES

F = TypeVar("F", bound=Callable[..., Any])

# Requirements that are not fields of Capabilities.
REPLAY = "replay"  # a fault cassette: only a replayed driver can be given one
LIVE = "live"  # the test needs the driver on this host (a random port, a race between boxes)
UNAVAILABLE = "unavailable"  # ConformanceTarget.unavailable
CAPABILITY_FLAGS = (
    "network",
    "wildcard_hosts",
    "memory_limit",
    "sessions",
    "reports_signals",
    "cells",
    "background",
    "packages",
    "egress_headers",
    "private_tmp",
    "disk_limit",
    "pause",
    "pause_keeps_memory",
)
MEMORY_LIMIT_TREE = "memory_limit_tree"  # Capabilities.memory_limit_scope == "tree"
CELLS_LANGUAGE = "cells_language:"  # + a name of Capabilities.cells_languages
CHECKPOINT = "checkpoint:"  # + a kind of Capabilities.checkpoint_kinds ("filesystem", "memory")


def requires(*needs: str) -> Callable[[F], F]:
    """Mark a test as needing each of ``needs``.

    A need is a boolean field of ``mainsdk.driver.Capabilities`` (``sessions``,
    ``memory_limit``, ``network``, ``wildcard_hosts``, ``reports_signals``, ``cells``, ``background``,
    ``packages``, ``egress_headers``, ``private_tmp``, ``disk_limit``),
    ``memory_limit_tree``
    (the driver declares ``memory_limit_scope="tree"``), ``language:<name>`` (of ``Capabilities.languages``),
    ``cells_language:<name>`` (of ``Capabilities.cells_languages``: ``requires_cells_language``),
    ``checkpoint:<kind>`` (of ``Capabilities.checkpoint_kinds``), ``pause``, ``pause_keeps_memory``,
    ``replay``, ``live`` or ``unavailable``. A test whose needs the driver does
    not meet is skipped, saying which.
    """
    for need in needs:
        known = (REPLAY, LIVE, UNAVAILABLE, MEMORY_LIMIT_TREE)
        prefixed = need.startswith(("language:", CELLS_LANGUAGE, CHECKPOINT))
        if not (need in CAPABILITY_FLAGS or prefixed or need in known):
            raise ValueError(f"unknown conformance requirement {need!r}")
    marker: Callable[[F], F] = pytest.mark.conformance_requires(*needs)
    return marker


def requires_cells_language(language: str) -> Callable[[F], F]:
    """Mark a test as needing cells (and sessions) in ``language``: ``Capabilities.cells_languages`` holds it."""
    if language not in CELL_LANGUAGES:
        raise ValueError(f"{language!r} is not a cell language; use one of {', '.join(CELL_LANGUAGES)}")
    return requires("sessions", "cells", CELLS_LANGUAGE + language)
