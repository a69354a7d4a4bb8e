"""A call the config or the driver does not allow is refused with the seed's code, and nothing runs.

The local driver in production, an interpreter not under ``permissions.processes``, arguments past what
execve takes: each is a clear mistake (MAIN-SANDBOX-0001/0011), never an outage to retry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mainsdk import SandboxError
from mainsdk.errors import INVALID_OPTION, LOCAL_IN_PRODUCTION
from requires import NAMESPACES


def test_the_local_driver_is_refused_in_production(make_sandbox: Callable[..., Any]) -> None:
    built = make_sandbox(environment="production")
    with pytest.raises(SandboxError) as caught:
        built.sandbox.run("print(1)")
    assert caught.value.code == LOCAL_IN_PRODUCTION


def test_an_interpreter_not_under_permissions_processes_is_refused(
    make_sandbox: Callable[..., Any], local_config: str
) -> None:
    built = make_sandbox(local_config.replace("processes: [python3, node, bash]", "processes: [python3]"))
    with pytest.raises(SandboxError) as caught:
        built.sandbox.run("console.log(1)", "node")
    assert caught.value.code == INVALID_OPTION and "permissions.processes" in caught.value.message


@NAMESPACES
@pytest.mark.parametrize(
    ("args", "env"),
    [
        pytest.param(["x"] * 300_000, {}, id="many-short-arguments"),
        pytest.param(["y" * 120_000] * 7, {f"E{i}": "z" * 120_000 for i in range(7)}, id="args-and-env-together"),
    ],
)
def test_arguments_past_what_execve_takes_are_a_mistake_not_an_outage(
    sandbox: Any, args: list[str], env: dict[str, str]
) -> None:
    # Must hold: bad input is MAIN-SANDBOX-0001 naming the argument, before anything runs; 0006 is for
    # outages only. Each case passed core's checks (1 MiB of argument text, 1 MiB of env, each alone)
    # and came back as 0006 "the 'local' driver failed ... check the local launcher" (its header too big).
    # execve charges a pointer per string, and takes the arguments and the environment together.
    with sandbox.create(env=env) as session, pytest.raises(SandboxError) as caught:
        session.run("bash", ["-c", "echo ran", *args])
    assert caught.value.code == INVALID_OPTION, caught.value
    assert str(caught.value).startswith(f"{INVALID_OPTION}: args"), caught.value
    assert caught.value.ran is False and caught.value.retryable is False


@NAMESPACES
def test_arguments_that_grow_when_escaped_are_a_mistake_not_an_outage(sandbox: Any) -> None:
    # Must hold: as above; how a driver encodes the arguments is its own business, not the caller's mistake.
    with sandbox.create() as session, pytest.raises(SandboxError) as caught:
        session.run("bash", ["-c", "echo ran", "\x01" * 120_000, "\x01" * 120_000])
    assert caught.value.code == INVALID_OPTION, caught.value
