"""``sandbox.vercel``: the Vercel driver's own section; its token is a secret reference core resolves."""

from __future__ import annotations

import pytest
from mainsdk import Sandbox, SandboxDeps
from mainsdk.config import load_config_text
from mainsdk.entry_points import driver_section_name
from mainsdk.errors import INVALID_OPTION, ConfigError, SandboxError
from mainsdk.secrets import Credential
from mainsdk_vercel.config import VercelConfig

SECTION = 'sandbox:\n  driver: vercel-sandbox\n  vercel: { token: "secret:VERCEL_TEAM_TOKEN", project: prj_123 }\n'


def test_the_vercel_driver_declares_sandbox_vercel() -> None:
    assert driver_section_name("vercel-sandbox") == "vercel"


def test_the_section_loads_as_before() -> None:
    config = load_config_text(SECTION)
    assert config.sandbox.sections["vercel"] == VercelConfig(
        token=Credential.named("VERCEL_TEAM_TOKEN"), project="prj_123"
    )


def test_a_wrong_type_has_its_line() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text("sandbox:\n  driver: vercel-sandbox\n  vercel: { project: 123 }\n")
    [problem] = caught.value.problems
    assert (problem.code, problem.key, problem.line) == (INVALID_OPTION, "sandbox.vercel.project", 3)
    assert problem.message == "expected text, not 123 (put it in quotes)"


def test_the_token_comes_from_the_apps_resolver_not_only_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VERCEL_TEAM_TOKEN", raising=False)
    resolver = {"VERCEL_TEAM_TOKEN": "vcp_from_vault"}.get
    sandbox = Sandbox(SandboxDeps(config=load_config_text(SECTION), secret=resolver, load_entrypoints=False))
    driver = sandbox._async._pm.get_plugin("driver")
    assert driver is not None
    assert driver._api._token == "vcp_from_vault"


def test_a_token_with_no_value_is_named_never_shown() -> None:
    with pytest.raises(SandboxError) as caught:
        Sandbox(SandboxDeps(config=load_config_text(SECTION), secret=lambda name: None, load_entrypoints=False))
    assert caught.value.code == INVALID_OPTION
    assert "sandbox.vercel.token names the secret VERCEL_TEAM_TOKEN, which has no value" in str(caught.value)
