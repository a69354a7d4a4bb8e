"""mainsdk-conformance: the suite every mainsdk sandbox driver runs, and record/replay of provider sessions.

Opt in from a driver's ``conftest.py`` with ``pytest_plugins = ["mainsdk_conformance.plugin"]``
and a ``conformance_target`` fixture returning a ``ConformanceTarget``; run the
suite with ``from mainsdk_conformance.suite import *`` in a test module.
"""

import pytest

# Before any suite module is imported: a driver author's failure then shows the compared values
# (``assert '' == '2\n'``), not a bare AssertionError. pytest only rewrites test modules and conftests itself.
pytest.register_assert_rewrite("mainsdk_conformance.suite")

from mainsdk_conformance.marks import requires  # noqa: E402
from mainsdk_conformance.target import EGRESS_ORIGIN_CA, Built, Conformance, ConformanceTarget, NetworkHosts  # noqa: E402

__all__ = ["EGRESS_ORIGIN_CA", "Built", "Conformance", "ConformanceTarget", "NetworkHosts", "requires"]
