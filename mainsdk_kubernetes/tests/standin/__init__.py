"""A stand-in for a cluster running agent-sandbox: its API server (``apiserver``) and its pods' sandboxd (``pods``).

``ACTIVE`` is the stand-in an authoring run (``conformance/author.py``) records against, shared with the conftest
in the same process; None otherwise.
"""

from __future__ import annotations

from typing import Any

ACTIVE: Any = None
