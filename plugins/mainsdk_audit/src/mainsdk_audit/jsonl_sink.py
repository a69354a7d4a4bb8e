"""Audit events as JSON lines appended to a file.

The file is ``MAINSDK_AUDIT_FILE`` if set, else ``audit.file`` at the top level
of ``main.yaml`` (relative to that file). With neither, this sink does nothing.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from mainsdk.audit import AuditEvent
from mainsdk.config import AppConfig
from mainsdk.hookspecs import hookimpl

ENV_VAR = "MAINSDK_AUDIT_FILE"
_lock = threading.Lock()


def audit_file(config: AppConfig) -> Path | None:
    """Where events go for this config, or None."""
    named = os.environ.get(ENV_VAR)
    if named:
        return Path(named)
    section = config.other.get("audit")
    if isinstance(section, dict) and isinstance(section.get("file"), str):
        path = Path(section["file"])
        if not path.is_absolute() and config.source is not None:
            path = config.source.parent / path
        return path
    return None


@hookimpl
def mainsdk_audit_event(event: AuditEvent, config: AppConfig) -> None:
    """Append the event as one line. Lines are written whole, under a lock, so concurrent runs never interleave."""
    path = audit_file(config)
    if path is None:
        return
    line = json.dumps(event.to_dict(), sort_keys=True) + "\n"
    with _lock, open(path, "a", encoding="utf-8") as handle:
        handle.write(line)
