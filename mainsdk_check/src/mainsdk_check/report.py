"""The three output formats of ``mainsdk check``: human, JSON and SARIF 2.1.0."""

from __future__ import annotations

import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import quote

from mainsdk_check.findings import CHECK_CODES_URL, RULES, Finding, rule_for
from mainsdk_check.runner import CheckResult, display_path

__all__ = ["SARIF_SCHEMA", "format_human", "format_json", "format_sarif", "sarif_log"]

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SARIF_VERSION = "2.1.0"
ROOT_BASE_ID = "SRCROOT"
TOOL_NAME = "mainsdk check"
JSON_VERSION = 1


def _version() -> str:
    try:
        return metadata.version("mainsdk-check")  # the tool that made the log
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _summary(result: CheckResult) -> str:
    failing, silenced = len(result.unsilenced), len(result.silenced)
    where = _plural(result.files_checked, "Python file")
    if result.config is not None:
        where += f" and {result.config.name}"
    text = f"{_plural(failing, 'finding')} in {where}" if failing else f"No findings in {where}"
    if silenced:
        text += f" ({silenced} silenced by # mainsdk: allow)"
    if result.skipped:
        text += f"; {_plural(len(result.skipped), 'named path')} skipped by .gitignore, .mainsdkignore or --exclude"
    if result.errors:
        text += f"; {_plural(len(result.errors), 'file')} could not be checked"
    return text + "."


def format_human(result: CheckResult, cwd: Path | None = None) -> str:
    """Each unsilenced finding as ``file:line:col: CODE message`` and an indented ``fix:`` line, then a summary.

    Paths are relative to ``cwd`` (default: the working directory), so an
    editor or terminal can open them.
    """
    base = cwd or Path.cwd()
    lines = []
    for finding in result.unsilenced:
        path = finding.path if Path(finding.path).is_absolute() else os.path.relpath(result.root / finding.path, base)
        path = Path(path).as_posix()
        lines.append(f"{path}:{finding.line}:{finding.column}: {finding.code} {finding.message}")
        lines.append(f"    fix: {finding.fix}")
    lines.extend(f"note: {note}" for note in result.notes)
    lines.append(_summary(result))
    return "\n".join(lines) + "\n"


def _finding_dict(finding: Finding) -> dict[str, Any]:
    return {
        "code": finding.code,
        "path": finding.path,
        "line": finding.line,
        "column": finding.column,
        "message": finding.message,
        "fix": finding.fix,
        "silenced": finding.silenced,
    }


def format_json(result: CheckResult) -> str:
    """Every finding (silenced ones too, marked) with the counts, as one JSON object."""
    document = {
        "version": JSON_VERSION,
        "tool": TOOL_NAME,
        "root": result.root.as_posix(),
        "config": None if result.config is None else display_path(result.config, result.root),
        "findings": [_finding_dict(f) for f in result.findings],
        "summary": {
            "files": result.files_checked,
            "findings": len(result.unsilenced),
            "silenced": len(result.silenced),
            "errors": list(result.errors),
            "skipped": list(result.skipped),
            "notes": list(result.notes),
        },
        "exit_status": result.exit_status,
    }
    return json.dumps(document, indent=2) + "\n"


def _sentence(text: str) -> str:
    return text if text.endswith((".", "?", "!")) else text + "."


def _artifact_location(path: str) -> dict[str, str]:
    """A file relative to the repository root (``SRCROOT``), or an absolute ``file:`` URI outside it."""
    if Path(path).is_absolute():
        return {"uri": Path(path).as_uri()}
    return {"uri": quote(path), "uriBaseId": ROOT_BASE_ID}


def _rule_dict(code: str) -> dict[str, Any]:
    rule = rule_for(code)
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.help},
        "help": {"text": rule.help},
        "helpUri": rule.help_uri,
        "defaultConfiguration": {"level": "error"},
    }


def sarif_log(result: CheckResult) -> dict[str, Any]:
    """The result as a SARIF 2.1.0 log: one run, a rule for each code, silenced findings as in-source suppressions."""
    codes = list(RULES)
    codes += sorted({f.code for f in result.findings} - set(codes))
    index = {code: i for i, code in enumerate(codes)}
    results = []
    for finding in result.findings:
        item: dict[str, Any] = {
            "ruleId": finding.code,
            "ruleIndex": index[finding.code],
            "level": "error",
            "message": {"text": f"{_sentence(finding.message)} Fix: {_sentence(finding.fix)}"},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": _artifact_location(finding.path),
                        "region": {"startLine": finding.line, "startColumn": finding.column},
                    }
                }
            ],
            "properties": {"fix": finding.fix},
        }
        if finding.silenced:
            item["suppressions"] = [{"kind": "inSource", "justification": "# mainsdk: allow comment on the line"}]
        results.append(item)
    invocation: dict[str, Any] = {"executionSuccessful": not result.errors}
    if result.errors:
        invocation["toolExecutionNotifications"] = [
            {"level": "error", "message": {"text": error}} for error in result.errors
        ]
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": TOOL_NAME,
                        "version": _version(),
                        "informationUri": CHECK_CODES_URL,
                        "rules": [_rule_dict(code) for code in codes],
                    }
                },
                # The root must end with / for relative URIs to resolve under it.
                "originalUriBaseIds": {ROOT_BASE_ID: {"uri": result.root.as_uri().rstrip("/") + "/"}},
                "invocations": [invocation],
                # Columns count characters, not UTF-16 code units (SARIF's default).
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }


def format_sarif(result: CheckResult) -> str:
    """``sarif_log`` as indented JSON."""
    return json.dumps(sarif_log(result), indent=2) + "\n"
