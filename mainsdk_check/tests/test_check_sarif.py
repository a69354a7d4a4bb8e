"""SARIF 2.1.0 output, validated against the OASIS schema.

``sarif-schema-2.1.0.json`` next to this file is the SARIF 2.1.0 schema
(Errata 01), copied unchanged from github.com/oasis-tcs/sarif-spec,
``sarif-2.1/schema/sarif-schema-2.1.0.json`` at commit
e0583813964ec43cea53b6b531b402866095ed1f (sha256
c3b4bb2d6093897483348925aaa73af03b3e3f4bd4ca38cef26dcb4212a2682e).
Validating needs the test-only dependency ``jsonschema`` (tox installs it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mainsdk.config import CONFIG_ENV_VAR
from mainsdk.errors import INVALID_OPTION, LOCAL_IN_PRODUCTION, NETWORK_NOT_ALLOWED, UNKNOWN_CONFIG_KEY, UNSAFE_EVAL

from mainsdk_check import RULES, main, run_check, sarif_log

SCHEMA = Path(__file__).parent / "sarif-schema-2.1.0.json"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository with a finding of every kind, a silenced one and a file that does not parse."""
    monkeypatch.delenv(CONFIG_ENV_VAR, raising=False)
    monkeypatch.delenv("MAINSDK_ENV", raising=False)
    (tmp_path / ".git").mkdir()
    (tmp_path / "src" / "my app").mkdir(parents=True)
    (tmp_path / "src" / "my app" / "run.py").write_text(
        "import subprocess\n\n"
        "def go(cmd, src):\n"
        "    subprocess.run(cmd, shell=True)\n"
        "    exec(src)  # mainsdk: allow MAIN-SANDBOX-0010\n",
        encoding="utf-8",
    )
    (tmp_path / "main.yaml").write_text(
        "sandbox:\n  driver: local\n  netwrok: []\n  network: [api.example.com]\n  limits: {timeout: 3 days}\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def validate(log: dict[str, Any]) -> None:
    import jsonschema  # test-only dependency, installed by tox; a missing one must fail, not skip

    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    errors = sorted(validator_class(schema).iter_errors(log), key=lambda error: list(error.absolute_path))
    assert [f"{list(e.absolute_path)}: {e.message}" for e in errors] == []


def test_the_vendored_schema_is_sarif_2_1_0() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert schema["title"] == "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema"
    assert schema["properties"]["version"]["enum"] == ["2.1.0"]


def test_the_validator_rejects_a_broken_log(project: Path) -> None:
    # Without this, a validator that accepts everything would pass the tests below.
    log = sarif_log(run_check(cwd=project))
    log["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(AssertionError, match="level"):
        validate(log)


def test_the_sarif_output_validates(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--format", "sarif", "--env", "prod"]) == 2  # main.yaml has loader errors: the app cannot start
    log = json.loads(capsys.readouterr().out)
    validate(log)
    codes = {result["ruleId"] for result in log["runs"][0]["results"]}
    assert codes == {UNSAFE_EVAL, LOCAL_IN_PRODUCTION, NETWORK_NOT_ALLOWED, UNKNOWN_CONFIG_KEY, INVALID_OPTION}


def test_a_clean_run_and_a_run_with_errors_validate(project: Path) -> None:
    (project / "broken.py").write_text("def f(:\n", encoding="utf-8")
    failed = sarif_log(run_check(["broken.py"], cwd=project))
    validate(failed)
    invocation = failed["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    texts = [notification["message"]["text"] for notification in invocation["toolExecutionNotifications"]]
    assert texts[0].startswith("main.yaml cannot be loaded: ")
    assert texts[1].startswith("cannot parse broken.py")
    (project / "main.yaml").unlink()
    clean = sarif_log(run_check(["broken.py"], excludes=["broken.py"], cwd=project))
    validate(clean)
    assert clean["runs"][0]["results"] == []


def test_rules_cover_every_code_and_results_point_at_them(project: Path) -> None:
    run = sarif_log(run_check(env="prod", cwd=project))["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [rule["id"] for rule in rules] == list(RULES)
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] == "error"
        assert "Fix: " in result["message"]["text"]
    assert all(rule["helpUri"].startswith("https://mainsdk.dev/docs/reference/check-codes#") for rule in rules)


def test_locations_are_relative_to_the_repository_root(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project / "src")  # the root is found from anywhere inside it
    run = sarif_log(run_check(["."], cwd=project / "src"))["runs"][0]
    assert run["originalUriBaseIds"]["SRCROOT"]["uri"] == project.resolve().as_uri() + "/"
    locations = [result["locations"][0]["physicalLocation"] for result in run["results"]]
    assert locations[0]["artifactLocation"] == {"uri": "src/my%20app/run.py", "uriBaseId": "SRCROOT"}
    assert locations[0]["region"] == {"startLine": 4, "startColumn": 5}


def test_silenced_findings_are_suppressed_in_source(project: Path) -> None:
    results = sarif_log(run_check(cwd=project))["runs"][0]["results"]
    silenced = [r for r in results if "suppressions" in r]
    assert len(silenced) == 1
    assert silenced[0]["suppressions"][0]["kind"] == "inSource"
    assert silenced[0]["locations"][0]["physicalLocation"]["region"]["startLine"] == 5
