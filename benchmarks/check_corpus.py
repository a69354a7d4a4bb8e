"""Score ``mainsdk check`` (MAIN-SANDBOX-0010) against its test corpus.

Prints ``false positives: N, false negatives: M`` over mainsdk_check/tests/corpus,
where each file's header says what must be reported, and exits 1 unless
both are zero. Run from anywhere: ``python benchmarks/check_corpus.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

CHECK_TESTS = Path(__file__).resolve().parent.parent / "mainsdk_check" / "tests"


def main() -> int:
    """Print the score and return the exit status."""
    sys.path.insert(0, str(CHECK_TESTS))  # the corpus reader lives with the tests that share it
    from _check_corpus import score

    result = score()
    for mismatch in result.mismatches:
        print(mismatch)
    print(
        f"corpus: {result.files} files, {result.files_with_findings} with findings, "
        f"{result.files - result.files_with_findings} without"
    )
    print(f"false positives: {result.false_positives}, false negatives: {result.false_negatives}")
    return 1 if result.false_positives or result.false_negatives else 0


if __name__ == "__main__":
    sys.exit(main())
