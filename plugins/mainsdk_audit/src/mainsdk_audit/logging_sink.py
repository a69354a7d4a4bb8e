"""Audit events to the standard ``logging`` module, logger ``mainsdk.audit``, level INFO."""

from __future__ import annotations

import json
import logging

from mainsdk.audit import AuditEvent
from mainsdk.hookspecs import hookimpl

logger = logging.getLogger("mainsdk.audit")


@hookimpl
def mainsdk_audit_event(event: AuditEvent) -> None:
    """Log the event as one JSON object; ``extra={"audit": ...}`` carries it as a dict for structured handlers."""
    if logger.isEnabledFor(logging.INFO):
        data = event.to_dict()
        logger.info("%s", json.dumps(data, sort_keys=True), extra={"audit": data})
