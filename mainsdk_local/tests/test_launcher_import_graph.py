"""The launcher's modules import each other without a circle, none calls another's private names, and the server
has its parts (an executor, a warm pool) instead of mixing them in.

Read from the source with ``ast``, so every import counts: at the top, under ``TYPE_CHECKING`` and inside
functions. A circle (``boxes`` importing ``runs`` for a type while ``runs`` imports ``boxes``) means two
modules that cannot be read, changed or tested one without the other; a private name used from outside
(``stages._code_launch``) is a module's inside that another relies on. Siblings are imported by their full
module name (``from . import stages``), never under a short alias.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mainsdk_local.launcher

PACKAGE = Path(mainsdk_local.launcher.__file__).parent
MODULES = sorted(path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__")


def _tree(name: str) -> ast.Module:
    return ast.parse((PACKAGE / f"{name}.py").read_text(), filename=f"{name}.py")


def _sibling_imports(tree: ast.Module) -> dict[str, dict[str, str]]:
    """Each sibling module this one imports -> {name bound here: the sibling's name it stands for}.

    ``from . import stages`` binds ``stages`` to the module (its name ""); ``from .runs import Run`` binds ``Run``.
    """
    found: dict[str, dict[str, str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level != 1:
            continue
        for alias in node.names:
            if node.module is None:  # from . import stages [as ...]
                found.setdefault(alias.name, {})[alias.asname or alias.name] = ""
            else:  # from .runs import Run [as ...]
                found.setdefault(node.module.split(".")[0], {})[alias.asname or alias.name] = alias.name
    return {module: names for module, names in found.items() if module in MODULES}


def _graph() -> dict[str, set[str]]:
    return {name: set(_sibling_imports(_tree(name))) for name in MODULES}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_checks_see_a_circle_and_a_private_call() -> None:
    """The checks below find what they look for (a check that cannot fail proves nothing)."""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"a"}}) == [["a"]]
    assert _circles({"a": {"b"}, "b": set()}) == []
    source = "from . import stages\nfrom .runs import _helper\ndef f():\n    stages._code_launch()\n"
    assert _private_uses(ast.parse(source)) == ["_helper", "stages._code_launch"]


def test_no_import_circle_in_the_launcher() -> None:
    graph = _graph()
    assert len(graph) >= 20  # the package's modules were found
    assert "runs" in graph["server"] or "runs" in graph.get("execs", set())  # and their imports read
    assert _circles(graph) == []


def _private_uses(tree: ast.Module) -> list[str]:
    """Private names of sibling modules this module imports or reads (``from .x import _y``, ``x._y``)."""
    imports = _sibling_imports(tree)
    module_names = {bound for names in imports.values() for bound, name in names.items() if name == ""}
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is not None:
            found += [alias.name for alias in node.names if alias.name.startswith("_")]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in module_names
            and node.attr.startswith("_")
        ):
            found.append(f"{node.value.id}.{node.attr}")
    return sorted(found)


def test_no_launcher_module_uses_another_ones_private_names() -> None:
    used = {name: _private_uses(_tree(name)) for name in MODULES}
    assert {name: names for name, names in used.items() if names} == {}


def test_siblings_are_imported_by_their_full_name() -> None:
    """``from . import stages``, never ``from . import stages as S``: ``S`` and ``C`` read as the forked stages."""
    renamed = {
        name: sorted(
            f"{module} as {bound}"
            for module, names in _sibling_imports(_tree(name)).items()
            for bound, original in names.items()
            if original == "" and bound != module
        )
        for name in MODULES
    }
    assert {name: aliases for name, aliases in renamed.items() if aliases} == {}


def _stub_blocks(tree: ast.Module) -> list[str]:
    """Classes whose body holds an ``if TYPE_CHECKING:`` block: methods of another class re-declared (a mixin's)."""
    return sorted(
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any(
            isinstance(item, ast.If) and isinstance(item.test, ast.Name) and item.test.id == "TYPE_CHECKING"
            for item in node.body
        )
    )


def test_the_server_has_its_parts_instead_of_mixing_them_in() -> None:
    """``Server`` has an executor and a warm pool; no class stands in for another's methods with stubs."""
    assert _stub_blocks(ast.parse("class A:\n    if TYPE_CHECKING:\n        def f(self) -> None: ...\n")) == ["A"]
    server = next(
        node for node in ast.walk(_tree("server")) if isinstance(node, ast.ClassDef) and node.name == "Server"
    )
    assert [ast.unparse(base) for base in server.bases] == []
    assert {name: found for name in MODULES if (found := _stub_blocks(_tree(name)))} == {}
