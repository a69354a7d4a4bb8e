"""What a main.yaml without ``permissions.processes`` allows on the local driver (issue 12).

An empty or one-line main.yaml (the one a MAIN-SANDBOX-0009 message asks for) allows the driver's own
interpreters, the programs of ``sandbox.local``, and nothing else; a ``permissions.processes`` that is set
is honoured exactly. Real runs on the real driver.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mainsdk import Sandbox, SandboxDeps
from mainsdk.config import load_config_text
from mainsdk.errors import INVALID_OPTION, SandboxError
from mainsdk_local.driver import driver_from_config

SNIPPETS = [("python", "print('py')", "py\n"), ("node", "console.log('js')", "js\n"), ("bash", "echo sh", "sh\n")]


@pytest.fixture
def sandbox_from(tmp_path: Path) -> Iterator[Callable[[str], Sandbox]]:
    built: list[Sandbox] = []

    def make(text: str) -> Sandbox:
        config = load_config_text(text, source=tmp_path / "main.yaml")
        sandbox = Sandbox(SandboxDeps(config=config, driver=driver_from_config(config), load_entrypoints=False))
        built.append(sandbox)
        return sandbox

    yield make
    for sandbox in built:
        sandbox.close()


@pytest.mark.parametrize(
    "text",
    ["", "sandbox: { secrets: [API_KEY] }\n", "permissions: { disk: { temp: { max: 64MB } } }\n"],
    ids=["empty", "one-line", "permissions-without-processes"],
)
def test_without_permissions_processes_every_language_runs(sandbox_from: Callable[[str], Sandbox], text: str) -> None:
    sandbox = sandbox_from(text)
    for language, code, expected in SNIPPETS:
        assert sandbox.run(code, language).stdout == expected


def test_without_permissions_processes_other_programs_stay_refused(sandbox_from: Callable[[str], Sandbox]) -> None:
    sandbox = sandbox_from("sandbox: { secrets: [API_KEY] }\n")
    with sandbox.create(feature="defaults") as session, pytest.raises(SandboxError) as caught:
        session.run("ls", [])
    assert caught.value.code == INVALID_OPTION and "permissions.processes" in caught.value.message


def test_a_set_permissions_processes_is_honoured_exactly(sandbox_from: Callable[[str], Sandbox]) -> None:
    sandbox = sandbox_from("permissions: { processes: [python3] }\n")
    assert sandbox.run("print('py')").stdout == "py\n"
    with pytest.raises(SandboxError) as caught:
        sandbox.run("echo sh", "bash")
    assert caught.value.code == INVALID_OPTION and "permissions.processes" in caught.value.message
    empty = sandbox_from("permissions: { processes: [] }\n")
    with pytest.raises(SandboxError):
        empty.run("print('py')")
