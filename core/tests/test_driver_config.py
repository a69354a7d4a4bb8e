"""A driver's own ``sandbox.<name>:`` section: declared by the driver, checked by core's loader.

The third-party driver here is a real installed distribution as far as ``importlib.metadata`` is
concerned: a ``*.dist-info`` folder with its entry points on ``sys.path``, found the way pip-installed
drivers are found. Core has no knowledge of it.
"""

from __future__ import annotations

import logging
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from mainsdk import Sandbox, SandboxDeps
from mainsdk.config import load_config_text
from mainsdk.entry_points import config_section_names, driver_section_name
from mainsdk.errors import INVALID_OPTION, UNKNOWN_CONFIG_KEY, ConfigError
from mainsdk.plugins import load_driver
from mainsdk.secrets import Credential

MODULE = "acme_sandbox_driver"

DRIVER_SOURCE = '''
from __future__ import annotations

import attrs
from mainsdk.hookspecs import hookimpl
from mainsdk.secrets import Credential

BUILT = []  # the configs the factory was given


@attrs.frozen
class AcmeConfig:
    """sandbox.acme: this driver's own settings."""

    region: str = "eu"
    replicas: int = 1
    warm: bool = False
    token: Credential = attrs.field(default=Credential.named("ACME_TOKEN"))
    image: str | None = None
    zone: int = attrs.field(default=1, validator=attrs.validators.in_(range(1, 4)))


class AcmeDriver:
    def __init__(self, config):
        self.config = config

    # Never called here: these tests build the sandbox, they do not run code.
    @hookimpl
    def mainsdk_driver_capabilities(self): raise NotImplementedError
    @hookimpl
    async def mainsdk_driver_start(self, spec): raise NotImplementedError
    @hookimpl
    async def mainsdk_driver_exec(self, box, command, output): raise NotImplementedError
    @hookimpl
    async def mainsdk_driver_collect(self, box, max_bytes): raise NotImplementedError
    @hookimpl
    async def mainsdk_driver_stop(self, box): raise NotImplementedError


def driver_from_config(config):
    BUILT.append(config)
    return AcmeDriver(config)
'''


@pytest.fixture
def acme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Install the ``acme`` driver (distribution ``acme-sandbox``) with its section ``sandbox.acme``."""
    (tmp_path / f"{MODULE}.py").write_text(DRIVER_SOURCE)
    info = tmp_path / "acme_sandbox-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-sandbox\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent(f"""\
            [mainsdk.drivers]
            acme = {MODULE}:driver_from_config

            [mainsdk.driver_configs]
            acme = {MODULE}:AcmeConfig
            """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(MODULE, None)
    yield tmp_path
    sys.modules.pop(MODULE, None)


def problems(text: str) -> list[tuple[str, str, int | None, str]]:
    with pytest.raises(ConfigError) as caught:
        load_config_text(text, source="main.yaml")
    return [(p.code, p.key, p.line, p.message) for p in caught.value.problems]


def test_the_section_is_found_through_the_drivers_distribution(acme: object) -> None:
    assert "acme" in config_section_names()
    assert driver_section_name("acme") == "acme"
    assert MODULE not in sys.modules  # found from metadata alone


def test_a_third_party_section_loads_as_its_declared_class(acme: object) -> None:
    config = load_config_text("sandbox:\n  driver: acme\n  acme:\n    region: us\n    replicas: 3\n    warm: true\n")
    section = config.sandbox.sections["acme"]
    assert type(section).__name__ == "AcmeConfig"
    assert (section.region, section.replicas, section.warm, section.image) == ("us", 3, True, None)
    assert section.token == Credential.named("ACME_TOKEN")
    assert config.sandbox.section("acme", type(section)) is section


def test_unknown_key_in_a_third_party_section_has_its_line_and_a_did_you_mean(acme: object) -> None:
    text = "# app\nsandbox:\n  driver: acme\n  acme:\n    region: us\n    replicaz: 2\n"
    [(code, key, line, message)] = problems(text)
    assert (code, key, line) == (UNKNOWN_CONFIG_KEY, "sandbox.acme.replicaz", 6)
    assert message == (
        'unknown key; the keys here are: region, replicas, warm, token, image, zone; did you mean "replicas"?'
    )


@pytest.mark.parametrize(
    ("yaml", "key", "line", "message"),
    [
        ("    replicas: two\n", "sandbox.acme.replicas", 5, 'expected a whole number, not "two"'),
        ("    replicas: true\n", "sandbox.acme.replicas", 5, "expected a whole number, not true"),
        ("    warm: 'no'\n", "sandbox.acme.warm", 5, 'expected true or false, not "no"'),
        ("    region: [eu, us]\n", "sandbox.acme.region", 5, "expected text, not a list"),
        ("    token: secret:1BAD\n", "sandbox.acme.token", 5, "is not a secret reference"),
        ("    zone: 7\n", "sandbox.acme.zone", 5, "must be in range(1, 4)"),  # the class's own validator
    ],
)
def test_wrong_type_in_a_third_party_section_has_its_line(
    acme: object, yaml: str, key: str, line: int, message: str
) -> None:
    [(code, got_key, got_line, got_message)] = problems("sandbox:\n  driver: acme\n  acme:\n    image: x\n" + yaml)
    assert (code, got_key, got_line) == (INVALID_OPTION, key, line)
    assert message in got_message


def test_a_third_party_section_that_is_not_a_mapping(acme: object) -> None:
    [(code, key, line, message)] = problems("sandbox:\n  driver: acme\n  acme: [eu]\n")
    assert (code, key, line) == (INVALID_OPTION, "sandbox.acme", 3)
    assert message.startswith("expected a mapping with the keys region, replicas, warm, token, image, zone")


def test_the_section_of_a_driver_not_configured_is_not_imported(acme: object) -> None:
    config = load_config_text("sandbox:\n  acme:\n    region: us\n    replicaz: 2\n")
    assert MODULE not in sys.modules  # core imports only the configured driver
    assert config.sandbox.sections["acme"] == {"region": "us", "replicaz": 2}
    with pytest.raises(ConfigError) as caught:  # checked when the driver is used
        config.sandbox.section("acme", load_acme_class())
    assert caught.value.problems[0].key == "sandbox.acme.replicaz"


def load_acme_class() -> type:
    import importlib

    return importlib.import_module(MODULE).AcmeConfig  # type: ignore[no-any-return]


def test_a_section_no_installed_driver_declares_is_kept_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mainsdk"):
        config = load_config_text("sandbox:\n  nimbus:\n    region: us\n")
    assert config.sandbox.sections["nimbus"] == {"region": "us"}
    assert "sandbox.nimbus is not checked: no installed driver declares that section" in caplog.text


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ("sandbox:\n  limts: {timeout: 1s}\n", "sandbox.limts", 'did you mean "limits"?'),
        ("sandbox:\n  zzz: 1\n", "sandbox.zzz", "if it is a driver's section, install that driver"),
    ],
)
def test_a_misspelt_or_scalar_key_is_still_unknown(text: str, key: str, message: str) -> None:
    [(code, got_key, line, got_message)] = problems(text)
    assert (code, got_key, line) == (UNKNOWN_CONFIG_KEY, key, 2)
    assert message in got_message


def test_core_resolves_a_sections_secret_through_the_apps_resolver(
    acme: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACME_VAULT_TOKEN", "from-the-environment")  # must not be used: the app's resolver is
    asked: list[str] = []

    def vault(name: str) -> str | None:
        asked.append(name)
        return {"ACME_VAULT_TOKEN": "tok-9f8e7d"}.get(name)

    config = load_config_text("sandbox:\n  driver: acme\n  acme:\n    token: secret:ACME_VAULT_TOKEN\n")
    Sandbox(SandboxDeps(config=config, secret=vault, load_entrypoints=False))
    import acme_sandbox_driver  # type: ignore[import-not-found]

    [built] = acme_sandbox_driver.BUILT
    token = built.sandbox.section("acme", acme_sandbox_driver.AcmeConfig).token
    assert asked == ["ACME_VAULT_TOKEN"]
    assert (token.value, token.resolved, token.setting) == ("tok-9f8e7d", True, "sandbox.acme.token")
    assert "tok-9f8e7d" not in repr(built) and "tok-9f8e7d" not in str(token)
    assert config.sandbox.sections["acme"].token.value is None  # the app's config object holds no value


def test_a_missing_secret_is_named_never_its_value(acme: object) -> None:
    config = load_config_text("sandbox:\n  driver: acme\n")
    driver = load_driver("acme", config, secret=lambda name: None)
    token = driver.config.sandbox.section("acme", type(driver.config.sandbox.sections["acme"])).token  # type: ignore[attr-defined]
    assert token.value is None
    assert token.missing() == "sandbox.acme.token names the secret ACME_TOKEN, which has no value; set ACME_TOKEN"


def test_a_required_field_of_a_section_is_named() -> None:
    import attrs
    from mainsdk.config import structure_section

    @attrs.frozen
    class Needs:
        project: str

    with pytest.raises(ConfigError) as caught:
        structure_section("needs", {}, Needs)
    [problem] = caught.value.problems
    assert (problem.code, problem.key, problem.message) == (
        INVALID_OPTION,
        "sandbox.needs.project",
        "required: set project (it has no default)",
    )
