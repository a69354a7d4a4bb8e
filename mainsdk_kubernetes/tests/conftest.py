"""The conformance plugin, loaded here so `pytest mainsdk_kubernetes/tests` takes it as an initial conftest; the
stand-in (``standin_pods.py``, ``standin_apiserver.py``) importable by the tests."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the stand-in modules

pytest_plugins = ["mainsdk_conformance.plugin"]
