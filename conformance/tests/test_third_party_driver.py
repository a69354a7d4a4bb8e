"""A third party's driver (third_party_driver/, written against the public contract only) passes the suite.

It is run as its author would run it: a conftest naming the plugin and a target, the suite star-imported,
in a pytest subprocess. Nothing in core knows it. Its own ``sandbox.<id>`` config section comes once core
lets drivers declare theirs (issue 13, driver-owned config): ``driver_from_config`` is where it reads it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SRC = Path(__file__).parent / "third_party_driver" / "src"
WEAK = "weak isolation: a plain subprocess of the app's user"
CONFTEST = f'''
import pytest
from mainsdk_conformance import ConformanceTarget
from mainsdk_third_party import driver_from_config

pytest_plugins = ["mainsdk_conformance.plugin"]


@pytest.fixture
def conformance_target():
    return ConformanceTarget(
        driver_id="third-party",
        driver=driver_from_config,
        expected_failures={{
            "TestIsolation::test_the_apps_files_are_not_readable": "{WEAK}, on the host's file system",
            "TestNetwork::test_the_apps_host_is_unreachable": "{WEAK}, on the host's network",
            "TestNetwork::test_no_host_is_reachable_without_network": "{WEAK}, on the host's network",
        }},
    )
'''


def test_a_minimal_third_party_driver_passes_the_suite(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(SRC))  # as if pip-installed (its pyproject declares the entry point)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_conformance="from mainsdk_conformance.suite import *  # noqa: F403\n")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-rfEs", "--conformance-timeout", "60", timeout=600
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("errors", 0) == 0, result.stdout.str()[-4000:]
    assert outcomes["passed"] >= 40 and outcomes["xfailed"] == 3, outcomes
    # What it skips, it skips because it did not declare it.
    skips = [line for line in result.stdout.lines if line.startswith("SKIPPED")]
    assert all("driver third-party" in line for line in skips), skips
