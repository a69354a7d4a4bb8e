"""``egress``: headers whose values are secrets, checked before anything runs; the driver gets them, nothing shows."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from mainsdk import errors
from mainsdk.audit import AuditEvent
from mainsdk.config import load_config_text
from mainsdk.driver import BoxSpec, Capabilities, RunLimits
from mainsdk.engine import AsyncSandbox, SandboxDeps
from mainsdk.errors import ConfigError, SandboxError
from mainsdk.hosts import host_covered
from mainsdk.preflight import plan_run
from mainsdk.secrets import secret
from memory_driver import CAPABILITIES as MEMORY_CAPS
from memory_driver import MemoryDriver, script

CONFIG = load_config_text(
    """
sandbox:
  network: [api.openweathermap.org, other.example, "*.example.com"]
  secrets: [OPENWEATHER_KEY, GITHUB_TOKEN, EMPTY_KEY, BAD_KEY]
network:
  allow: [api.openweathermap.org, other.example, "*.example.com"]
"""
)
CAPS = Capabilities(isolation="namespace", network=True, wildcard_hosts=True, egress_headers=True)
KEY = "owm-secret-value-123"
SECRETS = {"OPENWEATHER_KEY": KEY, "GITHUB_TOKEN": "ghp_abc", "BAD_KEY": "a\r\nX-Evil: 1", "NOT_LISTED": "x"}
WEATHER = {"api.openweathermap.org": {"headers": {"X-Api-Key": secret("OPENWEATHER_KEY")}}}


def plan(caps: Capabilities = CAPS, network: Any = ("api.openweathermap.org",), **egress: Any) -> Any:
    return plan_run(
        config=CONFIG,
        caps=caps,
        driver_id="local",
        network_allow=lambda h: host_covered(h, CONFIG.network_allow),
        resolver=SECRETS.get,
        files=None,
        network=network,
        env=None,
        limits=None,
        max_cost=None,
        egress_rules=egress.get("egress", WEATHER),
    )


def refused(**options: Any) -> SandboxError:
    with pytest.raises(SandboxError) as caught:
        plan(**options)
    return caught.value


def test_the_seeds_weather_example_resolves_to_one_rule_whose_value_no_repr_shows() -> None:
    result = plan()
    (rule,) = result.egress
    assert rule.host == "api.openweathermap.org"
    assert [(h.name, h.secret, h.value) for h in rule.headers] == [("X-Api-Key", "OPENWEATHER_KEY", KEY)]
    assert KEY.encode() in result.secret_values  # the output is redacted for it, as for an env secret
    spec = BoxSpec(id="b", limits=result.limits, egress=result.egress)
    for shown in (repr(result), repr(spec), repr(rule), str(rule.headers[0]), repr(result.egress)):
        assert KEY not in shown
    assert "X-Api-Key" in str(rule.headers[0])


def test_a_prefix_goes_before_the_value_and_both_are_redacted() -> None:
    result = plan(
        network=("api.example.com",),
        egress={"api.example.com": {"headers": {"Authorization": secret("GITHUB_TOKEN", prefix="Bearer ")}}},
    )
    assert result.egress[0].headers[0].value == "Bearer ghp_abc"
    assert {b"ghp_abc", b"Bearer ghp_abc"} <= set(result.secret_values)  # a wildcard network host covers it


def test_a_prefix_applies_to_an_env_secret_too() -> None:
    result = plan_run(
        config=CONFIG,
        caps=CAPS,
        driver_id="local",
        network_allow=lambda h: True,
        resolver=SECRETS.get,
        files=None,
        network=(),
        env={"AUTH": secret("GITHUB_TOKEN", prefix="token ")},
        limits=None,
        max_cost=None,
    )
    assert result.env == {"AUTH": "token ghp_abc"} and repr(secret("G", prefix="x ")) == "secret('G', prefix='x ')"
    with pytest.raises(SandboxError) as caught:
        secret("G", prefix="a\nb")
    assert caught.value.code == errors.INVALID_OPTION and "prefix" in str(caught.value)


def test_a_host_not_in_the_runs_network_is_0005_naming_it() -> None:
    exc = refused(network=("other.example",))
    assert exc.code == errors.HOST_NOT_ALLOWED and "api.openweathermap.org" in str(exc) and "network" in str(exc)


def test_a_secret_not_under_sandbox_secrets_is_0009_naming_it_and_the_header() -> None:
    exc = refused(egress={"api.openweathermap.org": {"headers": {"X-Api-Key": secret("NOT_LISTED")}}})
    assert exc.code == errors.SECRET_NOT_ALLOWED and "NOT_LISTED" in str(exc) and "X-Api-Key" in str(exc)
    empty = refused(egress={"api.openweathermap.org": {"headers": {"X-Api-Key": secret("EMPTY_KEY")}}})
    assert empty.code == errors.SECRET_NOT_ALLOWED and "EMPTY_KEY" in str(empty)


def test_a_driver_without_the_capability_refuses_with_0001_naming_it() -> None:
    exc = refused(caps=attrs.evolve(CAPS, egress_headers=False))
    assert exc.code == errors.INVALID_OPTION and "'local' driver" in str(exc) and "egress_headers" in str(exc)
    assert plan(caps=attrs.evolve(CAPS, egress_headers=False), egress=None).egress == ()  # no egress: fine


@pytest.mark.parametrize(
    ("egress", "says"),
    [
        ("api.openweathermap.org", "must be a mapping"),
        ({"*.example.com": {"headers": {"X-K": secret("GITHUB_TOKEN")}}}, "not a wildcard"),
        ({"1.2.3.4": {"headers": {"X-K": secret("GITHUB_TOKEN")}}}, "not an IP address"),
        ({"api.openweathermap.org": {"header": {}}}, "'headers'"),
        ({"api.openweathermap.org": {"headers": {}}}, "non-empty"),
        ({"api.openweathermap.org": {"headers": {"X-Api-Key": KEY}}}, "must be secret('NAME')"),
        ({"api.openweathermap.org": {"headers": {"Bad Name": secret("GITHUB_TOKEN")}}}, "not an HTTP header name"),
        ({"api.openweathermap.org": {"headers": {"Host": secret("GITHUB_TOKEN")}}}, "cannot be set"),
        ({"api.openweathermap.org": {"headers": {"Content-Length": secret("GITHUB_TOKEN")}}}, "cannot be set"),
        (
            {"api.openweathermap.org": {"headers": {"X-A": secret("GITHUB_TOKEN"), "x-a": secret("GITHUB_TOKEN")}}},
            "twice",
        ),
    ],
)
def test_a_wrong_shape_is_0001_naming_what_is_wrong(egress: Any, says: str) -> None:
    exc = refused(egress=egress)
    assert exc.code == errors.INVALID_OPTION and says in str(exc)
    assert KEY not in str(exc)


def test_a_secret_a_header_cannot_carry_is_refused_without_showing_it() -> None:
    exc = refused(egress={"api.openweathermap.org": {"headers": {"X-Api-Key": secret("BAD_KEY")}}})
    assert exc.code == errors.INVALID_OPTION and "BAD_KEY" in str(exc) and "X-Evil" not in str(exc)


def test_the_audit_event_records_host_header_and_secret_name_never_the_value() -> None:
    result = plan()
    from mainsdk.egress import audit_entries

    event = AuditEvent(
        id="r", kind="run", driver="local", feature=None, tenant="t", egress=audit_entries(result.egress)
    )
    data = event.to_dict()
    assert data["egress"] == [{"host": "api.openweathermap.org", "header": "X-Api-Key", "secret": "OPENWEATHER_KEY"}]
    assert KEY not in repr(data) and KEY not in repr(event)


def test_a_spec_without_egress_has_none() -> None:
    limits = RunLimits(timeout=1.0, memory=2**26, output=1024, files=1024, disk=2**20)
    assert BoxSpec(id="b", limits=limits).egress == ()


# -- through the sandbox: the driver's start hook gets the rules, the audit event their names ---------------------


def _sandbox(caps: Capabilities, events: list[AuditEvent]) -> tuple[AsyncSandbox, MemoryDriver]:
    driver = MemoryDriver(capabilities=caps)
    config = load_config_text(
        "sandbox:\n  driver: memory\n  secrets: [OPENWEATHER_KEY]\n  network: [api.openweathermap.org]\n"
        "network:\n  allow: [api.openweathermap.org]\n"
    )
    deps = SandboxDeps(config=config, driver=driver, load_entrypoints=False, log=events.append, secret=SECRETS.get)
    return AsyncSandbox(deps), driver


async def test_a_run_and_a_session_hand_the_rules_to_the_driver_and_audit_names_only() -> None:
    events: list[AuditEvent] = []
    sandbox, driver = _sandbox(attrs.evolve(MEMORY_CAPS, egress_headers=True), events)
    result = await sandbox.run(script('out "ok"'), "bash", network=["api.openweathermap.org"], egress=WEATHER)
    assert result.ok
    (box,) = driver.boxes
    assert [(r.host, [(h.name, h.value) for h in r.headers]) for r in box.spec.egress] == [
        ("api.openweathermap.org", [("X-Api-Key", KEY)])
    ]
    assert all(KEY not in value for value in box.commands[0].env.values())  # not in the box's environment
    async with sandbox.create(network=["api.openweathermap.org"], egress=WEATHER) as session:
        await session.run("bash", ["-c", 'out "x"'])
        assert driver.boxes[1].spec.egress == box.spec.egress
    entry = {"host": "api.openweathermap.org", "header": "X-Api-Key", "secret": "OPENWEATHER_KEY"}
    ran = [e.to_dict() for e in events if e.kind in ("run", "command")]
    assert [e["egress"] for e in ran] == [[entry], [entry]]
    assert KEY not in json.dumps([e.to_dict() for e in events], default=str)


async def test_a_refused_egress_call_runs_nothing_and_is_audited_as_refused() -> None:
    events: list[AuditEvent] = []
    sandbox, driver = _sandbox(MEMORY_CAPS, events)  # the memory driver declares no egress_headers
    with pytest.raises(SandboxError) as caught:
        await sandbox.run(script('out "ok"'), "bash", network=["api.openweathermap.org"], egress=WEATHER)
    assert caught.value.code == errors.INVALID_OPTION and "'memory' driver" in str(caught.value)
    assert driver.boxes == [] and [e.kind for e in events] == ["refused"]


# -- sandbox.egress in main.yaml: the same rules for every run given the host --------------------------------------

CONFIGURED = load_config_text(
    """
sandbox:
  network: [api.openweathermap.org, other.example]
  secrets: [OPENWEATHER_KEY, GITHUB_TOKEN]
  egress:
    api.openweathermap.org: { headers: { X-Api-Key: "secret:OPENWEATHER_KEY" } }
    other.example: { headers: { Authorization: { secret: GITHUB_TOKEN, prefix: "Bearer " } } }
network:
  allow: [api.openweathermap.org, other.example]
"""
)


def plan_configured(config: Any = CONFIGURED, caps: Capabilities = CAPS, **call: Any) -> Any:
    options: dict[str, Any] = {"files": None, "network": (), "env": None, "limits": None, "max_cost": None}
    options.update(call)
    return plan_run(
        config=config,
        caps=caps,
        driver_id="local",
        network_allow=lambda h: host_covered(h, config.network_allow),
        resolver=SECRETS.get,
        **options,
    )


def test_a_configured_rule_applies_to_each_run_given_its_host_and_a_calls_rule_replaces_it() -> None:
    assert plan_configured().egress == ()  # no host given: no rule, and no driver needed
    (rule,) = plan_configured(network=["api.openweathermap.org"]).egress
    assert (rule.host, rule.headers[0].name, rule.headers[0].value) == ("api.openweathermap.org", "X-Api-Key", KEY)
    both = plan_configured(network=["api.openweathermap.org", "other.example"]).egress
    assert [(r.host, r.headers[0].value) for r in both] == [(rule.host, KEY), ("other.example", "Bearer ghp_abc")]
    mine = {"api.openweathermap.org": {"headers": {"X-Other": secret("GITHUB_TOKEN")}}}
    (replaced,) = plan_configured(network=["api.openweathermap.org"], egress_rules=mine).egress
    assert [(h.name, h.value) for h in replaced.headers] == [("X-Other", "ghp_abc")]


def test_a_configured_rule_on_a_driver_without_the_capability_refuses_the_runs_given_its_host() -> None:
    caps = attrs.evolve(CAPS, egress_headers=False)
    assert plan_configured(caps=caps, network=()).egress == ()
    with pytest.raises(SandboxError) as caught:
        plan_configured(caps=caps, network=["api.openweathermap.org"])
    assert caught.value.code == errors.INVALID_OPTION and "sandbox.egress" in str(caught.value)
    assert "api.openweathermap.org" in str(caught.value) and "'local' driver" in str(caught.value)


def test_a_configured_secret_not_under_sandbox_secrets_is_0009_naming_it() -> None:
    config = load_config_text(
        "sandbox:\n  network: [api.openweathermap.org]\n  secrets: []\n"
        "  egress: { api.openweathermap.org: { headers: { X-Api-Key: 'secret:OPENWEATHER_KEY' } } }\n"
        "network: { allow: [api.openweathermap.org] }\n"
    )
    with pytest.raises(SandboxError) as caught:
        plan_configured(config=config, network=["api.openweathermap.org"])
    assert caught.value.code == errors.SECRET_NOT_ALLOWED
    assert "sandbox.egress" in str(caught.value) and "OPENWEATHER_KEY" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("egress: { api.example.com: { headers: { X-Api-Key: 'the-value-itself' } } }", "never goes in main.yaml"),
        ("egress: [api.example.com]", "expected a mapping"),
        ("egress: { '*.example.com': { headers: { X-K: 'secret:K' } } }", "not a wildcard"),
        ("egress: { api.example.com: { headers: { Host: 'secret:K' } } }", "cannot be set"),
    ],
)
def test_a_wrong_sandbox_egress_is_refused_at_load_naming_the_key(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text("sandbox:\n  " + text + "\n")
    assert "sandbox.egress" in str(caught.value) and says in str(caught.value)
    assert "the-value-itself" not in str(caught.value)
