"""The driver's own cassettes (packages, egress) recorded live, as the conformance suite's are (``recording.py``).

A first live recording (``--conformance-record`` with a Vercel token) must re-check them: each test runs against
the API, a passing one replaces its cassette and says what hand-set answers it replaced (``meta.rechecked``),
a failing one leaves it as it was (and warns), one holding authored faults is kept and its test skipped, and
``author.py --finish`` (``recording.finish_own``) puts the placeholder project and team back so the recording
replays. Here the "live" API is the stand-in on loopback, through the real command line in a subprocess, on a
copy of the tests and cassettes (this checkout's are never written).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "conformance"))
Simulator: Any = importlib.import_module("simulator").Simulator
from recording import copy_for_recording, finish_own  # noqa: E402

LIVE_TOKEN = "vercel-live-token-made-up"  # the stand-in's token, standing for a user's VERCEL_TOKEN
RECORDED = "cassettes/packages/one_shot_made.json"
KEPT = "cassettes/packages/unresolvable.json"  # given an authored fault here: a live run cannot reproduce it
FILES = ["conftest.py", "recording.py", "test_packages.py", "conformance/conftest.py", RECORDED, KEPT]
SELECTED = "test_a_first_run_probes or test_a_set_the_app_cannot_fetch"


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    folder = copy_for_recording(tmp_path / "suite", FILES)
    kept = json.loads((folder / KEPT).read_text())
    kept["meta"]["fault"] = "made up for this test"
    (folder / KEPT).write_text(json.dumps(kept, indent=2) + "\n")
    return folder


@pytest.fixture
def standin() -> Iterator[Any]:
    sim = Simulator(token=LIVE_TOKEN)
    sim.start()
    yield sim
    sim.stop()


def _pytest(folder: Path, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest", str(folder / "test_packages.py"), "-p", "no:cacheprovider", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False, cwd=folder)


def _env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("VERCEL_", "MAINSDK_VERCEL_"))}
    return {**clean, **extra}


def test_a_live_recording_rechecks_the_drivers_own_cassettes_keeps_faults_and_replays(
    suite: Path, standin: Any
) -> None:
    before = (suite / RECORDED).read_text()
    assert json.loads(before)["meta"].get("edited")  # authored with hand-set answers (the install unpaced)
    kept = (suite / KEPT).read_bytes()
    env = _env(VERCEL_TOKEN=LIVE_TOKEN, VERCEL_PROJECT_ID="prj_live", VERCEL_TEAM_ID="team_live")
    args = ["--conformance-record", "--conformance-upstream", f"api={standin.url}", "-k", SELECTED, "-rs"]
    recorded = _pytest(suite, args, env)
    output = recorded.stdout + recorded.stderr
    assert recorded.returncode == 0 and "1 passed, 1 skipped" in output, output
    assert "recording keeps the cassette: unresolvable.json is authored and holds authored faults" in output
    assert (suite / KEPT).read_bytes() == kept  # byte for byte

    data = json.loads((suite / RECORDED).read_text())
    text = json.dumps(data)
    assert LIVE_TOKEN not in text and "prj_live" in text and "team_live" in text  # what the live API was sent
    assert data["meta"]["made"] == "authored"  # a stand-in on this machine is not Vercel
    assert data["meta"]["rechecked"] == json.loads(before)["meta"]["edited"]  # what this recording re-checked
    creates = [i for i in data["interactions"] if i["request"]["path"] == "/v3/sandboxes"]
    assert creates and all(i["request"]["body"]["json"]["projectId"] == "prj_live" for i in creates)

    # author.py --finish: the placeholders back, then it replays with nothing listening but the replay server.
    assert finish_own(suite / "cassettes", "prj_live", "team_live") == [suite / RECORDED]
    standin.stop()
    replayed = _pytest(suite, ["-q", "-k", "test_a_first_run_probes"], _env())
    assert replayed.returncode == 0 and "1 passed" in replayed.stdout, replayed.stdout + replayed.stderr


def test_a_live_recording_that_fails_writes_nothing_and_says_the_hand_set_answers_were_not_reproduced(
    suite: Path, standin: Any
) -> None:
    before = (suite / RECORDED).read_bytes()
    # A token the API refuses: the test fails, so its cassette stays as authored.
    env = _env(VERCEL_TOKEN="another-token", VERCEL_PROJECT_ID="prj_live")
    args = ["--conformance-record", "--conformance-upstream", f"api={standin.url}", "-k", "test_a_first_run_probes"]
    recorded = _pytest(suite, args, env)
    output = recorded.stdout + recorded.stderr
    assert recorded.returncode == 1 and "1 failed" in output, output
    assert "one_shot_made.json: the live run did not reproduce what was set by hand" in output, output
    assert (suite / RECORDED).read_bytes() == before


def test_recording_without_a_token_is_a_usage_error_naming_what_to_set(suite: Path) -> None:
    recorded = _pytest(suite, ["--conformance-record", "-k", "test_a_first_run_probes"], _env())
    output = recorded.stdout + recorded.stderr
    assert recorded.returncode != 0 and "VERCEL_OIDC_TOKEN or VERCEL_TOKEN" in output, output
