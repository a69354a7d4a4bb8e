"""Record mode end to end: ``mainsdk-conformance record --driver vercel-sandbox`` against the loopback stand-in.

The real command line (in a subprocess), the real driver and the real
recorder forward to ``conformance/simulator.py``, which stands for Vercel's
API; then the written cassettes are replayed. What must hold:

- a plain run is recorded with no token in it, and labelled truthfully: a stand-in on this machine is not
  the provider, so ``made: authored``;
- authored fault cassettes and hand-edited cassettes are never overwritten
  (a live run cannot reproduce them), byte for byte;
- a test that does not pass, or is skipped, writes nothing;
- what was recorded replays.
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
SUITE = HERE / "conformance"
sys.path.insert(0, str(SUITE))
# The stand-in, by path (the tests are no package).
Simulator: Any = importlib.import_module("simulator").Simulator

RECORDED = "TestRun/test_python_prints.json"
KEPT = [
    "TestFaults/test_503_is_0006_and_retryable.json",
    "TestFaults/test_a_reset_mid_stream_is_0006_and_the_command_is_not_sent_again.json",
    "TestNetwork/test_one_host.json",  # authored, its output edited by hand
]
LIVE_ONLY = "TestRun/test_runs_in_parallel_threads_do_not_mix.json"
FAILING = "TestNetwork/test_a_wildcard_host.json"  # no cassette yet; fails against the stand-in (no firewall, no net)
SELECTED = "test_python_prints or TestFaults or test_one_host or test_a_wildcard_host or test_runs_in_parallel"


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    """A copy of the driver's conformance tests and the cassettes the selected tests use."""
    folder = tmp_path / "suite"
    folder.mkdir()
    for name in ("conftest.py", "test_conformance.py"):
        shutil.copy(SUITE / name, folder / name)
    for name in [RECORDED, *KEPT]:
        target = folder / "cassettes" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SUITE / "cassettes" / name, target)
    for fault in (SUITE / "cassettes" / "TestFaults").glob("*.json"):
        target = folder / "cassettes" / "TestFaults" / fault.name
        if not target.exists():
            shutil.copy(fault, target)
    return folder


@pytest.fixture
def standin() -> Iterator[Any]:
    sim = Simulator()
    sim.start()
    yield sim
    sim.stop()


def _pytest(args: list[str], env: dict[str, str], module: str = "pytest") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_record_keeps_what_a_live_run_cannot_make_labels_the_rest_and_replays(suite: Path, standin: Any) -> None:
    before = {name: (suite / "cassettes" / name).read_bytes() for name in KEPT}
    faults = {p.name: p.read_bytes() for p in (suite / "cassettes" / "TestFaults").glob("*.json")}
    env = {
        **os.environ,
        "VERCEL_TOKEN": standin.token,
        "VERCEL_PROJECT_ID": "prj_conformance",
        "VERCEL_TEAM_ID": "team_conformance",
    }
    recorded = _pytest(
        [
            "record",
            "--driver",
            "vercel-sandbox",
            "--tests",
            str(suite),
            "--upstream",
            f"api={standin.url}",
            "--",
            "-p",
            "mainsdk_conformance.plugin",
            "-k",
            SELECTED,
            "-rfsx",
        ],
        env,
        module="mainsdk_conformance.cli",
    )
    output = recorded.stdout + recorded.stderr
    # Each fault cassette's test is skipped, saying why; the wildcard test fails against the stand-in (it cannot
    # tell names apart by SNI, so it reaches nothing) and so writes nothing.
    assert output.count("recording keeps the cassette") == 5, output
    assert "FAILED" in output and "test_a_wildcard_host" in output, output
    assert not (suite / "cassettes" / FAILING).exists()
    # The hand-edited network cassette is recorded again (its stdout is what a live run must give); the stand-in
    # has no egress policy to give it, so the test fails, the cassette stays and the run says so.
    assert "test_one_host" in output.split("short test summary")[-1], output
    assert "test_one_host.json: the live run did not reproduce what was set by hand" in output, output

    # Kept, byte for byte: the faults (their tests were skipped) and the hand-edited network cassette (not reproduced).
    assert {p.name: p.read_bytes() for p in (suite / "cassettes" / "TestFaults").glob("*.json")} == faults
    assert {name: (suite / "cassettes" / name).read_bytes() for name in KEPT} == before
    # A skipped (live-only) test wrote nothing.
    assert not (suite / "cassettes" / LIVE_ONLY).exists()

    # The plain run: recorded now, without the token, with the stand-in's answers, and labelled as what it is:
    # a stand-in on this machine is not Vercel, so it is authored, never "recorded".
    data = json.loads((suite / "cassettes" / RECORDED).read_text())
    assert data["meta"]["made"] == "authored" and "edited" not in data["meta"]
    assert data["meta"]["how"] == f"recorded against a stand-in on this machine ({standin.url})"
    text = json.dumps(data)
    assert standin.token not in text
    paths = [i["request"]["path"] for i in data["interactions"]]
    # create (answered pending by the stand-in), the read of the sandbox until it runs, the code, out, stop
    assert paths[0] == "/v3/sandboxes" and paths[1].startswith("/v2/sandboxes/sbx-") and paths[-1].endswith("/stop")
    assert len(paths) == 5

    # And it replays (no network: the stand-in is gone).
    standin.stop()
    replayed = _pytest(
        [str(suite), "-p", "mainsdk_conformance.plugin", "-p", "no:cacheprovider", "-q", "-k", "test_python_prints"],
        {k: v for k, v in os.environ.items() if not k.startswith("VERCEL_")},
    )
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "1 passed" in replayed.stdout


def _oidc_token(claims: dict[str, str]) -> str:
    """A token shaped as Vercel's OIDC tokens are (a JWT: header, claims, signature, base64url)."""

    def part(value: dict[str, str]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


def test_record_with_only_an_oidc_token_sends_it_and_takes_the_project_and_team_from_its_claims(
    suite: Path,
) -> None:
    token = _oidc_token({"project_id": "prj_conformance", "owner_id": "team_conformance", "sub": "owner:x"})
    sim = Simulator(token=token)  # the stand-in takes only this token: the replay placeholder would be refused
    sim.start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VERCEL_")}
        env["VERCEL_OIDC_TOKEN"] = token  # no VERCEL_TOKEN, no VERCEL_PROJECT_ID, no VERCEL_TEAM_ID
        (suite / "cassettes" / RECORDED).unlink()
        recorded = _pytest(
            [
                "record",
                "--driver",
                "vercel-sandbox",
                "--tests",
                str(suite),
                "--upstream",
                f"api={sim.url}",
                "--",
                "-p",
                "mainsdk_conformance.plugin",
                "-k",
                "test_python_prints",
            ],
            env,
            module="mainsdk_conformance.cli",
        )
    finally:
        sim.stop()
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    creates = [r for r in sim.requests if r["path"] == "/v3/sandboxes"]
    assert creates and all(r["headers"]["authorization"] == f"Bearer {token}" for r in sim.requests)
    assert json.loads(creates[0]["body"])["projectId"] == "prj_conformance"
    assert creates[0]["query"] == {"teamId": "team_conformance"}
    text = (suite / "cassettes" / RECORDED).read_text()
    assert token not in text and token.split(".")[1] not in text  # scrubbed: no part of the credential


def test_record_without_any_token_is_a_usage_error_naming_both_variables(suite: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERCEL_")}
    env["VERCEL_PROJECT_ID"] = "prj_conformance"
    refused = _pytest(
        [str(suite), "-p", "mainsdk_conformance.plugin", "--conformance-record", "-k", "test_python_prints"], env
    )
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "VERCEL_OIDC_TOKEN or VERCEL_TOKEN" in output, output
