"""``sandbox.local``: the local driver's own section, declared in ``mainsdk.driver_configs``, checked by core."""

from __future__ import annotations

import pytest
from mainsdk.config import load_config_text
from mainsdk.entry_points import driver_section_name
from mainsdk.errors import INVALID_OPTION, UNKNOWN_CONFIG_KEY, ConfigError
from mainsdk_local.config import LocalPrograms


def test_the_local_driver_declares_sandbox_local() -> None:
    assert driver_section_name("local") == "local"


def test_defaults_and_a_full_section() -> None:
    assert load_config_text("sandbox:\n  driver: local\n").sandbox.section("local", LocalPrograms) == LocalPrograms(
        python="python3", node="node", bash="bash"
    )
    config = load_config_text(
        "sandbox:\n  local: { python: /usr/bin/python3.12, node: nodejs, bash: /bin/bash }\n"  # local: the default
    )
    assert config.sandbox.sections["local"] == LocalPrograms(
        python="/usr/bin/python3.12", node="nodejs", bash="/bin/bash"
    )


@pytest.mark.parametrize(
    ("text", "code", "key", "message"),
    [
        (
            "local: { ruby: ruby }",
            UNKNOWN_CONFIG_KEY,
            "sandbox.local.ruby",
            "unknown key; the keys here are: python, node, bash",
        ),
        ("local: { python: '' }", INVALID_OPTION, "sandbox.local.python", "must not be empty"),
        ("local: { python: [python3] }", INVALID_OPTION, "sandbox.local.python", "expected text, not a list"),
        ("local: { python: ~ }", INVALID_OPTION, "sandbox.local.python", "expected text, not null"),
        ("local: [python3]", INVALID_OPTION, "sandbox.local", "expected a mapping with the keys python, node, bash"),
    ],
)
def test_problems_in_sandbox_local_have_their_line(text: str, code: str, key: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text(f"sandbox:\n  driver: local\n  {text}\n")
    [problem] = caught.value.problems
    assert (problem.code, problem.key, problem.line) == (code, key, 3)
    assert problem.message.startswith(message)
