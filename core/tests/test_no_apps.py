"""Core imports none of the apps built on it (issue 25): the command line, ``mainsdk check``, the MCP server.

They are distributions of their own (mainsdk-cli, mainsdk-check, mainsdk-mcp) that reach core through its
interface and the ``mainsdk_cli_commands`` hook; core never reaches them, not even under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import mainsdk

CORE_SRC = Path(mainsdk.__file__).resolve().parent.parent
APPS = ("mainsdk_cli", "mainsdk_check", "mainsdk_mcp", "mcp", "mcp_types")


def test_importing_mainsdk_imports_no_app() -> None:
    probe = "import json, sys, mainsdk, mainsdk.driver, mainsdk.sync; print(json.dumps(sorted(sys.modules)))"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONSTARTUP"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)
    loaded = json.loads(done.stdout)
    assert "mainsdk" in loaded
    assert [m for m in loaded if m.split(".")[0] in APPS] == []
    # Nor does core hold them any more, or depend on mcp (it had an `mcp` extra) or give the `mainsdk` command.
    for gone in ("mainsdk.check", "mainsdk.mcp_server", "mainsdk.cli", "mainsdk.cli_hooks", "mainsdk.__main__"):
        assert importlib.util.find_spec(gone) is None, gone
    requires = importlib.metadata.requires("mainsdk") or []
    assert [r for r in requires if r.startswith("mcp")] == []
    scripts = [e for e in importlib.metadata.distribution("mainsdk").entry_points if e.group == "console_scripts"]
    assert scripts == []


def test_no_core_module_imports_an_app_or_mcp() -> None:
    # Counting imports inside functions and under TYPE_CHECKING: core reaches its apps only through the hook.
    found = []
    for path in sorted((CORE_SRC / "mainsdk").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            found += [f"{path.name}: {name}" for name in names if name.split(".")[0] in APPS]
    assert found == []
