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
    # Each kept cassette's test is skipped, saying why; the wildcard test fails against the stand-in (it cannot
    # tell names apart by SNI, so it reaches nothing) and so writes nothing.
    assert output.count("recording keeps the cassette") == 6, output
    assert "FAILED" in output and "test_a_wildcard_host" in output, output
    assert not (suite / "cassettes" / FAILING).exists()

    # Kept, byte for byte: the faults (their tests were skipped) and the hand-edited network cassette.
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
