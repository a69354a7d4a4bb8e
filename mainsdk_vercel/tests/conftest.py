"""The conformance plugin, loaded here so `pytest mainsdk_vercel/tests` takes it as an initial conftest.

pytest refuses ``pytest_plugins`` in a conftest it meets only while collecting
(``tests/conformance/conftest.py`` is one when the run starts at ``tests``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest_plugins = ["mainsdk_conformance.plugin"]

# The driver's own cassettes' fixture: replayed, authored through the stand-in, or recorded live (recording.py).
from recording import own_cassette  # noqa: E402, F401


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
