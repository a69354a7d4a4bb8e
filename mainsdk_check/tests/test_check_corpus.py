"""The corpus: every file's header says exactly what MAIN-SANDBOX-0010 must report in it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _check_corpus import actual, corpus_files, expectations, score

REPO = Path(__file__).resolve().parents[2]


def test_the_corpus_is_large_enough_and_has_both_kinds() -> None:
    files = corpus_files()
    with_findings = [path for path in files if expectations(path)]
    assert len(files) >= 40
    assert len(with_findings) >= 20
    assert len(files) - len(with_findings) >= 20


@pytest.mark.parametrize("path", corpus_files(), ids=lambda path: path.stem)
def test_corpus_file(path: Path) -> None:
    assert actual(path) == expectations(path)


def test_score_is_zero() -> None:
    result = score()
    assert (result.false_positives, result.false_negatives) == (0, 0), result.mismatches


def test_benchmark_script_prints_zero_and_exits_0() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "check_corpus.py")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "false positives: 0, false negatives: 0" in done.stdout


def test_a_wrong_header_is_counted(tmp_path: Path) -> None:
    # The scorer itself must see a false positive and a false negative, or a zero proves nothing.
    wrong = tmp_path / "wrong.py"
    wrong.write_text("# expect: MAIN-SANDBOX-0010 line 3\n\nx = 1\neval(x)\n", encoding="utf-8")
    result = score([wrong])
    assert (result.false_positives, result.false_negatives) == (1, 1)


def test_a_header_without_expectation_is_refused(tmp_path: Path) -> None:
    bare = tmp_path / "bare.py"
    bare.write_text("# nothing said\nx = 1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="header"):
        expectations(bare)
