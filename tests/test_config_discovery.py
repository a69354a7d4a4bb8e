"""Which main.yaml was read is said (issue 35, point 6): INFO once, the file and how it was found, or that none was
and the defaults hold, with how to point at one. Before, ``./main.yaml`` was looked for silently, and from another
folder a secret the file lists was "not under sandbox.secrets" with no word that no file had been read.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from mainsdk import SandboxError, sandbox

SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stdout)
from mainsdk import SandboxError, sandbox, secret
sandbox.run("print(1)")
sandbox.run("print(2)")
try:
    sandbox.run("print(3)", env={"KEY": secret("API_KEY")})
except SandboxError as error:
    print("REFUSED", error.message)
"""


def _run(folder: Path, **env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MAINSDK_")}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=folder,
        env={**clean, **env, "API_KEY": "s3cret"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if "main.yaml" in line or "config" in line]


def test_no_main_yaml_is_said_once_with_how_to_point_at_one(tmp_path: Path) -> None:
    lines = _run(tmp_path)
    said = [line for line in lines if line.startswith("INFO mainsdk: no main.yaml")]
    assert len(said) == 1, lines
    assert f"in the current folder ({tmp_path})" in said[0] and "MAINSDK_CONFIG=/path/to/main.yaml" in said[0]
    [refused] = [line for line in lines if line.startswith("REFUSED")]
    assert "no main.yaml was read" in refused and "MAINSDK_CONFIG" in refused


def test_the_file_read_is_said_once(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "main.yaml").write_text("sandbox: { secrets: [API_KEY] }\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    lines = _run(elsewhere, MAINSDK_CONFIG=str(app / "main.yaml"))
    said = [line for line in lines if line.startswith("INFO mainsdk: read the config")]
    assert said == [f"INFO mainsdk: read the config from {app / 'main.yaml'} (found through MAINSDK_CONFIG)"], lines
    assert not [line for line in lines if line.startswith("REFUSED")]  # the file's secret was given


def test_localhost_at_the_call_gets_the_127_0_0_1_advice_at_once(app_dir: Callable[[str], Path]) -> None:
    # Issue 35, point 7: before, the call said to add localhost to sandbox.network and network.allow; done, the
    # config refused it, advising 127.0.0.1 (and http://localhost stayed refused in the run).
    for host in ("localhost", "api.localhost"):
        with pytest.raises(SandboxError) as refused:
            sandbox.run("print(1)", network=[host])
        assert refused.value.code == "MAIN-SANDBOX-0001"
        assert "network=['127.0.0.1']" in refused.value.message
        assert "sandbox.network and network.allow" in refused.value.message
        assert "add it to both" not in refused.value.message
