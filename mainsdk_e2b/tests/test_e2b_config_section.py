"""``sandbox.e2b``: the E2B driver's own section; its key is a secret reference core resolves."""

from __future__ import annotations

import pytest
from mainsdk import Sandbox, SandboxDeps
from mainsdk.config import load_config_text
from mainsdk.entry_points import driver_section_name
from mainsdk.errors import UNKNOWN_CONFIG_KEY, ConfigError
from mainsdk.secrets import Credential
from mainsdk_e2b.config import E2BConfig


def test_the_e2b_driver_declares_sandbox_e2b() -> None:
    assert driver_section_name("e2b") == "e2b"


def test_the_section_loads_as_before() -> None:
    config = load_config_text("sandbox:\n  driver: e2b\n  e2b: { key: secret:K, template: base }\n")
    assert config.sandbox.sections["e2b"] == E2BConfig(key=Credential.named("K"), template="base")
    assert load_config_text("sandbox:\n  driver: e2b\n").sandbox.section("e2b", E2BConfig) == E2BConfig()


def test_a_misspelt_key_has_its_line_and_a_did_you_mean() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text("sandbox:\n  driver: e2b\n  e2b:\n    key: secret:K\n    tmpl: x\n")
    [problem] = caught.value.problems
    assert (problem.code, problem.key, problem.line) == (UNKNOWN_CONFIG_KEY, "sandbox.e2b.tmpl", 5)
    assert problem.message.endswith('did you mean "template"?')


def test_the_key_comes_from_the_apps_resolver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("E2B_TEAM_KEY", "e2b_from_environment")  # the app's resolver wins
    config = load_config_text("sandbox:\n  driver: e2b\n  e2b: { key: secret:E2B_TEAM_KEY }\n")
    sandbox = Sandbox(SandboxDeps(config=config, secret={"E2B_TEAM_KEY": "e2b_from_vault"}.get, load_entrypoints=False))
    driver = sandbox._async._pm.get_plugin("driver")
    assert driver is not None
    assert driver._key() == "e2b_from_vault"
