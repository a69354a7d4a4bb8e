"""What every e2b test shares: the drivers' wheels in this checkout's cache."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def wheel_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Wheels a driver fetches with its default wheelhouse (the cell kernel's IPython set for every session's
    first cell, ``mainsdk_driver_kernel_site``) go in this checkout's pytest cache, downloaded once from the
    package index, never in the user's ~/.cache."""
    cache = getattr(request.config, "cache", None)
    folder = cache.mkdir("mainsdk-driver-wheels") if cache is not None else tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(folder))
        yield


@pytest.fixture(scope="session", autouse=True)
def edited_kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Every test here runs with a comment of the cell kernel edited (a copy of core's kernel package): each
    cassette must replay unchanged, the kernel being matched by content, never by its bytes (issue 32)."""
    from mainsdk_conformance.plugin import kernel_with_an_edited_comment

    with kernel_with_an_edited_comment(tmp_path_factory.mktemp("edited-kernel")) as line:
        yield line


@pytest.fixture(autouse=True)
def driver_record_mode(request: pytest.FixtureRequest) -> Iterator[None]:
    """``pytest --conformance-record``: the driver's own cassettes are recorded from E2B too (``e2b_replay``).

    Each one is saved only when its test passed, after its assertions ran; none is touched in replay.
    """
    import os
    import warnings

    import e2b_replay
    from mainsdk_conformance.plugin import PASSED_KEY

    recording = e2b_replay.recording_for(request.config, os.environ)
    if recording is None:
        yield
        return
    e2b_replay.RECORDING[:] = [recording]
    try:
        yield
    finally:
        e2b_replay.RECORDING.clear()
    for warning in e2b_replay.save_recorded(recording, request.node.stash.get(PASSED_KEY, False)):
        warnings.warn(pytest.PytestWarning(warning), stacklevel=1)
