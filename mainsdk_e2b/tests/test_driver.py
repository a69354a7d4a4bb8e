"""The e2b driver outside the suite: config, policy, price, the key kept secret, a 401 through the real SDK."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from mainsdk import Sandbox, SandboxDeps, SandboxError
from mainsdk.config import load_config_text
from mainsdk.driver import Command
from mainsdk.errors import DRIVER_UNAVAILABLE, INVALID_OPTION
from mainsdk.plugins import load_driver
from mainsdk_conformance.profiles import E2B
from mainsdk_conformance.replay import ReplayServer
from mainsdk_e2b.driver import resolve_key, shell_line

from mainsdk_e2b import E2BDriver, e2b_network_policy, e2b_sandbox_driver, estimate_price

HERE = Path(__file__).parent
KEY = "e2b_" + "5eed" * 10  # the key replay sends (conformance/conftest.py)


def test_the_policy_allows_the_hosts_and_denies_everything_else() -> None:
    assert e2b_network_policy([]) == {"allow_out": [], "deny_out": ["0.0.0.0/0"]}
    assert e2b_network_policy(["pypi.org", "*.example.com"]) == {
        "allow_out": ["pypi.org", "*.example.com"],
        "deny_out": ["0.0.0.0/0"],
    }


def test_the_price_is_e2bs_per_vcpu_and_per_gib_second() -> None:
    assert estimate_price() == Decimal("0.00003025")  # 2 x 0.000014 + 0.5 x 0.0000045
    assert estimate_price(8, 8192) == Decimal("0.000148")
    assert e2b_sandbox_driver(api_key=KEY).mainsdk_driver_capabilities().price_per_second == Decimal("0.00003025")
    priced = e2b_sandbox_driver(api_key=KEY, price=Decimal("0.0001"))
    assert priced.mainsdk_driver_capabilities().price_per_second == Decimal("0.0001")


def test_main_yaml_loads_the_driver_through_its_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_E2B_KEY", KEY)
    config = load_config_text('sandbox: {driver: e2b, e2b: {key: "secret:MY_E2B_KEY", template: t1}, price: $0.001}\n')
    driver = load_driver("e2b", config)
    assert isinstance(driver, E2BDriver)
    caps = driver.mainsdk_driver_capabilities()
    assert (caps.isolation, caps.network, caps.sessions, caps.memory_limit) == ("microvm", True, True, False)
    assert caps.price_per_second == Decimal("0.001")
    assert KEY not in repr(driver)


def test_a_missing_key_is_0001_naming_the_secret_not_a_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    config = load_config_text("sandbox: {driver: e2b}\n")
    sandbox = Sandbox(SandboxDeps(config=config, load_entrypoints=False))
    with pytest.raises(SandboxError) as caught:
        sandbox.run("print(1)")
    assert (caught.value.code, caught.value.status, caught.value.retryable) == (INVALID_OPTION, 400, False)
    assert "E2B_API_KEY" in caught.value.message
    assert resolve_key("secret:X", {"X": "v"}) == ("v", "sandbox.e2b.key names the secret X, which has no value; set X")


def test_the_command_line_names_variables_and_never_holds_their_values() -> None:
    line = shell_line(Command("python3", ("-c", "print('a  b'); x = '$HOME'"), env={"K": "value-of-k"}))
    assert "value-of-k" not in line and 'K="$K"' in line
    assert line.endswith("python3 -c 'print('\"'\"'a  b'\"'\"'); x = '\"'\"'$HOME'\"'\"''")
    assert "cd /home/user/work" in line and "/usr/bin/env -i" in line


def test_a_401_is_0006_and_the_key_is_in_no_error(tmp_path: Path) -> None:
    server = ReplayServer.replayer(E2B, HERE / "cassettes" / "test_401_is_0006_without_the_key.json")
    server.start()
    try:
        driver = e2b_sandbox_driver(api_key=KEY, api_url=server.url("api"), sandbox_url=server.url("sandbox"))
        config = load_config_text("sandbox: {driver: e2b, limits: {timeout: 10s}}\n")
        sandbox = Sandbox(SandboxDeps(config=config, driver=driver))
        with pytest.raises(SandboxError) as caught:
            sandbox.run("print('fault')")
        sandbox.close()
    finally:
        server.stop()
    assert server.problems(final=True) == []
    assert (caught.value.code, caught.value.retryable) == (DRIVER_UNAVAILABLE, True)
    assert "authentication failed" in caught.value.message
    chain = [caught.value, caught.value.__cause__, caught.value.__context__]
    assert all(KEY not in str(exc) and KEY not in repr(exc) for exc in chain if exc is not None)


def test_no_cassette_holds_a_key_or_the_replay_key() -> None:
    paths = sorted(HERE.rglob("cassettes/**/*.json"))
    assert len(paths) > 60
    for path in paths:
        text = path.read_text()
        assert KEY not in text and "5eed5eed" not in text, path
        data = json.loads(text)
        assert data["meta"]["made"] == "authored", path
        for interaction in data["interactions"]:
            headers = {k.lower(): v for k, v in (interaction["request"].get("headers") or {}).items()}
            assert headers.get("x-api-key", "[scrubbed]") == "[scrubbed]", path
            assert headers.get("x-access-token", "[scrubbed]") == "[scrubbed]", path


def test_a_run_costs_no_more_round_trips_than_it_needs() -> None:
    # create, upload (only with files), start, list out, read each out file, kill.
    for name, expected in (
        ("TestRun/test_python_prints.json", 4),
        ("TestIsolation/test_files_passed_in_are_byte_exact.json", 5),
        ("TestFiles/test_out_files_come_back_as_file_refs.json", 6),
    ):
        data = json.loads((HERE / "conformance" / "cassettes" / name).read_text())
        assert len(data["interactions"]) == expected, name
    cassette = HERE / "conformance/cassettes/TestIsolation/test_files_passed_in_are_byte_exact.json"
    isolation = json.loads(cassette.read_text())
    uploads = [i for i in isolation["interactions"] if i["request"]["path"] == "/files"]
    assert len(uploads) == 1 and len(uploads[0]["request"]["body"]["multipart"]) == 2
