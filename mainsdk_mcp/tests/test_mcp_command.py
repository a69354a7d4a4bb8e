"""``mainsdk sandbox mcp`` on the ``mainsdk`` command line: its options, its errors, and what it imports when."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

MCP_USAGE = (
    "usage: mainsdk sandbox mcp [-h] [--name NAME] [--intent INTENT]\n"
    "                           [--language LANGUAGE] [--config CONFIG] [--session]\n"
)


def mainsdk(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key not in ("MAINSDK_CONFIG", "MAINSDK_ENV")}
    env["COLUMNS"] = "80"  # argparse wraps the usage to the terminal's width
    return subprocess.run(
        [sys.executable, "-m", "mainsdk_cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_the_command_keeps_its_options_and_usage(tmp_path: Path) -> None:
    helped = mainsdk("sandbox", "mcp", "--help", cwd=tmp_path)
    assert helped.returncode == 0 and helped.stdout.startswith(MCP_USAGE)
    for option in ("--name", "--intent", "--language", "--config", "--session"):
        assert option in helped.stdout
    wrong = mainsdk("sandbox", "mcp", "--language", "ruby", cwd=tmp_path)
    assert (wrong.returncode, wrong.stdout) == (2, "")
    assert wrong.stderr.startswith(MCP_USAGE)
    assert "mainsdk sandbox mcp: error: argument --language: invalid choice: 'ruby'" in wrong.stderr


def test_a_config_that_is_a_fifo_is_one_line_with_its_code_not_a_hang(tmp_path: Path) -> None:
    # Must hold (issue 31): --config naming a FIFO hung the server in the open, before it served anything.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    done = mainsdk("sandbox", "mcp", "--config", str(fifo), cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr.startswith("mainsdk: MAIN-SANDBOX-0001") and str(fifo) in done.stderr
    assert "not a regular file" in done.stderr and "Traceback" not in done.stderr


def test_a_main_yaml_it_cannot_load_is_one_line_with_its_code_before_serving(tmp_path: Path) -> None:
    (tmp_path / "main.yaml").write_text("sandbox:\n  driver: local\n  limitz: {}\n")
    done = mainsdk("sandbox", "mcp", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("mainsdk: ") and "MAIN-CONFIG-0003" in done.stderr and "limitz" in done.stderr
    assert "Traceback" not in done.stderr


def test_another_command_does_not_import_mcp(tmp_path: Path) -> None:
    # Every mainsdk command loads this plugin to list `sandbox mcp`; mcp itself comes when the command runs.
    probe = (
        "import sys, contextlib, io\nfrom mainsdk_cli.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    main(['sandbox', 'drivers'])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types', 'mainsdk_mcp', 'pydantic')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout == "['mainsdk_mcp', 'mainsdk_mcp.cli']\n", done.stderr


def test_the_server_needs_no_command_line() -> None:
    # Only the plugin module (mainsdk_mcp.cli) is the command line's; an app serving the action itself
    # (mainsdk_mcp.server) runs without mainsdk-cli.
    probe = (
        "import sys\nimport mainsdk_mcp, mainsdk_mcp.server\nmainsdk_mcp.server.build_server\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'mainsdk_cli'))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr
