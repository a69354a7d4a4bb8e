"""The example driver runs the conformance suite: `tox -e conformance-example`, which is

    pytest -p mainsdk_conformance.plugin plugins/mainsdk_example_driver/tests

The plugin comes in with ``-p`` rather than ``pytest_plugins`` here because this
folder is nested in a repository whose other runs (``tox -e all``) collect it
without the suite installed; at the root of your own tests, ``pytest_plugins =
["mainsdk_conformance.plugin"]`` in the conftest does the same.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from mainsdk_conformance import ConformanceTarget

WEAK = "weak isolation: the code runs as a plain subprocess of the app's user"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave the suite out of a run that did not opt into the plugin (it would have no fixtures), and the
    driver's own tests out of a run where the driver is not installed (``tox -e all`` runs ``plugins``)."""
    if collection_path.name == "test_conformance.py" and not config.pluginmanager.has_plugin(
        "mainsdk_conformance.plugin"
    ):
        return True
    if collection_path.name == "test_example_driver.py" and importlib.util.find_spec("mainsdk_example_driver") is None:
        return True
    return None


@pytest.fixture
def conformance_target() -> ConformanceTarget:
    """The example driver, loaded through its entry point as an app would load it."""
    from mainsdk_conformance import ConformanceTarget

    return ConformanceTarget(
        driver_id="example",
        expected_failures={
            "TestIsolation::test_the_apps_files_are_not_readable": f"{WEAK}, on the host's file system",
            "TestNetwork::test_the_apps_host_is_unreachable": f"{WEAK}, on the host's network",
            "TestNetwork::test_no_host_is_reachable_without_network": f"{WEAK}, on the host's network",
            "TestLimits::test_passing_the_memory_limit_stops_with_memory": (
                "RLIMIT_AS makes the allocation fail (MemoryError) rather than killing the code, "
                "so the driver cannot tell a memory stop from the code's own error"
            ),
        },
    )
