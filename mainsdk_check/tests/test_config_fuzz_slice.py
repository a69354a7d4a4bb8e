"""The config fuzz (benchmarks/fuzz_config.py), a fixed-seed slice: main.yaml's loader and `mainsdk check` on it.

It lives with mainsdk-check because every generated file also goes through `mainsdk check`, whose exit status
must agree with the loader's verdict.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest


def _fuzz_module() -> Any:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz_config.py"
    spec = importlib.util.spec_from_file_location("fuzz_config", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_config"] = module  # attrs classes need their module registered
    spec.loader.exec_module(module)
    return module


def test_a_fixed_seed_slice_of_the_config_fuzz_has_no_raw_exception_and_no_misclassification(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MAINSDK_CONFIG", raising=False)
    fuzz = _fuzz_module()
    summary = fuzz.fuzz(seed=12, count=300, build=False, timed=False)
    assert [(o.index, o.kind, o.detail) for o in summary.raw] == []
    assert [(o.index, o.kind, o.detail, o.check_exit) for o in summary.misclassified] == []
    # Time is the benchmark's to judge (2 shared cores here); an interrupted file or 100MB is never acceptable.
    assert [(o.index, o.kind) for o in summary.outcomes if o.verdict == "hang"] == []
    assert [(o.index, o.peak_bytes) for o in summary.outcomes if o.peak_bytes > fuzz.MEMORY_BUDGET] == []
    kinds = {o.kind for o in summary.outcomes}
    assert kinds == {name for name, *_ in fuzz.GENERATORS} | {"egress"}  # egress: issue 31's mistakes
    assert sum(o.verdict == "loaded" for o in summary.outcomes) > 20  # the slice reaches past the loader too
