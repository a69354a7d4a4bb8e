"""The newcomer walk-through (shared/seeds/sandbox-tutorial.md), step by step, in Python."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import mainsdk
import pytest
from mainsdk import sandbox, secret
from mainsdk.audit import code_sha256

TUTORIAL_CONFIG = """
sandbox:
  driver: local
  local: { python: python3 }
  limits: { timeout: 30s, output: 1MB }
permissions:
  processes: [python3]
  disk: { temp: { max: 1GB } }
audit: { file: audit.jsonl }
"""


def run_snippet(code: str, **options: object) -> str:
    """Step 2 of the tutorial, in Python."""
    out = sandbox.run(code=code, language="python", feature="notebook", **options)  # type: ignore[arg-type]
    return f"stopped: {out.stop}" if out.stop else out.stdout


def chart(csv: str) -> tuple[mainsdk.FileRef, ...]:
    """Step 3 of the tutorial, in Python."""
    out = sandbox.run(
        language="python",
        feature="chart",
        files={"data.csv": csv},
        code="rows = open('data.csv').read().splitlines()\nopen('../out/count.txt', 'w').write(str(len(rows)))",
    )
    return out.files


def test_the_tutorial_works_end_to_end(app_dir: Callable[[str], Path]) -> None:
    config = app_dir(TUTORIAL_CONFIG)
    # Check it worked: 2, then a stopped timeout.
    assert run_snippet("print(1 + 1)") == "2\n"
    assert run_snippet("while True: pass", limits={"timeout": "1s"}) == "stopped: timeout"
    [ref] = chart("a,1\nb,2\nc,3\n")
    assert ref.name == "count.txt" and sandbox.files.read(ref) == b"3"
    # Each run wrote one audit event with the code's SHA-256, never the code or its output.
    events = [json.loads(line) for line in (config.parent / "audit.jsonl").read_text().splitlines()]
    assert [e["feature"] for e in events] == ["notebook", "notebook", "chart"]
    assert events[0]["code_sha256"] == code_sha256("print(1 + 1)")
    assert events[1]["stop"] == "timeout" and events[0]["isolation"] == "namespace"
    assert "print(1 + 1)" not in (config.parent / "audit.jsonl").read_text()


def test_step_four_is_refused_cleanly_until_hosts_and_secrets_are_listed(app_dir: Callable[[str], Path]) -> None:
    app_dir(TUTORIAL_CONFIG)
    with pytest.raises(mainsdk.SandboxError) as host:
        sandbox.run(code="print(1)", language="python", feature="weather", network=["pypi.org"])
    assert host.value.code == "MAIN-SANDBOX-0005" and "pypi.org" in host.value.message
    with pytest.raises(mainsdk.SandboxError) as key:
        sandbox.run(code="print(1)", language="python", feature="weather", env={"K": secret("OPENWEATHER_KEY")})
    assert key.value.code == "MAIN-SANDBOX-0009" and "OPENWEATHER_KEY" in key.value.message


def test_with_no_main_yaml_the_embedded_default_runs_python_node_and_bash(app_dir: Callable[[str], Path]) -> None:
    assert sandbox.run("print('py')").stdout == "py\n"
    assert sandbox.run("console.log('js')", "node").stdout == "js\n"
    assert sandbox.run("echo sh", "bash").stdout == "sh\n"


def test_an_unknown_key_is_refused_at_load_with_its_line(app_dir: Callable[[str], Path]) -> None:
    app_dir("sandbox:\n  driver: local\n  limitz: { timeout: 1s }\n")
    with pytest.raises(mainsdk.ConfigError) as caught:
        sandbox.run("print(1)")
    assert caught.value.code == "MAIN-CONFIG-0003"
    assert "line 3" in str(caught.value) and "sandbox.limitz" in str(caught.value)
