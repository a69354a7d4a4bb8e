"""Secrets at the egress on E2B (issue 27): the create's ``network.rules``, and the value never in the sandbox.

E2B's egress proxy, outside the VM, sets each header of a rule on the sandbox's requests to its domain
(e2b-dev/infra spec/openapi.yml ``SandboxNetworkRule``/``SandboxNetworkTransform``; the SDK's
``e2b/sandbox/sandbox_api.py`` ``SandboxNetworkOpts.rules``). Replayed from ``cassettes/egress/``, authored by
``authoring/egress.py`` from this module's own scenarios against ``fake_e2b.py``, which checks a create's
network as E2B's API does (``handlers/sandbox_create.go`` ``validateNetworkConfig``). The header's value is in
no cassette: it is ``[scrubbed:OPENWEATHER_KEY]``, and replay scrubs each request the same way before matching,
so a value sent anywhere but the rule's header (the command's environment, its line) fails the match.
"""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import socket
from pathlib import Path
from typing import Any

import pytest
from e2b_replay import KEY, key, provider
from mainsdk import Sandbox, SandboxDeps, SandboxError, secret
from mainsdk.audit import AuditEvent
from mainsdk.config import load_config_text
from mainsdk.driver import BoxSpec, EgressHeader, EgressRule, RunLimits
from mainsdk.errors import INVALID_OPTION
from mainsdk_conformance.replay import ReplayServer
from mainsdk_conformance.suite._helpers import CLIENTS, client_lines, clients_code
from mainsdk_e2b.driver import (
    E2B_CA_BUNDLE,
    MAX_HEADER_VALUE_BYTES,
    TRUST_VARIABLES,
    e2b_network_policy,
    e2b_network_rules,
)
from mainsdk_e2b.egress import valid_rule_domain
from stand_in import stand_in

from mainsdk_e2b import e2b_sandbox_driver

CASSETTES = Path(__file__).parent / "cassettes" / "egress"
HOST = "api.openweathermap.org"
SECRET = "OPENWEATHER_KEY"
VALUE = "owm-7d1e0c5a9b-authoring"  # made up: the key the app holds, which the sandbox must never see
NAMED = {SECRET: VALUE}
MARK = f"[scrubbed:{SECRET}]"
CONFIG = (
    "sandbox:\n"
    "  driver: e2b\n"
    "  limits: {timeout: 20s}\n"
    f"  network: [{HOST}]\n"
    f"  secrets: [{SECRET}]\n"
    f"network: {{allow: [{HOST}]}}\n"
)
# The seed's weather example: the code calls the API as if it were open, with every client the template has, and
# says what its environment holds. E2B's proxy ends TLS for the host with a CA envd appends to the system bundle
# only (e2b-dev/infra packages/envd/internal/host/cacerts.go): each client must be pointed at that bundle.
URL = f"https://{HOST}/data/2.5/weather?q=Paris&units=metric"
# Its second line: the value of each trust variable it was given (the command itself is recorded by its hash).
WEATHER = (
    "import os\nprint(sorted(os.environ))\n"
    f"print(sorted({{n: os.environ.get(n) for n in {list(TRUST_VARIABLES)!r}}}.items()))\n" + clients_code(URL)
)
# E2B's base template (e2b-dev/E2B templates/base/e2b.Dockerfile: FROM python:3.11.6, node 20.9.0, curl) installs
# no httpx and no requests of its own: requests is pip's vendored copy there (certifi's store, as pip uses it);
# pip is 23.2.1, with the same store.
ABSENT = {"httpx"}


def assert_every_client_reached(stdout: str) -> None:
    """Each client of the template got the API's answer for a valid key; the absent ones said so."""
    said = client_lines(stdout)
    assert set(said) == set(CLIENTS), stdout
    for client, line in said.items():
        if client in ABSENT:
            assert line == "absent", (client, line)
        elif client == "pip":  # pip 23.2.1 (the image's), from the stand-in's index through the proxy
            assert line == "reached weather_stub-1.0-py3-none-any.whl", line
        else:
            status, _, body = line.partition(" ")
            assert status == "200" and json.loads(body)["name"] == "Paris", (client, line)


def _sandbox(server: ReplayServer, events: list[AuditEvent], key: str = KEY) -> Sandbox:
    driver = e2b_sandbox_driver(api_key=key, api_url=server.url("api"), sandbox_url=server.url("sandbox"))
    config = load_config_text(CONFIG)
    return Sandbox(SandboxDeps(config=config, driver=driver, secret=NAMED.get, log=events.append))


def the_weather_example(server: ReplayServer, key: str = KEY) -> dict[str, Any]:
    """One run of the weather code with the key added at the egress for the API's host alone."""
    events: list[AuditEvent] = []
    sandbox = _sandbox(server, events, key)
    try:
        result = sandbox.run(WEATHER, network=[HOST], egress={HOST: {"headers": {"X-Api-Key": secret(SECRET)}}})
    finally:
        sandbox.close()
    return {"stdout": result.stdout, "stderr": result.stderr, "exit": result.exit_code, "events": events}


def a_session_with_egress(server: ReplayServer, key: str = KEY) -> dict[str, Any]:
    """A session opened with the key at the egress: its one create carries the rule, for every command after."""
    events: list[AuditEvent] = []
    sandbox = _sandbox(server, events, key)
    try:
        with sandbox.create(network=[HOST], egress={HOST: {"headers": {"X-Api-Key": secret(SECRET)}}}) as session:
            outputs = [session.run("python3", ["-c", WEATHER]).stdout, session.run("echo", ["second"]).stdout]
    finally:
        sandbox.close()
    return {"outputs": outputs, "events": events}


# A JavaScript cell's fetch: node in the cell kernel, which started with the box's trust variables.
JS_FETCH = (
    f"const answer = await fetch({URL!r});\nconsole.log('node', answer.status, JSON.parse(await answer.text()).name);"
)


def cells_with_egress(server: ReplayServer, key: str = KEY) -> dict[str, Any]:
    """Cells of a session with the key at the egress: a Python cell with each client, a JavaScript cell's fetch."""
    events: list[AuditEvent] = []
    sandbox = _sandbox(server, events, key)
    try:
        with sandbox.create(network=[HOST], egress={HOST: {"headers": {"X-Api-Key": secret(SECRET)}}}) as session:
            python = session.run_code(clients_code(URL, ("urllib", "requests", "curl", "node")))
            javascript = session.run_code(JS_FETCH, language="javascript")
    finally:
        sandbox.close()
    return {"python": python.stdout, "javascript": javascript.stdout, "errors": [python.error, javascript.error]}


def a_team_without_network_rules(server: ReplayServer, key: str = KEY) -> dict[str, Any]:
    """The same run for a team E2B has not given network transform rules: the create's 400."""
    events: list[AuditEvent] = []
    sandbox = _sandbox(server, events, key)
    try:
        with pytest.raises(SandboxError) as caught:
            sandbox.run("print(1)", network=[HOST], egress={HOST: {"headers": {"X-Api-Key": secret(SECRET)}}})
    finally:
        sandbox.close()
    return {"error": caught.value, "events": events}


def test_the_weather_example_sends_the_key_to_e2bs_egress_and_never_into_the_sandbox(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, the SDK's and httpx's included
    with provider("the_weather_example", folder=CASSETTES, named=NAMED) as server:
        seen = the_weather_example(server, key())
    assert server.problems(final=True) == []  # every request as recorded: the value in the rule, nowhere else
    assert not [r for r in caplog.records if VALUE in r.getMessage()]  # no log line holds it
    names = seen["stdout"].splitlines()[0]
    assert seen["exit"] == 0, seen["stderr"]
    assert_every_client_reached(seen["stdout"])  # through the stand-in's egress proxy, which ended TLS
    # What the code's environment holds (python's own LC_CTYPE coercion included): no key, no proxy setting, and
    # every client pointed at the bundle E2B adds its CA to.
    assert set(json.loads(names.replace("'", '"'))) == {"HOME", "LC_CTYPE", "PATH", *TRUST_VARIABLES}
    assert ast.literal_eval(seen["stdout"].splitlines()[1]) == sorted((n, E2B_CA_BUNDLE) for n in TRUST_VARIABLES)
    assert SECRET not in seen["stdout"] and VALUE not in seen["stdout"] + seen["stderr"]
    [event] = [e for e in seen["events"] if e.kind == "run"]
    assert event.to_dict()["egress"] == [{"host": HOST, "header": "X-Api-Key", "secret": SECRET}]
    assert event.network_policy == {"allow_out": [HOST], "deny_out": ["0.0.0.0/0"]}  # audited without the rules
    assert all(VALUE not in json.dumps(e.to_dict(), default=str) for e in seen["events"])
    # The cassette: the value in no request or answer; its mark once, in the create's rule for the host.
    text = (CASSETTES / "the_weather_example.json").read_text()
    assert VALUE not in text and text.count(MARK) == 1
    create = json.loads(text)["interactions"][0]["request"]
    assert create["path"] == "/v2/sandboxes"
    network = create["body"]["json"]["network"]
    assert network == {
        "allowOut": [HOST],
        "denyOut": ["0.0.0.0/0"],
        "rules": {HOST: [{"transform": {"headers": {"X-Api-Key": MARK}}}]},
    }


def test_a_session_gets_the_rule_once_at_its_create_and_every_command_the_header() -> None:
    with provider("a_session_with_egress", folder=CASSETTES, named=NAMED) as server:
        seen = a_session_with_egress(server, key())
    assert server.problems(final=True) == []  # one create with the rule; each Start as recorded, without the value
    assert_every_client_reached(seen["outputs"][0])
    assert seen["outputs"][1] == "second\n"
    commands = [e for e in seen["events"] if e.kind == "command"]
    assert len(commands) == 2 and all(e.egress == ((HOST, "X-Api-Key", SECRET),) for e in commands)
    text = (CASSETTES / "a_session_with_egress.json").read_text()
    assert VALUE not in text and text.count(MARK) == 1
    assert [i["request"]["path"] for i in json.loads(text)["interactions"]].count("/v2/sandboxes") == 1


def test_cells_of_a_session_with_egress_trust_e2bs_proxy_python_and_javascript_alike() -> None:
    with provider("cells_with_egress", folder=CASSETTES, named=NAMED) as server:
        seen = cells_with_egress(server, key())
    assert server.problems(final=True) == []  # the kernel's start and each cell as recorded, without the value
    assert seen["errors"] == [None, None]
    said = client_lines(seen["python"])
    assert set(said) == {"urllib", "requests", "curl", "node"}, seen["python"]
    assert all(line.startswith("200 ") and json.loads(line[4:])["name"] == "Paris" for line in said.values()), said
    assert seen["javascript"] == "node 200 Paris\n"
    text = (CASSETTES / "cells_with_egress.json").read_text()
    assert VALUE not in text and text.count(MARK) == 1


def test_a_team_without_e2bs_network_rules_is_0001_saying_so_and_nothing_runs() -> None:
    with provider("a_team_without_network_rules", folder=CASSETTES, named=NAMED) as server:
        seen = a_team_without_network_rules(server, key())
    assert server.problems(final=True) == []  # the create alone: a 400 made nothing, so no orphan is looked for
    error: SandboxError = seen["error"]
    assert (error.code, error.status, error.retryable, error.ran) == (INVALID_OPTION, 400, False, False)
    assert "Network transform rules are not available for your team." in error.message
    assert "network transform rules must be enabled for your E2B team, or drop egress" in error.message
    assert VALUE not in error.message and VALUE not in repr(error)


def _refused(egress: dict[str, Any], secrets: dict[str, str], hosts: list[str]) -> SandboxError:
    """Run with ``egress`` against a loopback port that refuses: a 0001 proves no request was sent."""
    refusing = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    refusing.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{refusing.getsockname()[1]}"
    listed = ", ".join(hosts)
    config = load_config_text(
        f"sandbox: {{driver: e2b, limits: {{timeout: 10s}}, network: [{listed}], secrets: [{', '.join(secrets)}]}}\n"
        f"network: {{allow: [{listed}]}}\n"
    )
    driver = e2b_sandbox_driver(api_key=KEY, api_url=url, sandbox_url=url)
    sandbox = Sandbox(SandboxDeps(config=config, driver=driver, secret=secrets.get))
    try:
        with pytest.raises(SandboxError) as caught:
            sandbox.run("print(1)", network=hosts, egress=egress)
    finally:
        sandbox.close()
        refusing.close()
    return caught.value


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("a long header name", "E2B takes header names of at most 64 characters"),
        ("a long value", f"longer than the {MAX_HEADER_VALUE_BYTES} bytes E2B takes"),
        ("an e2b placeholder", "read as a placeholder for another credential"),
    ],
)
def test_what_e2bs_api_would_refuse_is_0001_naming_it_before_any_request(case: str, said: str) -> None:
    value = {"a long value": "v" * (MAX_HEADER_VALUE_BYTES + 1), "an e2b placeholder": "x${e2b.secrets.other}"}.get(
        case, VALUE
    )
    hosts = ["h0.example.com"]
    name = "X-" + "L" * 63 if case == "a long header name" else "X-Api-Key"
    egress = {host: {"headers": {name: secret(SECRET)}} for host in hosts}
    error = _refused(egress, {SECRET: value}, hosts)
    assert (error.code, error.ran) == (INVALID_OPTION, False), error.message  # not 0006: nothing was sent
    assert said in error.message
    assert value not in error.message and VALUE not in error.message
    assert f"egress['{hosts[0]}']" in error.message
    if case in ("a long value", "an e2b placeholder"):
        assert repr(SECRET) in error.message


def test_the_rules_set_each_hosts_headers_in_one_transform() -> None:
    rules = (
        EgressRule("a.example.com", (EgressHeader("X-Api-Key", "K", "v1", "v1"),)),
        EgressRule(
            "b.example.com",
            (EgressHeader("Authorization", "T", "Bearer v2", "v2"), EgressHeader("X-B", "K", "v1", "v1")),
        ),
    )
    assert e2b_network_rules(rules) == {
        "a.example.com": [{"transform": {"headers": {"X-Api-Key": "v1"}}}],
        "b.example.com": [{"transform": {"headers": {"Authorization": "Bearer v2", "X-B": "v1"}}}],
    }
    caps = e2b_sandbox_driver(api_key=KEY).mainsdk_driver_capabilities()
    assert caps.egress_headers is True


def _create_with_rules(hosts: list[str], **state: Any) -> SandboxError | None:
    """Start (and stop) a box with an egress header for each of ``hosts`` against the stand-in set to ``state``."""
    limits = RunLimits(timeout=10.0, memory=0, output=0, files=1 << 20, disk=0)
    rules = tuple(EgressRule(host, (EgressHeader("X-Api-Key", SECRET, VALUE, VALUE),)) for host in hosts)
    spec = BoxSpec(
        id="run_0123456789abcdef", limits=limits, tenant="default", network_policy=e2b_network_policy(hosts),
        egress=rules,
    )  # fmt: skip
    with stand_in(**state) as (api, url, _state):
        driver = e2b_sandbox_driver(api_key=KEY, api_url=api, sandbox_url=url)

        async def scenario() -> None:
            await driver.mainsdk_driver_stop(await driver.mainsdk_driver_start(spec))

        try:
            asyncio.run(scenario())
        except SandboxError as error:
            return error
    return None


def test_a_team_whose_limit_is_higher_gets_its_eleven_rule_domains() -> None:
    """Release 2026.30 holds a team to its max-network-rule-domains flag (e2b-dev/runtime sandbox_create.go):
    the driver refuses no count itself, the stand-in at that release with a team limit of 12 takes 11."""
    hosts = [f"h{n}.example.com" for n in range(11)]
    assert _create_with_rules(hosts, max_rule_domains=12) is None
    refused = _create_with_rules(hosts)  # the flag's default, 10: the server's 400, explained
    assert refused is not None and (refused.code, refused.ran) == (INVALID_OPTION, False), refused
    assert "Network rules can have at most 10 domains" in refused.message
    assert "max-network-rule-domains" in refused.message and VALUE not in refused.message
    assert _create_with_rules(hosts[:10]) is None  # the remedy followed: fewer hosts


def test_a_wildcard_rule_domain_is_sent_and_an_older_server_s_refusal_names_the_release() -> None:
    assert _create_with_rules(["*.example.com"]) is None  # 2026.30 takes it (IsValidWildcardDomainPattern)
    refused = _create_with_rules(["*.example.com"], release=(2026, 29))  # DNS names only (govalidator)
    assert refused is not None and refused.code == INVALID_OPTION, refused
    assert "is not a valid domain name" in refused.message and "API release 2026.30" in refused.message
    assert _create_with_rules(["api.example.com"], release=(2026, 29)) is None  # the remedy followed: each host


@pytest.mark.parametrize(
    ("domain", "valid"),
    [
        ("api.example.com", True),
        ("*.github.com", True),
        ("*.com", True),
        ("*.GITHUB.COM", True),
        ("*", False),
        ("*.", False),
        ("*.*.com", False),
        ("api*.com", False),
        ("github.*", False),
        ("*.github.com.", False),
    ],
)
def test_the_driver_refuses_beforehand_only_domains_no_release_takes(domain: str, valid: bool) -> None:
    # sandbox-network's TestIsValidWildcardDomainPattern cases (e2b-dev/runtime), and a plain DNS name.
    assert valid_rule_domain(domain) is valid
