"""The code-runner action with session=True: one interpreter per agent conversation, on the real local driver."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from mainsdk import Sandbox, SandboxDeps, SandboxError
from mainsdk.config import load_config_text
from mainsdk.errors import INVALID_OPTION

from mainsdk_local import local_sandbox_driver

CONFIG = """
sandbox:
  driver: local
  limits: { timeout: 5s }
  price: $0.01
permissions:
  processes: [python3]
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


def make(tmp_path: Path, **deps: Any) -> Sandbox:
    config = load_config_text(CONFIG, source=tmp_path / "main.yaml")
    driver = local_sandbox_driver(permissions=config.permissions)
    return Sandbox(SandboxDeps(config=config, driver=driver, load_entrypoints=False, **deps))


def test_each_conversation_keeps_its_own_interpreter(tmp_path: Path) -> None:
    budget = Budget("1.00")
    sandbox = make(tmp_path, agents=budget)
    action = sandbox.action(name="notebook", session=True)
    try:
        first = action.run({"code": "x = 20\nx", "files": {"d.txt": "data"}}, conversation="c1")
        assert json.loads(json.dumps(first)) == first
        assert first["results"] == [{"mime": "text/plain", "text": "20"}] and first["cell"] == 1
        second = action.run({"code": "x += 1\n(x, open('d.txt').read())"}, conversation="c1")
        assert second["results"][0]["text"] == "(21, 'data')" and second["state_kept"] and not second["restarted"]
        other = action.run({"code": "'x' in globals()"}, conversation="c2")
        assert other["results"][0]["text"] == "False" and other["cell"] == 1
        failed = action.run({"code": "1/0"}, conversation="c1")
        assert failed["error"]["name"] == "ZeroDivisionError" and failed["state_kept"]
        assert len(budget.charged) == 4
        action.close("c1")
        again = action.run({"code": "'x' in globals()"}, conversation="c1")
        assert again["results"][0]["text"] == "False" and again["cell"] == 1  # a new conversation
    finally:
        action.close("c1")
        action.close("c2")
        sandbox.close()


def test_a_session_action_is_python_only(tmp_path: Path) -> None:
    sandbox = make(tmp_path)
    with pytest.raises(SandboxError) as caught:
        sandbox.action(languages=["python", "bash"], session=True)
    assert caught.value.code == INVALID_OPTION and "session=True" in caught.value.message
    sandbox.close()
