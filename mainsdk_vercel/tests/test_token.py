"""The token never reaches a cassette or an error message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mainsdk_conformance.cassette import SCRUBBED, load
from mainsdk_vercel._api import VercelApi
from mainsdk_vercel.driver import vercel_sandbox_driver

TESTS = Path(__file__).parent
CASSETTE_FILES = sorted(TESTS.rglob("cassettes/**/*.json"))
# Every token a test or the authoring ever sent: the fault tests', the conformance replay's, the simulator's.
TOKENS = (
    "vcp_" + "replayFAKEtoken" + "7" * 17,
    "replay-token-not-a-secret",
    "simulator-token",
)


def test_there_are_cassettes_to_check() -> None:
    assert len(CASSETTE_FILES) > 60  # every cassette with a request (a refusal sends none, so has none)


@pytest.mark.parametrize("path", CASSETTE_FILES, ids=lambda p: str(p.relative_to(TESTS)))
def test_no_cassette_holds_a_token(path: Path) -> None:
    load(path)  # refuses a cassette holding anything credential-shaped (bearer tokens, vc*_ tokens, ...)
    text = path.read_text(encoding="utf-8")
    assert not [token for token in TOKENS if token in text]
    for interaction in json.loads(text)["interactions"]:
        headers = {k.lower(): v for k, v in (interaction["request"].get("headers") or {}).items()}
        assert headers.get("authorization", SCRUBBED) == SCRUBBED


def test_an_answer_echoing_the_token_is_scrubbed_from_the_message() -> None:
    token = TOKENS[0]
    api = VercelApi(token=token, team=None, base_url="http://127.0.0.1:9", client=None)
    body = json.dumps({"error": {"code": "forbidden", "message": f"bad header: Bearer {token}"}}).encode()
    for error in (api.error("create", 401, body), api.error("create", 502, f"echo {token}".encode())):
        assert token not in error.message and token not in str(error) and "[token]" in error.message


def test_the_drivers_repr_leaves_the_token_out() -> None:
    driver = vercel_sandbox_driver(token=TOKENS[0], project="prj_1")
    assert TOKENS[0] not in repr(driver) and TOKENS[0] not in str(vars(driver).keys())
