"""The code-runner action for agents: tool definitions, budget and approval (its MCP server: mainsdk_mcp/tests)."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from mainsdk import Sandbox, SandboxDeps, SandboxError
from mainsdk.config import load_config_text

from mainsdk_local import local_sandbox_driver

CONFIG = """
sandbox:
  driver: local
  limits: { timeout: 5s }
  price: $0.01
permissions:
  processes: [python3, bash]
"""


class Budget:
    def __init__(self, dollars: str) -> None:
        self.left = Decimal(dollars)
        self.charged: list[Decimal] = []

    def remaining(self, agent: str | None) -> Decimal | None:
        return self.left

    def charge(self, agent: str | None, amount: Decimal) -> None:
        self.charged.append(amount)
        self.left -= amount


class Approvals:
    def __init__(self, allow: bool) -> None:
        self.allow = allow
        self.asked: list[tuple[str, str]] = []

    def approve(self, action: str, risk: str, input: Any, agent: str | None) -> bool:
        self.asked.append((action, risk))
        return self.allow


def make(tmp_path: Path, **deps: Any) -> Sandbox:
    config = load_config_text(CONFIG, source=tmp_path / "main.yaml")
    driver = local_sandbox_driver(permissions=config.permissions)
    return Sandbox(SandboxDeps(config=config, driver=driver, load_entrypoints=False, **deps))


def test_the_action_runs_code_and_returns_a_json_able_result(tmp_path: Path) -> None:
    sandbox = make(tmp_path)
    action = sandbox.action(name="code.run", intent="Run Python to analyse the user's data", languages=["python"])
    result = action.run(
        {"code": "open('../out/r.txt','w').write(open('d.txt').read()*2); print('ok')", "files": {"d.txt": "ab"}}
    )
    assert json.loads(json.dumps(result)) == result
    assert (result["stdout"], result["exit_code"], result["stop"]) == ("ok\n", 0, None)
    [entry] = result["files"]
    assert (entry["name"], entry["size"], entry["mime"]) == ("r.txt", 4, "text/plain")
    assert entry["sha256"] == hashlib.sha256(b"abab").hexdigest()
    assert action.read(entry["id"]) == b"abab"  # a FileRef the app can read
    assert sandbox.files.read(entry["id"]) == b"abab"
    assert action.risk == "write"
    assert result["signal"] is None
    crashed = action.run({"code": "import ctypes; ctypes.string_at(0)"})
    assert (crashed["exit_code"], crashed["signal"], crashed["stop"]) == (139, "SIGSEGV", None)
    sandbox.close()


def test_the_input_schema_and_tool_formats(tmp_path: Path) -> None:
    action = make(tmp_path).action(name="code.run", intent="Run code", languages=["python", "bash"])
    schema = action.input_schema
    assert schema["required"] == ["code"] and schema["properties"]["language"]["enum"] == ["python", "bash"]
    anthropic = action.anthropic_tool()
    assert anthropic["name"] == "code_run" and anthropic["input_schema"] == schema
    openai = action.openai_tool()
    assert openai["type"] == "function" and openai["function"]["parameters"] == schema


def test_a_language_not_in_languages_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    action = make(tmp_path).action(languages=["python"])
    with pytest.raises(SandboxError) as caught:
        action.run({"code": "echo hi", "language": "bash"})
    assert caught.value.code == "MAIN-SANDBOX-0001" and "'bash' is not allowed" in caught.value.message


def test_the_budget_refuses_what_it_cannot_cover_and_is_charged_what_ran(tmp_path: Path) -> None:
    budget = Budget("0.10")  # $0.01/s x 5s = $0.05 worst case: covered
    action = make(tmp_path, agents=budget).action()
    action.run({"code": "print(1)"}, agent="analyst")
    assert len(budget.charged) == 1 and Decimal(0) < budget.charged[0] < Decimal("0.05")
    poor = Budget("0.01")
    with pytest.raises(SandboxError) as caught:
        make(tmp_path, agents=poor).action().run({"code": "print(1)"})
    assert caught.value.code == "MAIN-SANDBOX-0007" and poor.charged == []


def test_the_approval_rule_is_asked_with_the_risk(tmp_path: Path) -> None:
    denied = Approvals(allow=False)
    with pytest.raises(SandboxError) as caught:
        make(tmp_path, access=denied).action(risk="destructive").run({"code": "print(1)"})
    assert caught.value.status == 403 and denied.asked == [("code.run", "destructive")]
    allowed = Approvals(allow=True)
    assert make(tmp_path, access=allowed).action().run({"code": "print(2)"})["stdout"] == "2\n"
