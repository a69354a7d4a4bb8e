"""Audit events as JSON lines appended to a file.

The file is ``MAINSDK_AUDIT_FILE`` if set, else ``audit.file`` at the top level
of ``main.yaml`` (relative to that file). With neither, this sink does nothing.
Both are read once per config, on its first event, not on every event: change
them by loading the config again.
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
# Where each config's events go, read on its first event: {id(config): (config, path)}. The config is kept so
# its id cannot be reused by another while cached; a process holds a handful of configs, bounded anyway.
_settings: dict[int, tuple[AppConfig, Path | None]] = {}
_SETTINGS_KEPT = 64


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
    path = _settings_of(config)
    if path is None:
        return
    line = json.dumps(event.to_dict(), sort_keys=True) + "\n"
    with _lock, open(path, "a", encoding="utf-8") as handle:
        handle.write(line)


def _settings_of(config: AppConfig) -> Path | None:
    """``audit_file(config)``, read once per config."""
    with _lock:
        cached = _settings.get(id(config))
        if cached is not None and cached[0] is config:
            return cached[1]
        path = audit_file(config)
        if len(_settings) >= _SETTINGS_KEPT:
            _settings.pop(next(iter(_settings)))
        _settings[id(config)] = (config, path)
        return path
