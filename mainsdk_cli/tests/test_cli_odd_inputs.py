"""Odd inputs an outside reviewer gave the CLI: each must be a one-line usage error, never a traceback or a hang."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


def limited_memory() -> None:
    # The old CLI read /dev/zero whole; under this cap it died with a MemoryError traceback instead of
    # eating the machine's memory.
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def mainsdk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mainsdk_cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=limited_memory,
    )


@pytest.mark.parametrize(
    "make_args",
    [
        pytest.param(lambda tmp: ["sandbox", "run", "/dev/zero"], id="code-from-a-device"),
        pytest.param(lambda tmp: ["sandbox", "run", "--code", "1", "--file", "x=/dev/zero"], id="file-from-a-device"),
        pytest.param(lambda tmp: ["sandbox", "run", str(tmp / "fifo")], id="code-from-a-fifo"),
        pytest.param(
            lambda tmp: ["sandbox", "run", "--code", "1", "--file", f"x={tmp / 'fifo'}"], id="file-from-a-fifo"
        ),
        pytest.param(lambda tmp: ["sandbox", "run", str(tmp / "latin1.py")], id="code-not-utf8"),
    ],
)
def test_a_code_or_file_path_that_is_no_regular_text_file_is_a_usage_error(
    app_dir: Callable[[str], Path], tmp_path: Path, make_args: Callable[[Path], list[str]]
) -> None:
    # Must hold: bad input gets one clear line naming what is wrong and exit status 2; never a traceback,
    # never a hang. A device or FIFO has no end (a FIFO without a writer blocks the open itself).
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "latin1.py").write_bytes(b"print('caf\xe9')\n")
    done = mainsdk(*make_args(tmp_path))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("mainsdk: ") and done.stderr.count("\n") == 1, done.stderr


def test_out_file_names_the_code_chose_reach_the_terminal_escaped(
    app_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    # Must hold: with --json the code's output is escaped JSON, and what the CLI itself says on stderr is
    # one "mainsdk: ..." line per thing. Out-file names are the code's choice: a newline in one forged a
    # line, an escape sequence (here: set the terminal's title) reached the terminal as it was.
    app_dir("sandbox:\n  driver: local\n  limits: { timeout: 20s, memory: 128MB, output: 1MB }\n")
    code = (
        "import os\n"
        "open('../out/a\\nmainsdk: forged line', 'w').write('x')\n"
        "open('../out/b\\x1b]0;pwned\\x07', 'w').write('x')\n"
        "os.symlink('x', '../out/c\\x1b[2J')\n"
    )
    (tmp_path / "o").mkdir()
    for extra in ([], ["--out", str(tmp_path / "o")]):
        done = mainsdk("sandbox", "run", "--json", "--code", code, *extra)
        assert done.returncode == 0, done.stderr
        assert "\x1b" not in done.stderr and "\x07" not in done.stderr, done.stderr
        assert all(line.startswith("mainsdk: ") for line in done.stderr.splitlines()), done.stderr
