"""``mainsdk check`` on the ``mainsdk`` command line, added by this distribution through ``mainsdk_cli_commands``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECK_USAGE = "usage: mainsdk check [-h] [--env ENV] [--config CONFIG]"


def run(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key not in ("MAINSDK_CONFIG", "MAINSDK_ENV")}
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, timeout=60, check=False, cwd=cwd, env=env
    )


@pytest.mark.parametrize("entry", [["-m", "mainsdk_cli"], ["-m", "mainsdk_check"]], ids=["mainsdk-check", "module"])
def test_mainsdk_check_is_the_linter_with_its_own_options(tmp_path: Path, entry: list[str]) -> None:
    (tmp_path / "bad.py").write_text("eval(x)\n")
    (tmp_path / "main.yaml").write_text("sandbox:\n  driver: local\n")
    command = [*entry, "check"] if entry == ["-m", "mainsdk_cli"] else entry
    done = run(*command, "--format", "json", "--env", "prod", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    codes = sorted(finding["code"] for finding in json.loads(done.stdout)["findings"])
    assert codes == ["MAIN-SANDBOX-0010", "MAIN-SANDBOX-0011"]
    helped = run(*command, "--help", cwd=tmp_path)
    assert helped.returncode == 0 and helped.stdout.startswith(CHECK_USAGE) and "--exclude PATTERN" in helped.stdout
    # A usage error is the linter's own: one line, exit 2, as a pre-commit hook wants it.
    wrong = run(*command, "--format", "xml", cwd=tmp_path)
    assert (wrong.returncode, wrong.stdout) == (2, "")
    assert wrong.stderr.startswith("mainsdk check: argument --format: invalid choice: 'xml'")
    assert wrong.stderr.count("\n") == 1


def test_check_does_not_hang_on_a_fifo_named_like_python(tmp_path: Path) -> None:
    # Must hold: `mainsdk check` answers, whatever it is given. A FIFO named x.py on the command line
    # blocked its open (no writer) for ever; now it is a file that could not be checked, as a binary one is.
    os.mkfifo(tmp_path / "x.py")
    done = run("-m", "mainsdk_cli", "check", str(tmp_path / "x.py"), cwd=tmp_path)
    assert "x.py: not a regular file" in done.stderr + done.stdout, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr


def test_check_does_not_hang_on_a_fifo_without_an_extension_or_as_an_ignore_file(tmp_path: Path) -> None:
    # Must hold (issue 31): a FIFO named on the command line without .py (read for a #! line) or in a
    # .gitignore's place blocked the open for ever; it is no Python file, and no ignore file.
    os.mkfifo(tmp_path / "script")
    os.mkfifo(tmp_path / ".gitignore")
    (tmp_path / "bad.py").write_text("eval(x)\n")
    try:
        named = run("-m", "mainsdk_cli", "check", "script", cwd=tmp_path)
        walked = run("-m", "mainsdk_cli", "check", ".", cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"mainsdk check hung: {exc.cmd}")
    assert (named.returncode, "Traceback" in named.stderr) == (0, False), named.stderr
    assert walked.returncode == 1 and "MAIN-SANDBOX-0010" in walked.stdout and "bad.py" in walked.stdout


def test_an_egress_header_name_with_a_final_newline_is_found_in_main_yaml(tmp_path: Path) -> None:
    # Must hold (issue 31): `^...$` with re.match let "X-Api-Key\n" by; `mainsdk check` found nothing.
    (tmp_path / "main.yaml").write_text(
        "sandbox:\n  driver: local\n  secrets: [K]\n  network: [api.example.com]\n"
        '  egress: { api.example.com: { headers: { "X-Api-Key\\n": "secret:K" } } }\n'
        "network:\n  allow: [api.example.com]\n"
    )
    done = run("-m", "mainsdk_cli", "check", cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "MAIN-SANDBOX-0001" in done.stdout and "'X-Api-Key\\n' is not an HTTP header name" in done.stdout


def test_a_python_file_nested_past_the_parser_is_one_it_could_not_check(tmp_path: Path) -> None:
    # Must hold (issue 31): ast.parse raised MemoryError on 50,000 `not`s, a traceback out of `mainsdk check`.
    (tmp_path / "deep.py").write_text("x = " + "not " * 50_000 + "y\n")
    done = run("-m", "mainsdk_cli", "check", "deep.py", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "cannot check deep.py: an expression is nested too deeply to analyse" in done.stderr


def test_the_linter_needs_no_command_line(tmp_path: Path) -> None:
    # Only the plugin module (mainsdk_check.cli) is the command line's; the library and `python -m mainsdk_check`
    # run without mainsdk-cli.
    probe = (
        "import sys, runpy\nimport mainsdk_check\nmainsdk_check.run_check\nsys.argv = ['x', '--format', 'json', '.']\n"
        "try:\n    runpy.run_module('mainsdk_check', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'mainsdk_cli'), file=sys.stderr)"
    )
    done = run("-c", probe, cwd=tmp_path)
    assert done.returncode == 0 and json.loads(done.stdout)["findings"] == [], done.stderr
    assert done.stderr == "[]\n"
