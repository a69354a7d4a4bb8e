"""The corpus of ``mainsdk check`` test files and what each one expects.

Every ``corpus/*.py`` file opens with comment lines that say what the check
must report in it, one line per finding:

    # expect: MAIN-SANDBOX-0010 line 7
    # expect: MAIN-SANDBOX-0010 line 9 silenced

or ``# expect: none`` for a file with no finding. Shared by the tests and
``benchmarks/check_corpus.py``.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import attrs

from mainsdk_check import find_unsafe_eval

CORPUS = Path(__file__).parent / "corpus"

Expected = tuple[str, int, bool]  # code, line, silenced
_EXPECT = re.compile(
    r"#\s*expect:\s*(?:(?P<none>none)|(?P<code>[A-Z]+-[A-Z]+-\d{4}) line (?P<line>\d+)(?P<silenced> silenced)?)\s*"
)


def corpus_files() -> list[Path]:
    """The corpus files, sorted by name."""
    return sorted(CORPUS.glob("*.py"))


def expectations(path: Path) -> Counter[Expected]:
    """The findings a corpus file's header expects; raises ValueError for a header without a valid expectation."""
    expected: Counter[Expected] = Counter()
    none = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        if not line.lstrip("# ").startswith("expect"):
            continue
        match = _EXPECT.fullmatch(line)
        if match is None:
            raise ValueError(f"{path.name}: cannot read the header line {line!r}")
        if match["none"]:
            none = True
        else:
            expected[(match["code"], int(match["line"]), bool(match["silenced"]))] += 1
    if none == bool(expected):
        raise ValueError(f"{path.name}: the header must say '# expect: none', or '# expect: CODE line N' per finding")
    return expected


def actual(path: Path) -> Counter[Expected]:
    """What the check reports in a corpus file."""
    findings = find_unsafe_eval(path.read_text(encoding="utf-8"), path.name)
    return Counter((f.code, f.line, f.silenced) for f in findings)


@attrs.frozen
class Score:
    """False positives (reported, not expected) and false negatives (expected, not reported) over the corpus."""

    files: int
    files_with_findings: int
    false_positives: int
    false_negatives: int
    mismatches: tuple[str, ...]


def score(files: list[Path] | None = None) -> Score:
    """Compare the check with every corpus file's header."""
    files = corpus_files() if files is None else files
    false_positives = false_negatives = with_findings = 0
    mismatches = []
    for path in files:
        expected, got = expectations(path), actual(path)
        with_findings += bool(expected)
        extra, missing = got - expected, expected - got
        false_positives += sum(extra.values())
        false_negatives += sum(missing.values())
        if extra or missing:
            unexpected, absent = sorted(extra.elements()), sorted(missing.elements())
            mismatches.append(f"{path.name}: unexpected {unexpected}, missing {absent}")
    return Score(len(files), with_findings, false_positives, false_negatives, tuple(mismatches))
