"""The kernel's protocol constants, defined once: the app (``mainsdk.cells``) and the box's supervisor and Python
executor import them; the node executor gets them as JSON in its start line (``NODE_CONSTANTS``) and the bash
executor needs none of them."""

from __future__ import annotations

# The loader needs these two before any module of the package is loaded: defined there.
from .loader import PACKAGE, UNSUPPORTED_EXIT

__all__ = [
    "CHART_MIME",
    "DATAFRAME_MIME",
    "LANGUAGES",
    "MARK",
    "NODE_CONSTANTS",
    "PACKAGE",
    "PROBE",
    "TEXT_LIMIT",
    "UNSUPPORTED_EXIT",
    "WATCHDOG_EXIT",
]

MARK = "\x1e"  # starts each frame: MARK, the token, ":" and the frame's JSON (or "end" on stderr)
WATCHDOG_EXIT = 124  # the kernel's exit status when it ended itself at a cell's timeout + grace
TEXT_LIMIT = 64 * 1024  # an error's value and traceback are cut to this many characters in the box
PROBE = b"\0"  # the supervisor's probe byte on the request pipe (the "probe" watch); a request line never holds one
LANGUAGES = ("python", "javascript", "typescript", "bash")  # the executors the kernel can start
# The kernel's data forms (``forms.py``; docs/notebooks-and-agents.md): a matplotlib figure's chart, and a pandas
# DataFrame's columns and values, each as JSON a model can read without vision.
CHART_MIME = "application/vnd.mainsdk.chart+json"
DATAFRAME_MIME = "application/vnd.mainsdk.dataframe+json"
# What the node executor reads from its start line, by name (see node_executor.js).
NODE_CONSTANTS = {"TEXT_LIMIT": TEXT_LIMIT, "UNSUPPORTED_EXIT": UNSUPPORTED_EXIT}
