"""Long waits on a terminal (issue 35, point 9): the command shows what is being built and why while a package set
builds (rich's status display, mainsdk_cli.progress), and how long it took; off a terminal, nothing of it.

The set is a small pure-Python wheel from pip's configured index (as mainsdk_local/tests/test_packages.py does),
into a fresh cache, so the build is really a first build.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/ns/mnt"), reason="Linux only")

CONFIG = """
sandbox:
  driver: local
  packages: { python: [six==1.16.0] }
permissions:
  processes: [python3]
"""
COMMAND = [sys.executable, "-m", "mainsdk_cli", "sandbox", "run", "--code", "import six; print(six.__version__)"]


def _env(tmp_path: Path, cache: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAINSDK_")}
    env.update(XDG_CACHE_HOME=str(tmp_path / cache), TERM="xterm", COLUMNS="200")
    return env


def _on_a_terminal(tmp_path: Path, env: dict[str, str]) -> tuple[int, str]:
    leader, follower = pty.openpty()
    process = subprocess.Popen(COMMAND, cwd=tmp_path, env=env, stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    said = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 300)
        if not ready:
            process.kill()
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the command ended and closed the terminal
            break
        if not chunk:
            break
        said += chunk
    os.close(leader)
    return process.wait(timeout=60), said.decode("utf-8", "replace")


def test_a_first_build_shows_what_why_and_how_long_on_a_terminal_and_nothing_in_a_pipe(tmp_path: Path) -> None:
    (tmp_path / "main.yaml").write_text(CONFIG)
    status, shown = _on_a_terminal(tmp_path, _env(tmp_path, "cache-tty"))
    assert status == 0, shown
    assert "1.16.0" in shown
    assert "building the python package set six==1.16.0 for sandbox.packages" in shown, shown
    assert "the first use of this set on this machine installs it" in shown, shown
    assert "done in" in shown, shown
    piped = subprocess.run(
        COMMAND,
        cwd=tmp_path,
        env=_env(tmp_path, "cache-pipe"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert (piped.returncode, piped.stdout) == (0, "1.16.0\n"), piped.stderr
    assert "building the python package set" not in piped.stderr
