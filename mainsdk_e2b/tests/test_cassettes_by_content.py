"""Every cassette of this driver matches the cell kernel by content: a comment edit changes none of them.

This folder's conftest runs every test with a comment of the kernel edited (``edited_kernel``): each replay is
the check that the cassette did not need the kernel's bytes. Here: the edit is really in force, no cassette
holds a line of the kernel (only its name), and the cassettes stay within their size budget.
"""

from __future__ import annotations

import json
from pathlib import Path

from mainsdk import kernel_start
from mainsdk_conformance.plugin import EDITED_COMMENT

TESTS = Path(__file__).resolve().parent
CASSETTES = sorted(p for p in TESTS.rglob("*.json") if "cassettes" in p.parts)


def test_the_kernel_every_test_here_runs_has_a_comment_edited(edited_kernel: str) -> None:
    assert EDITED_COMMENT in edited_kernel
    assert edited_kernel in kernel_start.kernel_files()["supervisor.py"]
    assert edited_kernel.encode() in kernel_start.package_bytes()
    _, args, _ = kernel_start.kernel_command("t" * 32, {})
    assert args[-1] == kernel_start.kernel_files()["loader.py"] and EDITED_COMMENT in args[-1]


def test_no_cassette_holds_the_kernels_text() -> None:
    # Each module's longest lines, JSON-escaped as a cassette would hold them.
    lines = {
        json.dumps(line)[1:-1]
        for text in kernel_start.kernel_files().values()
        for line in sorted(text.splitlines(), key=len)[-3:]
    }
    assert CASSETTES
    for path in CASSETTES:
        text = path.read_text()
        held = [line for line in lines if line in text]
        assert not held, f"{path.relative_to(TESTS)} holds the kernel's text: {held[0][:80]!r}"
