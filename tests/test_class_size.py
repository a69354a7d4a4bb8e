"""The project's rule "no class over 500 lines", over every Python file of the tree, tests and stand-ins included.

A class past it is the sign of a module doing two things: the fix is to split it along what it does (a base class
or a helper of its own module, as the local driver's ``CheckpointHooks``), never to raise this bound.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_CLASS_LINES = 500


def _python_files() -> list[Path]:
    # Every .py file of the checkout but what tools made: hidden folders (.tox, .venv, .git) and node_modules.
    found: list[Path] = []
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [name for name in subfolders if not name.startswith(".") and name != "node_modules"]
        found += [Path(folder, name) for name in names if name.endswith(".py")]
    return found


def test_no_class_in_the_tree_is_over_500_lines() -> None:
    files = _python_files()
    sizes = {
        f"{path.relative_to(ROOT)}:{node.name}": (node.end_lineno or node.lineno) - node.lineno + 1
        for path in files
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ClassDef)
    }
    assert len(files) > 100 and len(sizes) > 100  # the walk found the tree, not an empty folder
    assert {name: size for name, size in sizes.items() if size > MAX_CLASS_LINES} == {}
