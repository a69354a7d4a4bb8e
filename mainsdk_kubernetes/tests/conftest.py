"""The conformance plugin, loaded here so `pytest mainsdk_kubernetes/tests` takes it as an initial conftest; the
stand-in modules (``standin_*.py``) importable by the tests; the ``cluster`` fixture."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the stand-in modules

from standin_cluster import Cluster, start_cluster

pytest_plugins = ["mainsdk_conformance.plugin"]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """Start a stand-in cluster (``ApiServer`` options as keywords); stopped at the test's end."""
    made: list[Cluster] = []

    def make(**options: Any) -> Cluster:
        made.append(start_cluster(tmp_path, len(made), **options))
        return made[-1]

    yield make
    for c in made:
        c.stop()
