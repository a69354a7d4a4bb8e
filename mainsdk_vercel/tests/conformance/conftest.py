"""The vercel-sandbox driver runs the conformance suite on cassettes, replayed on loopback.

Replay: `pytest mainsdk_vercel/tests/conformance`. Re-record live (a Vercel account):
`VERCEL_TOKEN=... VERCEL_PROJECT_ID=... [VERCEL_TEAM_ID=...] mainsdk-conformance record --driver vercel-sandbox
--tests mainsdk_vercel/tests/conformance`, then `python mainsdk_vercel/tests/conformance/author.py --finish`
(``--finish``) to put the placeholder project and team back.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from mainsdk.config import AppConfig
from mainsdk_conformance import ConformanceTarget
from mainsdk_conformance.profiles import VERCEL, Profile

from mainsdk_vercel import driver_from_config

# The project and team the cassettes name (author.py puts these back after a live recording).
PROJECT = "prj_conformance"
TEAM = "team_conformance"
# Replay needs a token of some kind; it is not matched, and not a secret.
REPLAY_TOKEN = "replay-token-not-a-secret"


@pytest.fixture
def conformance_profile() -> Profile:
    """Vercel Sandbox: v3 create, v2 sessions."""
    return VERCEL


@pytest.fixture
def conformance_target(conformance_replay: Any, request: pytest.FixtureRequest) -> ConformanceTarget:
    """The real driver, with a real httpx client, pointed at the test's replay server (or the recorder)."""
    recording = request.config.getoption("conformance_record")
    token = os.environ.get("VERCEL_TOKEN", "") if recording else REPLAY_TOKEN
    url = conformance_replay.url("api")

    def build(config: AppConfig) -> object:
        return driver_from_config(config, token=token or REPLAY_TOKEN, base_url=url)

    def unavailable(config: AppConfig) -> object:
        # Port 9 (discard) on loopback: nothing listens, the connection is refused.
        return driver_from_config(config, token=REPLAY_TOKEN, base_url="http://127.0.0.1:9")

    if recording:
        # Only what the recorder was given: a placeholder sent to a live API would be refused (or worse, be
        # someone's team). No team is a personal account: no teamId is sent.
        project: str | None = os.environ.get("VERCEL_PROJECT_ID")
        team: str | None = os.environ.get("VERCEL_TEAM_ID") or None
        if not project:
            raise pytest.UsageError("recording vercel-sandbox needs VERCEL_PROJECT_ID (and VERCEL_TEAM_ID for a team)")
    else:
        project, team = PROJECT, TEAM
    return ConformanceTarget(
        driver_id="vercel-sandbox",
        driver=build,
        unavailable=unavailable,
        config={"sandbox": {"vercel": {"project": project, "team": team}}},
        # What a Vercel command's environment holds before ours: the runtime's PATH and HOME.
        baseline_env=frozenset({"PATH", "HOME", "LC_CTYPE"}),
    )
