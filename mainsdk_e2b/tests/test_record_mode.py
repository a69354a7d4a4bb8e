"""The driver's own cassettes have the suite's record mode: ``pytest --conformance-record`` re-records them.

End to end, in a subprocess, on a copy of ``test_input.py`` and its cassette: the real pytest, the real driver
and the real recorder forward to the stand-in (``stand_in.py``), as they would to E2B with ``E2B_API_KEY``.
What must hold, as for the suite's cassettes (``mainsdk_conformance.plugin``):

- a hand-edited cassette is recorded again, the run re-checking the edits (``meta.rechecked``), with no key in it,
  and a stand-in's answers labelled ``made: authored``; what was recorded then replays;
- a cassette holding faults is kept byte for byte (the test is skipped), as is one whose test fails;
- record mode without ``E2B_API_KEY`` is refused with what to set.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from stand_in import stand_in

HERE = Path(__file__).parent
CASSETTE = Path("cassettes") / "input" / "cat_reads_its_live_stdin.json"
REAL_KEY = "e2b_" + "ab" * 20  # stands for the team's key: it must be in no cassette


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """``test_input.py``, the helpers and the conftest, with its cassette, in a folder of their own."""
    for name in ("conftest.py", "e2b_replay.py", "test_input.py"):
        shutil.copy(HERE / name, tmp_path / name)
    (tmp_path / CASSETTE).parent.mkdir(parents=True)
    shutil.copy(HERE / CASSETTE, tmp_path / CASSETTE)
    return tmp_path


def _pytest(folder: Path, *args: str, key: str | None = REAL_KEY) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "E2B_API_KEY"} | ({"E2B_API_KEY": key} if key else {})
    command = [sys.executable, "-m", "pytest", "-p", "mainsdk_conformance.plugin", "-p", "no:cacheprovider", "-q"]
    return subprocess.run(
        [*command, "-rs", str(folder), *args], cwd=folder, env=env, capture_output=True, text=True, check=False
    )


def _edit(path: Path, change: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return data


def test_a_hand_edited_cassette_is_recorded_again_and_replays(copy: Path) -> None:
    edit = "stdout: set by hand, as a stand-in without E2B's network must"
    _edit(copy / CASSETTE, lambda data: data["meta"].update(edited=[edit]))
    with stand_in() as (api, sandbox, _state):
        done = _pytest(copy, "--conformance-record", f"--conformance-upstream=api={api}",
                       f"--conformance-upstream=sandbox={sandbox}")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    text = (copy / CASSETTE).read_text()
    data = json.loads(text)
    assert data["meta"]["rechecked"] == [edit]  # the run re-checked what was set by hand
    assert data["meta"]["made"] == "authored" and "stand-in" in data["meta"]["how"]  # loopback is no provider
    assert REAL_KEY not in text and "edited" not in data["meta"]
    replayed = _pytest(copy, key=None)  # and what was recorded replays, offline
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr


def test_a_cassette_with_faults_is_kept_and_a_failing_test_writes_nothing(copy: Path) -> None:
    _edit(copy / CASSETTE, lambda data: data["meta"].update(edited=["fault: the stream reset, by hand"]))
    kept = (copy / CASSETTE).read_bytes()
    with stand_in() as (api, sandbox, _state):
        done = _pytest(copy, "--conformance-record", f"--conformance-upstream=api={api}",
                       f"--conformance-upstream=sandbox={sandbox}")  # fmt: skip
        assert done.returncode == 0 and "recording keeps the cassette" in done.stdout, done.stdout
        assert (copy / CASSETTE).read_bytes() == kept
        # A test that fails against the provider writes nothing: here, one whose assertion no run can meet.
        _edit(copy / CASSETTE, lambda data: data["meta"].update(edited=[]))
        test = copy / "test_input.py"
        source = test.read_text()
        test.write_text(source.replace('assert seen["given"] and', 'assert seen["given"] == "never" and'))
        kept = (copy / CASSETTE).read_bytes()
        failed = _pytest(copy, "--conformance-record", f"--conformance-upstream=api={api}",
                         f"--conformance-upstream=sandbox={sandbox}")  # fmt: skip
    assert failed.returncode == 1, failed.stdout
    assert (copy / CASSETTE).read_bytes() == kept


def test_record_mode_without_a_key_says_what_to_set(copy: Path) -> None:
    done = _pytest(copy, "--conformance-record", key=None)
    assert done.returncode != 0 and "set E2B_API_KEY" in done.stdout + done.stderr
