"""``mainsdk check``: find unsafe code and ``main.yaml`` problems before they run.

- MAIN-SANDBOX-0010: ``eval``, ``exec``, ``compile`` and their look-alikes
  (``subprocess`` with ``shell=True``, ``os.system``, ``runpy``, ``code``)
  on a value that is not a string literal (``find_unsafe_eval``).
- MAIN-SANDBOX-0011: the ``local`` driver with ``--env prod``, including
  through a ``main.prod.yaml`` overlay (``check_config``).
- MAIN-SANDBOX-0012: a ``sandbox.network`` host that ``network.allow`` does
  not cover (``check_config``).
- Every error ``mainsdk.config.load_config`` reports, with its line.

``main`` is the command; ``run_check`` is the same check as a function.
"""

from mainsdk_check.command import main
from mainsdk_check.config_checks import CannotCheck, check_config
from mainsdk_check.findings import RULES, Finding, Rule
from mainsdk_check.report import format_human, format_json, format_sarif, sarif_log
from mainsdk_check.runner import CheckResult, run_check
from mainsdk_check.unsafe_eval import find_unsafe_eval

__all__ = [
    "RULES",
    "CannotCheck",
    "CheckResult",
    "Finding",
    "Rule",
    "check_config",
    "find_unsafe_eval",
    "format_human",
    "format_json",
    "format_sarif",
    "main",
    "run_check",
    "sarif_log",
]
