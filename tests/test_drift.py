"""The smaller drift of issue 35, point 10, each as a newcomer met it (the docs' items are in test_docs.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from mainsdk import ConfigError, SandboxError, sandbox
from mainsdk.config import load_config_text
from mainsdk.default import reset_default_sandbox

CONFIG = "sandbox: { driver: local }\npermissions: { processes: [python3] }\n"


def test_a_shell_line_as_a_program_says_run_takes_the_program_and_its_arguments(
    app_dir: Callable[[str], Path],
) -> None:
    app_dir(CONFIG)
    with sandbox.create() as session, pytest.raises(SandboxError) as refused:
        session.run("python3 -c 'print(1)'")
    assert refused.value.code == "MAIN-SANDBOX-0001"
    assert "run takes the program and a list of its arguments" in refused.value.message
    assert "run('python3', ['-c', 'print(1)'])" in refused.value.message
    assert "permissions.processes" not in refused.value.message  # not the advice to list a shell line there


def test_a_program_that_is_no_interpreter_is_not_named_as_a_sandbox_local_key(app_dir: Callable[[str], Path]) -> None:
    app_dir(CONFIG)
    with sandbox.create() as session, pytest.raises(SandboxError) as refused:
        session.run("curl", ["--version"])
    assert "sandbox.local.curl" not in refused.value.message
    assert refused.value.message == (
        "program 'curl' is not under permissions.processes in main.yaml; add it: permissions: { processes: [curl] }"
    )


def test_a_driver_typo_gets_a_did_you_mean(app_dir: Callable[[str], Path]) -> None:
    app_dir("sandbox: { driver: lcoal }\n")
    reset_default_sandbox()
    with pytest.raises(SandboxError) as refused:
        sandbox.run("print(1)")
    assert refused.value.code == "MAIN-SANDBOX-0001" and "did you mean 'local'?" in refused.value.message


def test_a_config_error_says_its_code_once() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config_text("sandbox:\n  netwrok: []\n")
    assert str(refused.value).count("MAIN-CONFIG-0003") == 1, str(refused.value)
    assert str(refused.value).startswith("MAIN-CONFIG-0003: main.yaml line 2: sandbox.netwrok: ")
