"""mainsdk-conformance: the suite every mainsdk sandbox driver runs, and record/replay of provider sessions.

Opt in from a driver's ``conftest.py`` with ``pytest_plugins = ["mainsdk_conformance.plugin"]``
and a ``conformance_target`` fixture returning a ``ConformanceTarget``; run the
suite with ``from mainsdk_conformance.suite import *`` in a test module.
"""

from mainsdk_conformance.marks import requires
from mainsdk_conformance.target import Built, Conformance, ConformanceTarget, NetworkHosts

__all__ = ["Built", "Conformance", "ConformanceTarget", "NetworkHosts", "requires"]
