"""The shipped audit sinks: JSON lines to a file, and the logging module. Each event whole, never the code."""

from __future__ import annotations

import json
import logging
from decimal import Decimal
from pathlib import Path

import pytest
from mainsdk.audit import AuditEvent
from mainsdk.config import load_config_text
from mainsdk_audit import jsonl_sink, logging_sink

EVENT = AuditEvent(
    id="run_1",
    kind="run",
    driver="local",
    feature="notebook",
    tenant="t",
    code_sha256="ab" * 32,
    exit_code=0,
    env_names=("K",),
    cost=Decimal("0.001"),
)


def test_jsonl_writes_one_line_per_event_where_main_yaml_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(jsonl_sink.ENV_VAR, raising=False)
    config = load_config_text("audit: { file: audit.jsonl }\n", source=tmp_path / "main.yaml")
    jsonl_sink.mainsdk_audit_event(EVENT, config)
    jsonl_sink.mainsdk_audit_event(EVENT, config)
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [EVENT.to_dict(), EVENT.to_dict()]


def test_jsonl_the_environment_variable_wins_and_no_file_means_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config_text("audit: { file: audit.jsonl }\n", source=tmp_path / "main.yaml")
    monkeypatch.setenv(jsonl_sink.ENV_VAR, str(tmp_path / "elsewhere.jsonl"))
    jsonl_sink.mainsdk_audit_event(EVENT, config)
    assert (tmp_path / "elsewhere.jsonl").exists() and not (tmp_path / "audit.jsonl").exists()
    monkeypatch.delenv(jsonl_sink.ENV_VAR)
    assert jsonl_sink.audit_file(load_config_text("sandbox: {}\n")) is None


def test_jsonl_reads_its_settings_once_per_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: every event re-read the environment and the whole config to find its file.
    monkeypatch.setenv(jsonl_sink.ENV_VAR, str(tmp_path / "first.jsonl"))
    config = load_config_text("sandbox: {}\n", source=tmp_path / "main.yaml")
    jsonl_sink.mainsdk_audit_event(EVENT, config)
    monkeypatch.setenv(jsonl_sink.ENV_VAR, str(tmp_path / "second.jsonl"))
    jsonl_sink.mainsdk_audit_event(EVENT, config)
    assert len((tmp_path / "first.jsonl").read_text().splitlines()) == 2
    assert not (tmp_path / "second.jsonl").exists()
    jsonl_sink.mainsdk_audit_event(EVENT, load_config_text("sandbox: {}\n"))  # a config loaded again reads again
    assert (tmp_path / "second.jsonl").exists()


def test_logging_logs_the_event_at_info_as_json(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="mainsdk.audit"):
        logging_sink.mainsdk_audit_event(EVENT)
    [record] = caplog.records
    assert record.levelno == logging.INFO and json.loads(record.getMessage()) == EVENT.to_dict()
    assert record.audit == EVENT.to_dict()  # type: ignore[attr-defined]
