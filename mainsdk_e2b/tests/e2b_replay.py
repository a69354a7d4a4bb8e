"""Replaying (or recording) one of the driver's own E2B cassettes, and the key each mode sends.

Shared by test_packages.py, test_lifetime.py, test_egress.py and test_input.py (a helper module: test modules
import from here, never from each other).

Three modes, as the conformance suite's cassettes have (``mainsdk_conformance.plugin``):

- replay (the default): ``provider(name)`` answers from ``<folder>/<name>.json``, and ``key()`` is the made-up key;
- the driver's record mode, ``pytest --conformance-record`` (with ``E2B_API_KEY`` set, and
  ``--conformance-upstream api=URL --conformance-upstream sandbox=URL`` to forward elsewhere than E2B): each
  ``provider(name)`` forwards to E2B through the recorder, ``key()`` is the real key, and the cassette is written
  only when its test passed (``conftest.py`` ``driver_record_mode``). As the suite's: a cassette holding faults
  is kept (the test is skipped), and one with hand edits is recorded again, the live run re-checking them
  (``meta.rechecked``; a failure keeps the cassette and warns);
- authoring: ``provider(name, upstreams)`` records at once, against the stand-in (``authoring/*.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
from mainsdk_conformance.cassette import hand_set, keep_on_record
from mainsdk_conformance.plugin import seeded_cell_tokens
from mainsdk_conformance.profiles import E2B
from mainsdk_conformance.replay import ReplayServer

KEY = "e2b_" + "5eed" * 10  # what replay sends (conformance/conftest.py)
PACKAGES = Path(__file__).parent / "cassettes" / "packages"  # the default folder: test_packages.py's


@attrs.define
class Recording:
    """The driver's record mode for the test running now: where to forward, the real key, what to save after."""

    upstreams: dict[str, str]
    key: str
    pending: list[tuple[ReplayServer, list[str]]] = attrs.field(factory=list)


RECORDING: list[Recording] = []  # set for one test at a time by conftest.py's driver_record_mode


def key() -> str:
    """The key a scenario's driver sends: the real one while recording, the made-up one in replay."""
    return RECORDING[0].key if RECORDING else KEY


@contextlib.contextmanager
def provider(
    name: str,
    upstreams: dict[str, str] | None = None,
    key: str = KEY,
    folder: Path = PACKAGES,
    named: Mapping[str, str] | None = None,
) -> Iterator[ReplayServer]:
    """Replay ``<folder>/<name>.json``; with ``upstreams``, record it from them instead (authoring); in the driver's
    record mode, record it from E2B and keep it for ``driver_record_mode`` to save once the test passed.

    ``named``: secrets (name to value) the cassette holds as ``[scrubbed:NAME]``, and replay scrubs so too.
    """
    path = folder / f"{name}.json"
    recording = RECORDING[0] if RECORDING and upstreams is None else None
    rechecked: list[str] = []
    if recording is not None:
        kept = keep_on_record(path)
        if kept is not None:
            pytest.skip(f"recording keeps the cassette: {kept}")
        rechecked = hand_set(path)  # recorded again: the live run must pass the test as the hand-set answers did
        upstreams, key = recording.upstreams, recording.key
    server: ReplayServer
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
    if recording is not None:
        recording.pending.append((server, rechecked))
    elif upstreams is not None:
        server.save()


def save_recorded(recording: Recording, passed: bool) -> list[str]:
    """After a test in record mode: save what it recorded if it passed; the warnings to give otherwise."""
    warnings: list[str] = []
    for server, rechecked in recording.pending:
        if passed and server.cassette.interactions:
            if rechecked:
                server.cassette.meta["rechecked"] = rechecked  # the hand-set answers this recording replaced
            server.save()
        elif rechecked:
            warnings.append(
                f"{server.path.name}: the live run did not reproduce what was set by hand ({'; '.join(rechecked)}); "
                "the authored cassette is kept: review it against the provider"
            )
    return warnings


def recording_for(config: pytest.Config, environ: Mapping[str, str]) -> Recording | None:
    """The record mode ``pytest --conformance-record`` asks for, or None in replay."""
    from mainsdk_conformance.replay import parse_upstreams

    if not config.getoption("conformance_record", default=False):
        return None
    real = environ.get("E2B_API_KEY")
    if not real:
        raise pytest.UsageError("--conformance-record records from E2B: set E2B_API_KEY to your team's API key")
    upstreams: dict[str, Any] = parse_upstreams(config.getoption("conformance_upstream") or [])
    return Recording(upstreams, real)
