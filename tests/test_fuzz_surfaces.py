"""A fixed-seed slice of the newest surfaces' fuzz (``benchmarks/fuzz_surfaces.py`` runs it long), on the real local
driver, the real MCP server and the real CLI."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def _fuzz_module() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "fuzz_surfaces.py"
    spec = importlib.util.spec_from_file_location("fuzz_surfaces", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # attrs resolves the module's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_the_surfaces_fuzz_slice_has_no_raw_exception_hang_blow_up_misclassification_or_lost_result() -> None:
    # 150 cases over every surface, about a third of them good calls whose results are checked.
    fuzz = _fuzz_module()
    summary = fuzz.fuzz(seed=24, count=150)
    assert summary.failures == dict.fromkeys(fuzz.KINDS, 0), "\n".join(summary.reports)
    assert all(summary.by_surface[name] >= 15 for name in fuzz.SURFACES), summary.by_surface  # each one reached
