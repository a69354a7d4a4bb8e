"""The import graph of a package folder and the private names its modules use of each other, read with ``ast``.

A test helper, not a test: ``core/tests/test_import_graph.py`` points it at ``core/src/mainsdk``, and any other
package's test can point it at its own folder (``circles(Path(".../mainsdk_local/launcher"))``).

The rules it checks (issue 25):
- no import circle between the package's modules, counting every ``import`` and ``from ... import`` at any depth:
  under ``if TYPE_CHECKING:``, inside a function, in a ``try``. An edge goes to the module a statement names
  (``from pkg import mod`` is ``pkg.mod`` when that is a module, else ``pkg``); the implicit import of a parent
  package that Python runs first is no edge, or every package whose ``__init__`` re-exports its modules would be
  one circle.
- no module uses another module's private name: ``from pkg.mod import _name``, ``mod._name`` through an imported
  module, or ``anything._name`` (also ``getattr(x, "_name")``) on anything but ``self``/``cls`` when no class or
  function of the module itself defines ``_name``. Dunder names are not private. A module whose own name is private
  (``pkg._kernel``) is package-internal: its siblings may import it, not its underscore names.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Import:
    """One import statement's edge: ``source`` imports ``target`` at ``line``."""

    source: str
    target: str
    line: int


@dataclass(frozen=True)
class PrivateUse:
    """A use of another module's private name: where, and the expression as written."""

    module: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.text}"


def package_name(folder: Path) -> str:
    """The dotted name of the package in ``folder``: its parents up to the first one with no ``__init__.py``."""
    parts = [folder.name]
    parent = folder.parent
    while (parent / "__init__.py").exists():
        parts.insert(0, parent.name)
        parent = parent.parent
    return ".".join(parts)


def modules(folder: Path) -> dict[str, Path]:
    """Every module of the package in ``folder`` (subpackages included), by dotted name."""
    root = package_name(folder)
    found = {}
    for path in sorted(folder.rglob("*.py")):
        relative = path.relative_to(folder).with_suffix("").parts
        if relative[-1] == "__init__":
            relative = relative[:-1]
        found[".".join((root, *relative))] = path
    return found


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a ``from`` statement names, relative dots resolved against ``module``."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _deepest_module(name: str, known: dict[str, Path]) -> str:
    """The module of the package that ``name`` is or is in (``pkg.a.b`` -> ``pkg.a``), or "" for one outside it."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def imports(folder: Path) -> list[Import]:
    """Every import edge between the package's modules, at any depth of each module."""
    known = modules(folder)
    edges: list[Import] = []
    for module, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(module, path, node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            else:
                continue
            named = {_deepest_module(target, known) for target in targets} - {"", module}
            edges.extend(Import(module, target, node.lineno) for target in sorted(named))
    return edges


@dataclass(frozen=True)
class Circle:
    """Modules that import each other round (a strongly connected group), and one closed path through them."""

    members: tuple[str, ...]
    path: tuple[Import, ...]

    def __str__(self) -> str:
        text = self.path[0].source
        for edge in self.path:
            text += f" -> {edge.target} ({edge.source.rpartition('.')[2]}:{edge.line})"
        return f"{text}; the circle holds {', '.join(self.members)}" if len(self.members) > 2 else text


def circles(folder: Path) -> list[Circle]:
    """The import circles of the package in ``folder``: one per strongly connected group of its modules."""
    edges = imports(folder)
    graph: dict[str, dict[str, Import]] = {}
    for edge in edges:
        graph.setdefault(edge.source, {}).setdefault(edge.target, edge)
    found = []
    for group in _strongly_connected(graph):
        if len(group) > 1:
            found.append(Circle(tuple(sorted(group)), tuple(_cycle_through(min(group), group, graph))))
    return found


def _strongly_connected(graph: dict[str, dict[str, Import]]) -> Iterator[set[str]]:
    """Tarjan's strongly connected components, iterative (no recursion limit on a big package)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    nodes = sorted(set(graph) | {t for targets in graph.values() for t in targets})
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, {}))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                yield group


def _cycle_through(start: str, group: set[str], graph: dict[str, dict[str, Import]]) -> list[Import]:
    """A shortest closed path of imports from ``start`` back to it inside ``group`` (breadth first)."""
    came: dict[str, Import] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target, edge in sorted(graph.get(node, {}).items()):
                if target not in group or target in came:
                    continue
                came[target] = edge
                if target == start:
                    path = [edge]
                    while path[0].source != start:
                        path.insert(0, came[path[0].source])
                    return path
                following.append(target)
        frontier = following
    raise AssertionError(f"{start} is in a strongly connected group without a cycle back to it")


def private_uses(folder: Path) -> list[PrivateUse]:
    """Every use by one of the package's modules of a private name another module defines (see the rules above)."""
    known = modules(folder)
    found = []
    for module, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        own = _defined_names(tree)
        imported_modules: set[str] = set()  # local names bound to a module of the package
        outside: set[str] = set()  # local names bound to a module of another distribution (``os``)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(module, path, node)
                for alias in node.names:
                    if f"{base}.{alias.name}" in known:
                        imported_modules.add(alias.asname or alias.name)
                    elif base in known and _is_private(alias.name):
                        found.append(PrivateUse(module, node.lineno, f"from {base} import {alias.name}"))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    bound = alias.asname or alias.name.partition(".")[0]
                    (imported_modules if alias.name in known else outside).add(bound)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _is_private(node.attr):
                owner = node.value
                # Another distribution's module keeps its own conventions (``os._exit`` is documented public).
                if isinstance(owner, ast.Name) and owner.id in ("self", "cls", *outside - imported_modules):
                    continue
                through_module = isinstance(owner, ast.Name) and owner.id in imported_modules
                if through_module or node.attr not in own:
                    found.append(PrivateUse(module, node.lineno, ast.unparse(node)))
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
                and _is_private(node.args[1].value)
                and node.args[1].value not in own
            ):
                found.append(PrivateUse(module, node.lineno, ast.unparse(node)))
    return sorted(found, key=lambda use: (use.module, use.line, use.text))


def _defined_names(tree: ast.Module) -> set[str]:
    """The names a module defines itself: its functions, classes, and attributes it assigns (``x._a = ...``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            names.update(a.value for a in node.args[1:2] if isinstance(a, ast.Constant) and isinstance(a.value, str))
    return names
