"""Secrets at the egress on Vercel (issue 27): the create's ``networkPolicy`` carries the headers per host.

Vercel's firewall, outside the VM, adds or replaces each header on the sandbox's HTTPS requests to the host
(vercel-sandbox 0.10.0 ``NetworkPolicyRule(transform=[NetworkPolicyTransform(headers=...)])``, serialized by
``models._serialize_network_policy``; Vercel's changelog "Safely inject credentials in HTTP headers"), and the
API reads the policy back with header names only (``injectionRules[].headerNames``; github vercel/sandbox
``utils/network-policy.ts``). Replayed from ``cassettes/egress/``, authored with
``python mainsdk_vercel/tests/test_egress.py --author`` against ``conformance/simulator.py``, which holds the
policy to the request schema of Vercel's client (``validators.ts``) and reads it back without values. The
value is in no cassette: ``[scrubbed:OPENWEATHER_KEY]``, and replay scrubs each request the same way before
matching, so a value sent anywhere but the rule's header fails the match.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mainsdk import Sandbox, SandboxDeps, secret
from mainsdk.audit import AuditEvent
from mainsdk.config import load_config_text
from mainsdk.driver import EgressHeader, EgressRule
from mainsdk_conformance.suite._helpers import client_lines, clients_code
from mainsdk_vercel.driver import vercel_injection_policy, vercel_network_policy
from recording import AUTHOR_ENV, PROJECT, TEAM, TOKEN, OwnCassette

from mainsdk_vercel import VercelDriver

HERE = Path(__file__).parent
CASSETTES = HERE / "cassettes" / "egress"
HOST = "api.openweathermap.org"
SECRET = "OPENWEATHER_KEY"
VALUE = "owm-7d1e0c5a9b-authoring"  # made up: the key the app holds, which the sandbox must never see
NAMED = {SECRET: VALUE}
MARK = f"[scrubbed:{SECRET}]"
CONFIG = (
    "sandbox:\n"
    "  driver: vercel-sandbox\n"
    "  limits: {timeout: 20s}\n"
    f"  network: [{HOST}]\n"
    f"  secrets: [{SECRET}]\n"
    f"network: {{allow: [{HOST}]}}\n"
)
# The seed's weather example: the code calls the API as if it were open, with the clients the default image has,
# and says what its environment holds. Vercel's firewall ends TLS for the host to set the header; its CA is in the
# system store and the box's own variables name it (see simulator.py ``Sandbox``), which the driver keeps.
URL = f"https://{HOST}/data/2.5/weather?q=Paris&units=metric"
# The default image (github vercel/sandbox images/universal/Dockerfile: Ubuntu, python3-pip, curl, Node 24) has no
# httpx and no requests but pip's vendored copy (not an importable requests), so requests and httpx are the
# conformance suite's (from sandbox.packages, live).
IMAGE_CLIENTS = ("urllib", "curl", "node")
WEATHER = "import os\nprint(sorted(os.environ))\n" + clients_code(URL, IMAGE_CLIENTS)
# What Vercel sets for its clients in the sandbox (simulator.py TRUST_VARIABLES).
TRUST_VARIABLES = {"CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS", "PIP_CERT", "REQUESTS_CA_BUNDLE"}
TRUST_VARIABLES |= {"SSL_CERT_FILE"}


def assert_every_client_reached(stdout: str) -> None:
    """Each client got the API's answer for a valid key, trusting only what the sandbox trusts."""
    said = client_lines(stdout)
    assert set(said) == set(IMAGE_CLIENTS), stdout
    for client, line in said.items():
        status, _, body = line.partition(" ")
        assert status == "200" and json.loads(body)["name"] == "Paris", (client, line)


def _sandbox(cassette: OwnCassette, events: list[AuditEvent]) -> Sandbox:
    server = cassette.server
    driver = VercelDriver(
        token=cassette.token, project=cassette.project, team=cassette.team, base_url=server.url("api")
    )
    deps = SandboxDeps(
        config=load_config_text(CONFIG), driver=driver, secret=NAMED.get, log=events.append, load_entrypoints=False
    )
    return Sandbox(deps)


def the_weather_example(cassette: OwnCassette) -> dict[str, Any]:
    """One run of the weather code with the key added at the egress for the API's host alone."""
    events: list[AuditEvent] = []
    sandbox = _sandbox(cassette, events)
    try:
        result = sandbox.run(WEATHER, network=[HOST], egress={HOST: {"headers": {"X-Api-Key": secret(SECRET)}}})
    finally:
        sandbox.close()
    return {"stdout": result.stdout, "stderr": result.stderr, "exit": result.exit_code, "events": events}


def a_session_with_egress(cassette: OwnCassette) -> dict[str, Any]:
    """A session opened with the key at the egress: its one create carries the rule, for every command after."""
    events: list[AuditEvent] = []
    sandbox = _sandbox(cassette, events)
    try:
        with sandbox.create(network=[HOST], egress={HOST: {"headers": {"X-Api-Key": secret(SECRET)}}}) as session:
            outputs = [session.run("python3", ["-c", WEATHER]).stdout, session.run("echo", ["second"]).stdout]
    finally:
        sandbox.close()
    return {"outputs": outputs, "events": events}


AUTHORED_HOW = (
    "recorded with tests/test_egress.py against tests/conformance/simulator.py (written from vercel-sandbox "
    "0.10.0 and @vercel/sandbox, the policy held to validators.ts NetworkPolicyRequestValidator); the box's "
    "python ran on this machine, its firewall (mainsdk_conformance.egress_standin) ending TLS for the "
    "transform's host with a CA in the system bundle the sandbox's variables name, and answering as "
    "api.openweathermap.org answers a valid key; the egress header's value scrubbed by name"
)


def test_the_weather_example_sends_the_key_to_vercels_firewall_and_never_into_the_sandbox(
    caplog: pytest.LogCaptureFixture, own_cassette: Callable[..., OwnCassette]
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, the SDK's and httpx's included
    cassette = own_cassette(CASSETTES / "the_weather_example.json", named=NAMED, how=AUTHORED_HOW)
    try:
        seen = the_weather_example(cassette)
    finally:
        problems = cassette.stop()
    assert problems == []  # every request as recorded: the value in the rule, nowhere else
    assert not [r for r in caplog.records if VALUE in r.getMessage()]  # no log line holds it
    names = seen["stdout"].splitlines()[0]
    assert seen["exit"] == 0, seen["stderr"]
    assert_every_client_reached(seen["stdout"])  # through the simulator's firewall, which ended TLS
    assert set(json.loads(names.replace("'", '"'))) >= TRUST_VARIABLES  # the sandbox's own, kept by the driver
    assert VALUE not in names and SECRET not in names and VALUE not in seen["stderr"]
    [event] = [e for e in seen["events"] if e.kind == "run"]
    assert event.to_dict()["egress"] == [{"host": HOST, "header": "X-Api-Key", "secret": SECRET}]
    assert event.network_policy == {"allow": {HOST: []}}  # audited without the headers
    assert all(VALUE not in json.dumps(e.to_dict(), default=str) for e in seen["events"])
    text = cassette.path.read_text()  # as replayed, or as just recorded
    assert VALUE not in text and text.count(MARK) == 1
    data = json.loads(text)
    [create] = [i for i in data["interactions"] if i["request"]["path"] == "/v3/sandboxes"]
    rule = {"transform": [{"headers": {"X-Api-Key": MARK}}]}
    assert create["request"]["body"]["json"]["networkPolicy"] == {"allow": {HOST: [rule]}}
    # What the API answers: the header's name, never its value.
    readback = create["response"]["body"]["json"]["session"]["networkPolicy"]
    assert readback["injectionRules"] == [{"domain": HOST, "headerNames": ["X-Api-Key"]}]


def test_a_session_gets_the_rule_once_at_its_create_and_every_command_the_header(
    own_cassette: Callable[..., OwnCassette],
) -> None:
    cassette = own_cassette(CASSETTES / "a_session_with_egress.json", named=NAMED, how=AUTHORED_HOW)
    try:
        seen = a_session_with_egress(cassette)
    finally:
        problems = cassette.stop()
    assert problems == []  # one create with the rule; each command as recorded, without the value
    assert_every_client_reached(seen["outputs"][0])
    assert seen["outputs"][1] == "second\n"
    commands = [e for e in seen["events"] if e.kind == "command"]
    assert len(commands) == 2 and all(e.egress == ((HOST, "X-Api-Key", SECRET),) for e in commands)
    text = cassette.path.read_text()
    assert VALUE not in text and text.count(MARK) == 1
    assert [i["request"]["path"] for i in json.loads(text)["interactions"]].count("/v3/sandboxes") == 1


def test_the_policy_gives_each_host_one_transform_and_keeps_the_others() -> None:
    rules = (
        EgressRule("a.example.com", (EgressHeader("X-Api-Key", "K", "v1", "v1"),)),
        EgressRule("b.example.com", (EgressHeader("Authorization", "T", "Bearer v2", "v2"),)),
    )
    policy = vercel_network_policy(["a.example.com", "b.example.com", "*.other.com"])
    assert vercel_injection_policy(policy, rules) == {
        "allow": {
            "a.example.com": [{"transform": [{"headers": {"X-Api-Key": "v1"}}]}],
            "b.example.com": [{"transform": [{"headers": {"Authorization": "Bearer v2"}}]}],
            "*.other.com": [],
        }
    }
    assert policy == {"allow": {"a.example.com": [], "b.example.com": [], "*.other.com": []}}  # the audited one
    driver = VercelDriver(token=TOKEN, project=PROJECT, team=TEAM)
    assert driver.mainsdk_driver_capabilities().egress_headers is True


def author() -> int:
    """Record each test's cassette through the simulator (``recording.py``): every line is what the box printed."""
    sys.path.insert(0, str(HERE / "conformance"))
    sim = importlib.import_module("simulator").Simulator(token=TOKEN)
    sim.start()
    os.environ[AUTHOR_ENV] = sim.url
    try:
        return int(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "-k", "weather_example or session_gets"]))
    finally:
        sim.stop()
        os.environ.pop(AUTHOR_ENV, None)


if __name__ == "__main__" and "--author" in sys.argv:
    os.environ.pop("VERCEL_TOKEN", None)
    sys.exit(author())
