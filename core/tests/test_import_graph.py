"""Core's modules import each other without a circle, and none uses another's private names (issue 25).

The graph counts every import, also under ``TYPE_CHECKING`` and inside functions (``import_graph``): a circle
hidden that way is still two modules that cannot be understood, or moved, one without the other.
"""

from __future__ import annotations

from pathlib import Path

import mainsdk
import pytest
from import_graph import circles, imports, modules, private_uses

CORE = Path(mainsdk.__file__).parent
# Every package folder held to the rules; the launcher's own test points the same functions at its folder.
PACKAGES = [CORE]


@pytest.mark.parametrize("folder", PACKAGES, ids=lambda folder: folder.name)
def test_no_module_imports_itself_round_a_circle(folder: Path) -> None:
    found = circles(folder)
    assert not found, "import circles:\n" + "\n".join(str(circle) for circle in found)


@pytest.mark.parametrize("folder", PACKAGES, ids=lambda folder: folder.name)
def test_no_module_uses_another_modules_private_names(folder: Path) -> None:
    found = private_uses(folder)
    assert not found, "private names used across modules:\n" + "\n".join(str(use) for use in found)


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


def test_the_graph_counts_type_checking_function_and_relative_imports(tmp_path: Path) -> None:
    package = write(
        tmp_path / "pkg",
        {
            "__init__.py": "from pkg.a import A\n",
            "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\nA = 1\n",
            "b.py": "def f():\n    from . import c\n",
            "c.py": "import pkg.sub.d\n",
            "sub/__init__.py": "",
            "sub/d.py": "from .. import a\nimport os\n",
        },
    )
    assert set(modules(package)) == {"pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.sub", "pkg.sub.d"}
    edges = {(edge.source, edge.target) for edge in imports(package)}
    assert edges == {
        ("pkg", "pkg.a"),
        ("pkg.a", "pkg.b"),
        ("pkg.b", "pkg.c"),
        ("pkg.c", "pkg.sub.d"),
        ("pkg.sub.d", "pkg.a"),
    }
    [circle] = circles(package)
    assert circle.members == ("pkg.a", "pkg.b", "pkg.c", "pkg.sub.d")
    assert str(circle) == (
        "pkg.a -> pkg.b (a:3) -> pkg.c (b:2) -> pkg.sub.d (c:1) -> pkg.a (d:1); "
        "the circle holds pkg.a, pkg.b, pkg.c, pkg.sub.d"
    )


def test_a_two_module_circle_is_named_with_its_lines(tmp_path: Path) -> None:
    package = write(tmp_path / "pkg", {"__init__.py": "", "x.py": "import pkg.y\n", "y.py": "\n\nfrom pkg import x\n"})
    assert [str(c) for c in circles(package)] == ["pkg.x -> pkg.y (x:1) -> pkg.x (y:3)"]
    assert circles(write(tmp_path / "ok", {"__init__.py": "", "x.py": "import ok.y\n", "y.py": ""})) == []


def test_private_names_of_another_module_are_found(tmp_path: Path) -> None:
    package = write(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "owner.py": "class Thing:\n    def _mine(self):\n        return self._mine\n    def __eq__(self, o):\n"
            "        return o._mine\n_helper = 1\n",
            "user.py": "import os\nfrom pkg import owner\nfrom pkg.owner import _helper, Thing\n"
            "def f(thing: Thing):\n    os._exit(0)\n    thing._mine()\n    owner._helper\n"
            "    getattr(thing, '_mine')\n    thing.__class__\n",
            "_internal.py": "",
            "friend.py": "from pkg import _internal\n",
        },
    )
    assert [str(use) for use in private_uses(package)] == [
        "pkg.user:3: from pkg.owner import _helper",
        "pkg.user:6: thing._mine",
        "pkg.user:7: owner._helper",
        "pkg.user:8: getattr(thing, '_mine')",
    ]
