"""Replaying (or, when authoring, recording) one E2B cassette, and the key replay sends.

Shared by test_packages.py, test_lifetime.py and test_input.py (a helper module: test modules import from
here, never from each other).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from mainsdk_conformance.plugin import seeded_cell_tokens
from mainsdk_conformance.profiles import E2B
from mainsdk_conformance.replay import ReplayServer

KEY = "e2b_" + "5eed" * 10  # what replay sends (conformance/conftest.py)
PACKAGES = Path(__file__).parent / "cassettes" / "packages"  # the default folder: test_packages.py's


@contextlib.contextmanager
def provider(
    name: str,
    upstreams: dict[str, str] | None = None,
    key: str = KEY,
    folder: Path = PACKAGES,
    named: Mapping[str, str] | None = None,
) -> Iterator[ReplayServer]:
    """Replay ``<folder>/<name>.json``; with ``upstreams``, record it from them instead (authoring).

    ``named``: secrets (name to value) the cassette holds as ``[scrubbed:NAME]``, and replay scrubs so too.
    """
    path = folder / f"{name}.json"
    if upstreams is None:
        server = ReplayServer.replayer(E2B, path, named=named)
    else:
        server = ReplayServer.recorder(E2B, path, upstreams=upstreams, secrets=[key], named=named)
    server.start()
    try:
        with seeded_cell_tokens(name):  # the suite's own seeding: the kernel's frames match what was recorded
            yield server
    finally:
        server.stop()
    if upstreams is not None:
        server.save()
