"""A fixed-seed slice of the argument fuzz (``benchmarks/fuzz_arguments.py`` runs it long), on the real local driver."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def _fuzz_module() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "fuzz_arguments.py"
    spec = importlib.util.spec_from_file_location("fuzz_arguments", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # attrs resolves the module's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_the_argument_fuzz_slice_has_no_raw_exception_hang_or_misclassification() -> None:
    # 400 sets: mostly mistakes (validation only, nothing starts), about 5% real runs checked for corruption.
    raw, hangs, misclassified, reports = _fuzz_module().fuzz(seed=12, count=400, real_share=0.05, show=20)
    assert (raw, hangs, misclassified) == (0, 0, 0), "\n".join(reports)
