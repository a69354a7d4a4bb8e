"""The vercel-sandbox driver runs the conformance suite on cassettes, replayed on loopback.

Replay: `pytest mainsdk_vercel/tests/conformance`. Re-record live (a Vercel account):
`VERCEL_TOKEN=... VERCEL_PROJECT_ID=... [VERCEL_TEAM_ID=...] mainsdk-conformance record --driver vercel-sandbox
--tests mainsdk_vercel/tests/conformance` (or `VERCEL_OIDC_TOKEN=...`, whose claims name the project and team
when the ids are not set), then `python mainsdk_vercel/tests/conformance/author.py --finish` to put the
placeholder project and team back.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
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


def recorder_credentials() -> tuple[str, dict[str, str]]:
    """The token to record with, and the project and team its claims name (an OIDC token's), as Vercel's client.

    ``VERCEL_OIDC_TOKEN`` first, then ``VERCEL_TOKEN``: the order of vercel 0.12's ``get_credentials``
    (``vercel/oidc/credentials.py``), which also takes the project and team from an OIDC token's payload
    (``project_id``, ``owner_id``) when ``VERCEL_PROJECT_ID`` and ``VERCEL_TEAM_ID`` are not set. Never the
    replay placeholder: a live API would refuse it, so recording without a token is a usage error.
    """
    oidc = os.environ.get("VERCEL_OIDC_TOKEN", "")
    token = oidc or os.environ.get("VERCEL_TOKEN", "")
    if not token:
        raise pytest.UsageError("recording vercel-sandbox needs VERCEL_OIDC_TOKEN or VERCEL_TOKEN")
    claims: dict[str, str] = {}
    if oidc:
        with contextlib.suppress(ValueError, IndexError, binascii.Error):
            payload = oidc.split(".")[1]
            decoded = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            if isinstance(decoded, dict):
                claims = {k: v for k, v in decoded.items() if k in ("project_id", "owner_id") and isinstance(v, str)}
    return token, claims


@pytest.fixture
def conformance_profile() -> Profile:
    """Vercel Sandbox: v3 create, v2 sessions."""
    return VERCEL


@pytest.fixture
def conformance_target(conformance_replay: Any, request: pytest.FixtureRequest) -> ConformanceTarget:
    """The real driver, with a real httpx client, pointed at the test's replay server (or the recorder)."""
    recording = request.config.getoption("conformance_record")
    token, claims = recorder_credentials() if recording else (REPLAY_TOKEN, {})
    url = conformance_replay.url("api")

    def build(config: AppConfig) -> object:
        return driver_from_config(config, token=token, base_url=url)

    def unavailable(config: AppConfig) -> object:
        # Port 9 (discard) on loopback: nothing listens, the connection is refused.
        return driver_from_config(config, token=REPLAY_TOKEN, base_url="http://127.0.0.1:9")

    if recording:
        # Only what the recorder was given: a placeholder sent to a live API would be refused (or worse, be
        # someone's team). No team is a personal account: no teamId is sent.
        project: str | None = os.environ.get("VERCEL_PROJECT_ID") or claims.get("project_id")
        team: str | None = os.environ.get("VERCEL_TEAM_ID") or claims.get("owner_id") or None
        if not project:
            raise pytest.UsageError("recording vercel-sandbox needs VERCEL_PROJECT_ID (and VERCEL_TEAM_ID for a team)")
    else:
        project, team = PROJECT, TEAM
    return ConformanceTarget(
        driver_id="vercel-sandbox",
        driver=build,
        unavailable=unavailable,
        config={"sandbox": {"vercel": {"project": project, "team": team}}},
        # What a Vercel command's environment holds before ours: the image's PATH, HOME and LANG (github
        # vercel/sandbox images/ubuntu/Dockerfile ``ENV LANG=C.UTF-8``).
        baseline_env=frozenset({"PATH", "HOME", "LANG", "LC_CTYPE"}),
    )
