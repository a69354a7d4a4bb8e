"""One vocabulary for languages (issue 35, point 5), on runs, cells, actions, the CLI and the MCP server.

Before, a run took ``node`` and refused ``javascript``, a cell took ``javascript`` and refused ``node``, and E2B's
``js`` and ``ts`` were refused everywhere. Every place now takes each language's name and its aliases
(``mainsdk.languages``), and the README lists them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from mainsdk import SandboxError, sandbox
from mainsdk.languages import ALIASES

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """
sandbox:
  driver: local
permissions:
  processes: [python3, node, bash]
"""

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="needs node (.ci/run installs it)")


@pytest.mark.parametrize(
    ("name", "code", "program"),
    [
        ("py", "print(1)", "python"),
        ("python3", "print(1)", "python"),
        ("javascript", "console.log(1)", "node"),
        ("js", "console.log(1)", "node"),
        ("sh", "echo 1", "bash"),
    ],
)
def test_a_run_takes_every_name_and_alias(app_dir: Callable[[str], Path], name: str, code: str, program: str) -> None:
    app_dir(CONFIG)
    result = sandbox.run(code, language=name)
    assert (result.stdout, result.language) == ("1\n", program)


def test_a_typescript_run_is_refused_with_where_it_runs(app_dir: Callable[[str], Path]) -> None:
    app_dir(CONFIG)
    with pytest.raises(SandboxError) as refused:
        sandbox.run("1", language="ts")
    assert refused.value.code == "MAIN-SANDBOX-0001"
    assert "session.run_code(code, language='typescript')" in refused.value.message


def test_an_unknown_language_lists_the_vocabulary(app_dir: Callable[[str], Path]) -> None:
    app_dir(CONFIG)
    with pytest.raises(SandboxError) as refused:
        sandbox.run("1", language="cobol")
    assert "python (py, python3), javascript (node, js), typescript (ts), bash (sh)" in refused.value.message


def test_a_cell_takes_node_and_js_as_javascript(app_dir: Callable[[str], Path]) -> None:
    app_dir(CONFIG)
    with sandbox.create() as session:
        assert session.run_code("const a = 2", language="node").error is None
        assert session.run_code("a + 1", language="js").text == "3"  # the same interpreter: javascript's
        assert session.interpreter("py").language == "python"


def test_an_action_takes_aliases_in_its_languages_and_its_input(app_dir: Callable[[str], Path]) -> None:
    app_dir(CONFIG)
    action = sandbox.action(name="code.run", intent="Run code", languages=["py", "js"])
    assert action.languages == ("python", "node")
    assert action.run({"code": "console.log(6 * 7)", "language": "javascript"})["stdout"] == "42\n"
    assert action.input_schema["properties"]["language"]["enum"] == ["python", "node"]


def test_the_cli_and_the_mcp_server_take_aliases(tmp_path: Path) -> None:
    (tmp_path / "main.yaml").write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAINSDK_")}
    done = subprocess.run(
        [sys.executable, "-m", "mainsdk_cli", "sandbox", "run", "--language", "js", "--code", "console.log(1)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "1\n", "")
    from mainsdk_mcp.cli import _parser

    assert _parser().parse_args(["--language", "javascript", "--language", "sh"]).language == ["javascript", "sh"]


def test_the_readme_lists_the_vocabulary() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name, aliases in ALIASES.items():
        assert f"`{name}` ({', '.join(f'`{alias}`' for alias in aliases)})" in readme, name
