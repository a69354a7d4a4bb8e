"""The checks a call passes before anything runs, on plain values: no driver needed."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from mainsdk import errors
from mainsdk.arguments import code as check_code
from mainsdk.arguments import relative_path as check_relative_path
from mainsdk.config import AppConfig, load_config_text
from mainsdk.driver import Capabilities
from mainsdk.errors import SandboxError
from mainsdk.hosts import host_covered
from mainsdk.preflight import check_driver_allowed, check_language, plan_run
from mainsdk.secrets import secret

CONFIG = load_config_text(
    """
sandbox:
  driver: local
  limits: { timeout: 30s, memory: 512MB, output: 1MB, files: 1KB, max-cost: $0.05 }
  network: [pypi.org, "*.example.com"]
  secrets: [OPENWEATHER_KEY, EMPTY_KEY]
network:
  allow: [pypi.org, "*.example.com"]
"""
)
CAPS = Capabilities(isolation="namespace", network=True, wildcard_hosts=True, price_per_second=Decimal("0.001"))
SECRETS = {"OPENWEATHER_KEY": "k-123"}


def plan(config: AppConfig = CONFIG, caps: Capabilities = CAPS, **options: Any) -> Any:
    allow = config.network_allow
    call: dict[str, Any] = {"files": None, "network": (), "env": None, "limits": None, "max_cost": None}
    call.update(options)
    return plan_run(
        config=config,
        caps=caps,
        driver_id="local",
        network_allow=lambda h: host_covered(h, allow),
        resolver=SECRETS.get,
        **call,
    )


def code_of(**options: Any) -> str:
    with pytest.raises(SandboxError) as caught:
        plan(**options)
    return caught.value.code


def test_defaults_come_from_the_config() -> None:
    result = plan()
    assert (result.limits.timeout, result.limits.memory, result.limits.output) == (30.0, 512 * 2**20, 2**20)
    assert result.hosts == () and result.env == {} and result.max_cost == Decimal("0.05")


def test_a_call_may_lower_a_limit_never_raise_it() -> None:
    assert plan(limits={"timeout": "1s", "memory": "64MB"}).limits.timeout == 1.0
    with pytest.raises(SandboxError) as caught:
        plan(limits={"timeout": "31s"})
    assert caught.value.code == errors.INVALID_OPTION
    assert "limits.timeout" in caught.value.message and "sandbox.limits.timeout" in caught.value.message
    assert code_of(limits={"timeout": "soon"}) == errors.INVALID_OPTION
    assert code_of(limits={"cpu": 2}) == errors.INVALID_OPTION


def test_hosts_must_be_in_both_lists() -> None:
    assert plan(network=["pypi.org", "api.example.com"]).hosts == ("pypi.org", "api.example.com")
    with pytest.raises(SandboxError) as caught:
        plan(network=["evil.com"])
    assert caught.value.code == errors.HOST_NOT_ALLOWED and "evil.com" in caught.value.message
    only_sandbox = load_config_text("sandbox: { network: [pypi.org] }\nnetwork: { allow: [] }")
    with pytest.raises(SandboxError) as missing:
        plan(config=only_sandbox, network=["pypi.org"])
    assert "network.allow" in missing.value.message and "sandbox.network" not in missing.value.message.split(";")[0]
    assert code_of(network=["https://pypi.org/simple"]) == errors.INVALID_OPTION


def test_a_driver_without_network_refuses_hosts() -> None:
    caps = Capabilities(isolation="namespace", network=False)
    assert code_of(caps=caps, network=["pypi.org"]) == errors.HOST_NOT_ALLOWED


def test_secrets_only_when_listed_and_set() -> None:
    result = plan(env={"WEATHER_KEY": secret("OPENWEATHER_KEY"), "MODE": "fast"})
    assert result.env == {"WEATHER_KEY": "k-123", "MODE": "fast"}
    assert result.env_names == ("MODE", "WEATHER_KEY") and result.secret_values == (b"k-123",)
    assert "k-123" not in repr(result)
    with pytest.raises(SandboxError) as caught:
        plan(env={"K": secret("AWS_SECRET")})
    assert caught.value.code == errors.SECRET_NOT_ALLOWED and "AWS_SECRET" in caught.value.message
    assert code_of(env={"K": secret("EMPTY_KEY")}) == errors.SECRET_NOT_ALLOWED
    assert code_of(env={"1BAD": "x"}) == errors.INVALID_OPTION


def test_files_stay_in_the_work_folder_and_under_the_limit() -> None:
    assert plan(files={"data/a.csv": "1,2"}).files == {"data/a.csv": b"1,2"}
    for name in ["../x", "/etc/passwd", "a/../../b", "a\0b", "", "a//b", "./a"]:
        assert code_of(files={name: "x"}) == errors.INVALID_OPTION, name
    assert code_of(files={"big": b"x" * 2000}) == errors.INVALID_OPTION


def test_worst_case_cost_is_checked_before_the_run() -> None:
    # $0.001/s x 30s = $0.03 fits $0.05; a call's $0.01 ceiling does not.
    assert plan().price == Decimal("0.001")
    with pytest.raises(SandboxError) as caught:
        plan(max_cost="$0.01")
    assert caught.value.code == errors.COST and caught.value.status == 402
    assert plan(max_cost="$0.01", limits={"timeout": "5s"}).max_cost == Decimal("0.01")
    assert code_of(max_cost="$1") == errors.INVALID_OPTION  # above the config's max-cost


def test_code_language_and_paths() -> None:
    assert code_of_call(check_code, "  ") == errors.INVALID_OPTION
    assert code_of_call(check_code, 42) == errors.INVALID_OPTION
    assert code_of_call(check_language, "ruby", CAPS, "local") == errors.INVALID_OPTION
    assert check_relative_path("a/b.txt", "files") == "a/b.txt"


def test_a_development_driver_is_refused_in_production() -> None:
    caps = Capabilities(isolation="namespace", production=False)
    check_driver_allowed("local", caps, "development")
    assert code_of_call(check_driver_allowed, "local", caps, "production") == errors.LOCAL_IN_PRODUCTION


def code_of_call(function: Any, *args: Any) -> str:
    with pytest.raises(SandboxError) as caught:
        function(*args)
    return caught.value.code
