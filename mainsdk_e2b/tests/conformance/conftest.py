"""The conformance suite on the e2b driver, replayed through the real e2b SDK from cassettes.

In replay the SDK is pointed at the suite's replay server on loopback
(``api_url`` / ``sandbox_url``); ``mainsdk-conformance record --driver e2b
--tests mainsdk_e2b/tests/conformance`` with ``E2B_API_KEY`` set points it at
the recorder instead, which forwards to E2B.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from mainsdk.config import AppConfig
from mainsdk_conformance import ConformanceTarget
from mainsdk_conformance.profiles import E2B, Profile
from mainsdk_e2b.config import E2BConfig

from mainsdk_e2b import E2BDriver, e2b_sandbox_driver

# What replay sends as the key: made up, and proved absent from every cassette and error (tests/test_driver.py).
REPLAY_KEY = "e2b_" + "5eed" * 10
# A loopback port nothing listens on: the backend that is down.
DEAD_URL = "http://127.0.0.1:9"


def replay_key(config: pytest.Config) -> str:
    """The real key when recording, the made-up one in replay."""
    if config.getoption("conformance_record"):
        return os.environ["E2B_API_KEY"]
    return REPLAY_KEY


@pytest.fixture
def conformance_profile() -> Profile:
    return E2B


@pytest.fixture
def conformance_target(request: pytest.FixtureRequest, conformance_replay: Any) -> ConformanceTarget:
    key = replay_key(request.config)

    def driver(config: AppConfig) -> E2BDriver:
        return e2b_sandbox_driver(
            api_key=key,
            api_url=conformance_replay.url("api"),
            sandbox_url=conformance_replay.url("sandbox"),
            template=config.sandbox.section("e2b", E2BConfig).template,
            price=config.sandbox.price,
        )

    def unavailable(config: AppConfig) -> E2BDriver:
        return e2b_sandbox_driver(api_key=key, api_url=DEAD_URL, sandbox_url=DEAD_URL)

    return ConformanceTarget(
        driver_id="e2b",
        driver=driver,
        # env -i leaves PATH and HOME (shell_line); Python's locale coercion adds LC_CTYPE.
        baseline_env=frozenset({"PATH", "HOME", "LC_CTYPE"}),
        unavailable=unavailable,
    )
