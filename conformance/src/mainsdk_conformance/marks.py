"""What a suite test needs, as a marker the plugin reads before the test runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

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
    "private_tmp",
    "disk_limit",
)
MEMORY_LIMIT_TREE = "memory_limit_tree"  # Capabilities.memory_limit_scope == "tree"


def requires(*needs: str) -> Callable[[F], F]:
    """Mark a test as needing each of ``needs``.

    A need is a boolean field of ``mainsdk.driver.Capabilities`` (``sessions``,
    ``memory_limit``, ``network``, ``wildcard_hosts``, ``reports_signals``, ``cells``, ``background``,
    ``packages``, ``private_tmp``, ``disk_limit``),
    ``memory_limit_tree``
    (the driver declares ``memory_limit_scope="tree"``), ``language:<name>``,
    ``replay``, ``live`` or ``unavailable``. A test whose needs the driver does
    not meet is skipped, saying which.
    """
    for need in needs:
        known = (REPLAY, LIVE, UNAVAILABLE, MEMORY_LIMIT_TREE)
        if not (need in CAPABILITY_FLAGS or need.startswith("language:") or need in known):
            raise ValueError(f"unknown conformance requirement {need!r}")
    marker: Callable[[F], F] = pytest.mark.conformance_requires(*needs)
    return marker
