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


TREE = "import os\nsorted(os.path.join(r, n) for r, ds, fs in os.walk('.') for n in ds + fs if '.mainsdk' not in r + n)"


@pytest.mark.parametrize(
    ("earlier", "files", "says"),
    [
        ({}, {"a": "x", "a/b": "y"}, "'a' is a file and also the folder of 'a/b'"),  # in one input: checked first
        ({"f": "x"}, {"f/g": "y"}, "'f/g' cannot be written: a folder on its way is a file"),  # against the box
        ({"d/x": "x"}, {"d": "y"}, "'d' cannot be written: it is a folder"),
    ],
)
def test_files_that_cannot_be_written_are_0001_and_nothing_is_written(
    tmp_path: Path, earlier: dict[str, str], files: dict[str, str], says: str
) -> None:
    # They were a retryable MAIN-SANDBOX-0006 (NotADirectoryError) in a session; the one-shot action said 0001.
    sandbox = make(tmp_path)
    action = sandbox.action(name="notebook", session=True)
    try:
        before = action.run({"code": TREE, "files": earlier}, conversation="c")["results"][0]["text"]
        with pytest.raises(SandboxError) as caught:
            action.run({"code": "print('ran')", "files": files}, conversation="c")
        error = caught.value
        assert (error.code, error.retryable, error.ran) == (INVALID_OPTION, False, False)
        assert says in error.message, error.message
        after = action.run({"code": TREE}, conversation="c")
        assert after["results"][0]["text"] == before and after["cell"] == 2  # the refused call ran no cell
    finally:
        action.close("c")
        sandbox.close()


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), Decimal("sNaN"), True, [5]])
@pytest.mark.parametrize("session", [False, True])
def test_an_input_timeout_that_is_no_number_of_seconds_is_0001_naming_timeout(
    tmp_path: Path, timeout: object, session: bool
) -> None:
    # A NaN was sent on as "nans" and refused as a duration nobody wrote.
    sandbox = make(tmp_path)
    action = sandbox.action(name="notebook", session=True) if session else sandbox.action()
    try:
        with pytest.raises(SandboxError) as caught:
            action.run({"code": "print(1)", "timeout": timeout}, conversation="t")
        assert caught.value.code == INVALID_OPTION
        assert "timeout must be seconds or a duration like '5s'" in caught.value.message, caught.value.message
    finally:
        action.close("t")
        sandbox.close()
