"""What the surfaces fuzz found in core (issue 31): each is a clear error with the right code, naming the key.

A name check written ``^...$`` with ``re.match`` let a final newline by (``$`` also matches before one), a
main.yaml egress value that names no secret was refused without naming its host or header, an empty secret
was a value for ``env`` but not for ``egress``, an action's egress host outside its own network was refused
only at each run, and ``--config`` naming a FIFO or a device hung or read for ever.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
from mainsdk import errors
from mainsdk.config import load_config_text
from mainsdk.engine import AsyncSandbox, SandboxDeps
from mainsdk.errors import ConfigError, SandboxError
from mainsdk.secrets import Credential, secret
from memory_driver import CAPABILITIES as MEMORY_CAPS
from memory_driver import MemoryDriver, script

CONFIG = """
sandbox:
  driver: memory
  secrets: [K, EMPTY_KEY]
  network: [api.example.com, other.example.com]
network:
  allow: [api.example.com, other.example.com]
"""
SECRETS = {"K": "k-secret-value-31", "EMPTY_KEY": ""}


def _sandbox() -> tuple[AsyncSandbox, MemoryDriver]:
    driver = MemoryDriver(capabilities=attrs.evolve(MEMORY_CAPS, egress_headers=True))
    deps = SandboxDeps(config=load_config_text(CONFIG), driver=driver, load_entrypoints=False, secret=SECRETS.get)
    return AsyncSandbox(deps), driver


async def _refused(**options: Any) -> SandboxError:
    sandbox, driver = _sandbox()
    with pytest.raises(SandboxError) as caught:
        await sandbox.run(script('out "ran"'), "bash", **options)
    assert driver.boxes == []  # refused before anything started
    assert "k-secret-value-31" not in str(caught.value)
    return caught.value


# -- a final newline in a name -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["K\n", "\nK", "K\n\n"])
def test_a_secret_name_with_a_newline_is_0001_at_secret(name: str) -> None:
    with pytest.raises(SandboxError) as caught:
        secret(name)
    assert caught.value.code == errors.INVALID_OPTION and repr(name) in str(caught.value)


def test_a_credential_reference_with_a_final_newline_is_refused() -> None:
    with pytest.raises(ValueError, match="is not a secret reference"):
        Credential.from_text("secret:E2B_API_KEY\n")


async def test_an_env_name_with_a_final_newline_is_0001_naming_it() -> None:
    exc = await _refused(env={"A\n": "x"})
    assert exc.code == errors.INVALID_OPTION and "env" in str(exc) and repr("A\n") in str(exc)


async def test_an_egress_header_name_with_a_final_newline_is_0001_naming_it() -> None:
    egress = {"api.example.com": {"headers": {"X-Api-Key\n": secret("K")}}}
    exc = await _refused(network=["api.example.com"], egress=egress)
    assert exc.code == errors.INVALID_OPTION and repr("X-Api-Key\n") in str(exc) and "api.example.com" in str(exc)
    sandbox, _ = _sandbox()
    with pytest.raises(SandboxError) as caught:
        async with sandbox.create(network=["api.example.com"], egress=egress):
            pass
    assert caught.value.code == errors.INVALID_OPTION and repr("X-Api-Key\n") in str(caught.value)


def test_a_main_yaml_egress_header_name_with_a_final_newline_is_refused_at_load() -> None:
    text = (
        "sandbox:\n  secrets: [K]\n  network: [api.example.com]\n"
        '  egress: { api.example.com: { headers: { "X-Api-Key\\n": "secret:K" } } }\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_config_text(text)
    assert {p.code for p in caught.value.problems} == {errors.INVALID_OPTION}
    assert "sandbox.egress" in str(caught.value) and "X-Api-Key\\n" in str(caught.value)


# -- main.yaml egress values that name no secret -------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["'secret:'", "'secret:FZ3 KEY'", "'secret:1ABC'", "'secret:K\\n'", "{secret: 1A}", "'secret:sk-live-0123abcd'"],
)
def test_a_main_yaml_egress_value_naming_no_secret_names_the_host_and_header(value: str) -> None:
    text = (
        "sandbox:\n  secrets: [K]\n  network: [api.example.com]\n"
        f"  egress: {{ api.example.com: {{ headers: {{ X-Api-Key: {value.replace(chr(39), chr(34))} }} }} }}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config_text(text)
    shown = str(caught.value)
    assert {p.code for p in caught.value.problems} == {errors.INVALID_OPTION}
    assert "sandbox.egress" in shown and "api.example.com" in shown and "X-Api-Key" in shown, shown
    assert "sk-live" not in shown  # what follows secret: by mistake may be the value itself: never quoted


# -- an empty secret: no value, for env as for egress --------------------------------------------------------------


async def test_an_empty_secret_is_0009_for_env_as_for_egress() -> None:
    env = await _refused(env={"TOKEN": secret("EMPTY_KEY")})
    assert env.code == errors.SECRET_NOT_ALLOWED and "env.TOKEN" in str(env) and "EMPTY_KEY" in str(env)
    assert "empty" in str(env)
    egress = await _refused(
        network=["api.example.com"], egress={"api.example.com": {"headers": {"X-Api-Key": secret("EMPTY_KEY")}}}
    )
    assert egress.code == env.code and "EMPTY_KEY" in str(egress)


# -- an action's egress host outside its network -------------------------------------------------------------------


def test_an_actions_egress_host_outside_its_network_is_0005_at_creation() -> None:
    sandbox, _ = _sandbox()
    egress = {"other.example.com": {"headers": {"X-Api-Key": secret("K")}}}
    with pytest.raises(SandboxError) as caught:
        sandbox.action(name="tool", network=["api.example.com"], egress=egress)
    assert caught.value.code == errors.HOST_NOT_ALLOWED
    assert "other.example.com" in str(caught.value) and "'tool'" in str(caught.value)
    covered = sandbox.action(name="tool", network=["other.example.com"], egress=egress)
    assert covered.egress == egress


# -- --config naming something that is not a file ------------------------------------------------------------------


def _load_in_a_process(path: str) -> subprocess.CompletedProcess[str]:
    # A process of its own, with a deadline: before the fix the open of a FIFO never returned.
    code = (
        "import sys\nfrom mainsdk.config import load_config\nfrom mainsdk.errors import ConfigError\n"
        "try:\n    load_config(sys.argv[1])\nexcept ConfigError as exc:\n    print(exc)\n"
    )
    return subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=60, check=False)


def test_a_config_path_naming_a_fifo_or_a_device_is_0001_naming_it(tmp_path: Path) -> None:
    fifo = tmp_path / "main.yaml"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        try:
            done = _load_in_a_process(path)
        except subprocess.TimeoutExpired:
            pytest.fail(f"load_config({path!r}) hung")
        assert done.returncode == 0 and not done.stderr, done.stderr
        assert done.stdout.startswith("MAIN-SANDBOX-0001") and path in done.stdout, done.stdout
        assert "not a regular file" in done.stdout
