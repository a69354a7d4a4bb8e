"""The main.yaml checks: loader errors, MAIN-SANDBOX-0011 (with overlays) and MAIN-SANDBOX-0012, each with its line."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from mainsdk.config import CONFIG_ENV_VAR
from mainsdk.errors import INVALID_OPTION, LOCAL_IN_PRODUCTION, NETWORK_NOT_ALLOWED, UNKNOWN_CONFIG_KEY

from mainsdk_check import CannotCheck, run_check


@pytest.fixture(autouse=True)
def _no_config_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONFIG_ENV_VAR, raising=False)


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def found(folder: Path, env: str | None = None, config: str | None = None) -> list[tuple[str, str, int, int]]:
    result = run_check(env=env, config=config, cwd=folder)
    return [(f.code, f.path, f.line, f.column) for f in result.findings]


# --- MAIN-SANDBOX-0012 ------------------------------------------------------------------------------------------


def test_a_host_not_in_network_allow_is_reported_at_its_item(tmp_path: Path) -> None:
    write(
        tmp_path,
        "main.yaml",
        """\
        sandbox:
          driver: e2b
          network:
            - pypi.org
            - api.openai.com
        network:
          allow: [pypi.org]
        """,
    )
    result = run_check(cwd=tmp_path)
    [finding] = result.findings
    assert (finding.code, finding.path, finding.line, finding.column) == (NETWORK_NOT_ALLOWED, "main.yaml", 5, 7)
    assert '"api.openai.com"' in finding.message
    assert "network.allow" in finding.fix


def test_flow_style_hosts_get_their_own_columns(tmp_path: Path) -> None:
    write(tmp_path, "main.yaml", "sandbox:\n  network: [a.example.com, b.example.com]\n")
    assert found(tmp_path) == [(NETWORK_NOT_ALLOWED, "main.yaml", 2, 13), (NETWORK_NOT_ALLOWED, "main.yaml", 2, 28)]


@pytest.mark.parametrize(
    ("host", "allow", "covered"),
    [
        ("pypi.org", ["pypi.org"], True),
        ("PyPI.org", ["pypi.org"], True),
        ("files.pythonhosted.org", ["*.pythonhosted.org"], True),
        ("a.b.example.com", ["*.example.com"], True),
        ("example.com", ["*.example.com"], False),
        ("*.a.example.com", ["*.example.com"], True),
        ("*.example.com", ["*.example.com"], True),
        ("*.example.com", ["a.example.com"], False),
        ("pypi.org", [], False),
    ],
)
def test_hosts_are_covered_exactly_or_by_wildcard(tmp_path: Path, host: str, allow: list[str], covered: bool) -> None:
    allow_text = ", ".join(f'"{pattern}"' for pattern in allow)
    write(tmp_path, "main.yaml", f'sandbox:\n  network: ["{host}"]\nnetwork:\n  allow: [{allow_text}]\n')
    codes = [code for code, *_ in found(tmp_path)]
    assert codes == ([] if covered else [NETWORK_NOT_ALLOWED])


def test_an_invalid_host_is_an_invalid_option_not_also_a_missing_host(tmp_path: Path) -> None:
    write(tmp_path, "main.yaml", 'sandbox:\n  network: ["https://pypi.org/simple"]\nnetwork:\n  allow: [pypi.org]\n')
    assert [code for code, *_ in found(tmp_path)] == [INVALID_OPTION]


def test_network_is_checked_when_the_loader_refuses_the_file_for_another_reason(tmp_path: Path) -> None:
    write(tmp_path, "main.yaml", "sandbox:\n  drvier: e2b\n  network: [a.example.com]\nnetwork:\n  allow: [pypi.org]\n")
    assert found(tmp_path) == [
        (UNKNOWN_CONFIG_KEY, "main.yaml", 2, 3),
        (NETWORK_NOT_ALLOWED, "main.yaml", 3, 13),
    ]


# --- Loader errors ----------------------------------------------------------------------------------------------


def test_every_loader_error_is_reported_with_its_line(tmp_path: Path) -> None:
    write(
        tmp_path,
        "main.yaml",
        """\
        sandbox:
          driver: vercel-sandbox
          limits:
            timeout: forever
            memroy: 1GB
          secrets: [not-a-name]
        network:
          allow: [pypi.org]
        """,
    )
    result = run_check(cwd=tmp_path)
    assert [(f.code, f.line) for f in result.findings] == [
        (INVALID_OPTION, 4),
        (UNKNOWN_CONFIG_KEY, 5),
        (INVALID_OPTION, 6),
    ]
    assert result.findings[0].message.startswith("sandbox.limits.timeout: ")
    assert 'did you mean "memory"' in result.findings[1].message
    # The app would refuse this file at start: the check could not run on a working config, so 2, not 1.
    assert result.errors == ("main.yaml cannot be loaded: the app would refuse it at start (3 problems listed above)",)
    assert result.exit_status == 2


def test_typos_outside_sandbox_are_findings_with_their_lines_not_no_findings(tmp_path: Path) -> None:
    # Each went unnoticed: the run went on with defaults and the check said "No findings".
    write(
        tmp_path,
        "main.yaml",
        """\
        sandbx:
          driver: e2b
        permissions:
          procesess: [python3]
        network:
          alow: [pypi.org]
        """,
    )
    result = run_check(cwd=tmp_path)
    assert [(f.code, f.line, f.column) for f in result.findings] == [
        (UNKNOWN_CONFIG_KEY, 1, 1),
        (UNKNOWN_CONFIG_KEY, 4, 3),
        (UNKNOWN_CONFIG_KEY, 6, 3),
    ]
    messages = [f.message for f in result.findings]
    assert messages[0].startswith('sandbx: unknown key; did you mean "sandbox"?')
    assert messages[1].startswith("permissions.procesess: ") and 'did you mean "processes"' in messages[1]
    assert messages[2].startswith("network.alow: ") and 'did you mean "allow"' in messages[2]
    assert result.exit_status == 2


def test_localhost_in_sandbox_network_is_one_finding_at_its_item(tmp_path: Path) -> None:
    write(tmp_path, "main.yaml", "sandbox:\n  network: [pypi.org, localhost]\nnetwork:\n  allow: [pypi.org]\n")
    [(code, _path, line, column)] = found(tmp_path)  # not also 0012: it is refused, not missing from network.allow
    assert (code, line, column) == (INVALID_OPTION, 2, 23)


def test_a_yaml_syntax_error_is_an_invalid_option_at_its_line(tmp_path: Path) -> None:
    write(tmp_path, "main.yaml", "sandbox:\n  driver: e2b\n  network: [pypi.org\n")
    [(code, path, line, _)] = found(tmp_path)
    assert (code, path) == (INVALID_OPTION, "main.yaml")
    assert line >= 3


def test_a_clean_config_has_no_findings(tmp_path: Path) -> None:
    write(tmp_path, "main.yaml", "sandbox:\n  driver: e2b\n  network: [pypi.org]\nnetwork:\n  allow: [pypi.org]\n")
    result = run_check(env="prod", cwd=tmp_path)
    assert result.findings == ()
    assert result.exit_status == 0


# --- MAIN-SANDBOX-0011 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env", ["prod", "production", "PROD", " Production "])
def test_local_in_production_is_reported_at_the_driver_key(tmp_path: Path, env: str) -> None:
    write(tmp_path, "main.yaml", "# the app\nsandbox:\n  driver: local\n")
    assert found(tmp_path, env=env) == [(LOCAL_IN_PRODUCTION, "main.yaml", 3, 3)]


@pytest.mark.parametrize("env", [None, "dev", "development", "staging", "test"])
def test_local_outside_production_is_fine(tmp_path: Path, env: str | None) -> None:
    write(tmp_path, "main.yaml", "sandbox:\n  driver: local\n")
    assert found(tmp_path, env=env) == []


def test_a_sandbox_section_without_a_driver_is_local_by_default(tmp_path: Path) -> None:
    write(tmp_path, "main.yaml", "network:\n  allow: []\nsandbox:\n  limits: {timeout: 10s}\n")
    result = run_check(env="prod", cwd=tmp_path)
    [finding] = result.findings
    assert (finding.code, finding.line, finding.column) == (LOCAL_IN_PRODUCTION, 3, 1)
    assert "default" in finding.message


def test_a_config_without_a_sandbox_section_does_not_use_the_sandbox(tmp_path: Path) -> None:
    write(tmp_path, "main.yaml", "network:\n  allow: [pypi.org]\n")
    assert found(tmp_path, env="prod") == []


@pytest.mark.parametrize("overlay", ["main.prod.yaml", "main.production.yaml"])
def test_a_production_overlay_that_sets_local_is_reported_in_the_overlay(tmp_path: Path, overlay: str) -> None:
    write(tmp_path, "main.yaml", "sandbox:\n  driver: e2b\n")
    write(tmp_path, overlay, "# production\nsandbox:\n  driver: local\n")
    for env in ("prod", "production"):
        assert found(tmp_path, env=env) == [(LOCAL_IN_PRODUCTION, overlay, 3, 3)]
    assert found(tmp_path, env="staging") == []


def test_a_production_overlay_overrides_a_local_base(tmp_path: Path) -> None:
    write(tmp_path, "main.yaml", "sandbox:\n  driver: local\n")
    write(tmp_path, "main.prod.yaml", "sandbox:\n  driver: vercel-sandbox\n")
    assert found(tmp_path, env="prod") == []


def test_an_overlay_without_a_driver_keeps_the_base_driver(tmp_path: Path) -> None:
    write(tmp_path, "main.yaml", "sandbox:\n  driver: local\n")
    write(tmp_path, "main.prod.yaml", "sandbox:\n  limits: {timeout: 5s}\n")
    assert found(tmp_path, env="prod") == [(LOCAL_IN_PRODUCTION, "main.yaml", 2, 3)]


def test_overlay_errors_are_reported_in_the_overlay(tmp_path: Path) -> None:
    write(tmp_path, "main.yaml", "sandbox:\n  driver: e2b\n")
    write(tmp_path, "main.staging.yaml", "sandbox:\n  drivr: e2b\n")
    assert found(tmp_path, env="staging") == [(UNKNOWN_CONFIG_KEY, "main.staging.yaml", 2, 3)]
    assert found(tmp_path) == []  # without --env no overlay is read


def test_the_overlay_of_another_config_name_follows_its_stem(tmp_path: Path) -> None:
    write(tmp_path, "app.yaml", "sandbox:\n  driver: e2b\n")
    write(tmp_path, "app.prod.yaml", "sandbox:\n  driver: local\n")
    assert found(tmp_path, env="prod", config="app.yaml") == [(LOCAL_IN_PRODUCTION, "app.prod.yaml", 2, 3)]


# --- Which config -----------------------------------------------------------------------------------------------


def test_no_config_file_means_no_config_checks(tmp_path: Path) -> None:
    result = run_check(env="prod", cwd=tmp_path)
    assert result.config is None
    assert result.findings == ()


def test_the_config_can_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "other.yaml", "sandbox:\n  driver: local\n")
    monkeypatch.setenv(CONFIG_ENV_VAR, "other.yaml")
    assert found(tmp_path, env="prod") == [(LOCAL_IN_PRODUCTION, "other.yaml", 2, 3)]


def test_a_missing_config_file_cannot_be_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CannotCheck, match=re.escape("--config names nope.yaml")):
        run_check(config="nope.yaml", cwd=tmp_path)
    monkeypatch.setenv(CONFIG_ENV_VAR, "gone.yaml")
    with pytest.raises(CannotCheck, match=re.escape(f"{CONFIG_ENV_VAR} names gone.yaml")):
        run_check(cwd=tmp_path)
