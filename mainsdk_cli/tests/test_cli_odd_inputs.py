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


# -- what the surfaces fuzz found (issue 31) -------------------------------------------------------------------------


@pytest.mark.parametrize("config", ["fifo", "/dev/zero"])
def test_a_config_that_is_a_fifo_or_a_device_is_0001_naming_it(
    app_dir: Callable[[str], Path], tmp_path: Path, config: str
) -> None:
    # Must hold: --config naming a FIFO hung `mainsdk sandbox run` in the open; a device never ends.
    os.mkfifo(tmp_path / "fifo")
    path = str(tmp_path / config) if config == "fifo" else config
    done = mainsdk("sandbox", "run", "--config", path, "--code", "print(1)")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("mainsdk: MAIN-SANDBOX-0001") and path in done.stderr, done.stderr
    assert "not a regular file" in done.stderr and done.stdout == ""


@pytest.mark.parametrize("suffix", [".ts", ".rb", ".txt"])
def test_a_code_file_whose_extension_names_no_run_language_is_0001_naming_it(
    app_dir: Callable[[str], Path], tmp_path: Path, suffix: str
) -> None:
    # Must hold: x.ts ran as Python (a SyntaxError at best); the file's language is its extension's or refused.
    script = tmp_path / f"x{suffix}"
    script.write_text("print('ran as python')\n")
    done = mainsdk("sandbox", "run", str(script))
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr.startswith("mainsdk: MAIN-SANDBOX-0001") and str(script) in done.stderr, done.stderr
    assert "--language" in done.stderr and done.stderr.count("\n") == 1
    chosen = mainsdk("sandbox", "run", "--language", "python", str(script))  # the way out the message gives
    assert (chosen.returncode, chosen.stdout) == (0, "ran as python\n"), chosen.stderr
    plain = tmp_path / "script"
    plain.write_text("print('no extension: python')\n")
    assert mainsdk("sandbox", "run", str(plain)).stdout == "no extension: python\n"


def test_an_env_name_with_a_final_newline_is_0001_naming_it(app_dir: Callable[[str], Path]) -> None:
    # Must hold: `^...$` with re.match let "A\n" by as a variable name.
    done = mainsdk("sandbox", "run", "--env", "A\n=x", "--code", "print(1)")
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.startswith("mainsdk: MAIN-SANDBOX-0001") and repr("A\n") in done.stderr, done.stderr
