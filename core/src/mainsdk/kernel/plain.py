"""Cells run as plain Python, where the box has no IPython: statements, then the final expression's forms."""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import io
import linecache
import os
import sys
import traceback
import types
from collections.abc import Callable
from typing import Any

from .cell import Cell, error_of

RICH_METHODS = (
    ("image/png", "_repr_png_"),
    ("image/svg+xml", "_repr_svg_"),
    ("text/html", "_repr_html_"),
    ("application/json", "_repr_json_"),
)


def plain_bundle(value: object) -> dict[str, Any]:
    """The final expression's forms without IPython: its ``_repr_*_`` methods', and ``repr``."""
    bundle: dict[str, Any] = {}
    for mime, method in RICH_METHODS:
        fn = getattr(type(value), method, None)
        if fn is None:
            continue
        try:
            data = fn(value)
        except Exception:  # noqa: BLE001 - a broken rich form does not lose the value: its repr still comes
            continue
        if data is not None:
            bundle[mime] = data
    try:
        bundle["text/plain"] = repr(value)
    except Exception as exc:  # noqa: BLE001 - a broken repr is the value's, never the kernel's end
        bundle["text/plain"] = f"<repr failed: {type(exc).__name__}>"
    return bundle


def png(figure: Any) -> bytes:
    """One figure as PNG bytes (without IPython)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def figures(cell: Cell, shown: set[int]) -> None:
    """Every open matplotlib figure not yet shown, as a PNG, then all closed (without IPython).

    A figure that cannot be drawn is left out: it never ends the cell or the kernel."""
    pyplot: Any = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    numbers: list[int] = []
    with contextlib.suppress(Exception):
        numbers = list(pyplot.get_fignums())
    for number in numbers:
        with contextlib.suppress(Exception):
            figure = pyplot.figure(number)
            if id(figure) not in shown:
                cell.show({"image/png": png(figure)})
    with contextlib.suppress(Exception):
        pyplot.close("all")


# The cells' matplotlib backend, ``module://mainsdk_cell_figures``: Agg canvases whose ``plt.show()`` (and
# ``fig.show()``) hand the figures to the running cell's results, as matplotlib-inline's ``show`` does in a
# notebook, instead of Agg's "non-interactive, cannot be shown" warning. Its names are made only when matplotlib
# asks for the backend, so a kernel that never draws imports nothing of matplotlib.
def _backend_names(emit: Callable[[Any], None]) -> dict[str, Any]:
    gcf = importlib.import_module("matplotlib._pylab_helpers").Gcf
    bases = importlib.import_module("matplotlib.backend_bases")
    agg = importlib.import_module("matplotlib.backends.backend_agg")

    def manager_show(self: Any) -> None:
        emit(self.canvas.figure)

    def show(*args: object, **kwargs: object) -> None:
        for _number, manager in sorted(gcf.figs.items()):
            emit(manager.canvas.figure)
        gcf.destroy_all()

    manager = type("FigureManager", (bases.FigureManagerBase,), {"show": manager_show})
    canvas = type("FigureCanvas", (agg.FigureCanvasAgg,), {"manager_class": manager})
    return {"FigureManager": manager, "FigureCanvas": canvas, "show": show}


def cell_backend(emit: Callable[[Any], None]) -> types.ModuleType:
    """The backend module, put in ``sys.modules``; its names are made on first use (PEP 562)."""
    module = types.ModuleType("mainsdk_cell_figures")

    def lazy(name: str) -> Any:
        if "FigureCanvas" not in module.__dict__:
            module.__dict__.update(_backend_names(emit))
        if name in module.__dict__:
            return module.__dict__[name]
        raise AttributeError(name)

    module.__dict__["__getattr__"] = lazy
    return module


def compile_cell(code: str, filename: str) -> tuple[types.CodeType, types.CodeType | None]:
    """The cell as (statements, final expression or None), as a notebook runs it."""
    tree = ast.parse(code, filename, "exec")
    last: ast.Expression | None = None
    final = tree.body[-1] if tree.body else None
    if isinstance(final, ast.Expr):
        tree.body.pop()
        last = ast.Expression(final.value)
    body = compile(tree, filename, "exec")  # mainsdk: allow MAIN-SANDBOX-0010
    return body, (compile(last, filename, "eval") if last is not None else None)  # mainsdk: allow MAIN-SANDBOX-0010


def plain_runner(cell: Cell) -> Callable[[str, int], dict[str, str] | None]:
    """Run a cell as plain Python (no IPython in the box): statements, then the final expression's value."""
    shown: set[int] = set()

    def emit(figure: Any) -> None:
        if cell.results is not None:
            cell.show({"image/png": png(figure)})
            shown.add(id(figure))

    sys.modules["mainsdk_cell_figures"] = cell_backend(emit)
    os.environ.setdefault("MPLBACKEND", "module://mainsdk_cell_figures")  # no display in a box: PNG results
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins, "__doc__": None}

    def run(code: str, number: int) -> dict[str, str] | None:
        filename = f"<cell-{number}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        shown.clear()
        error: dict[str, str] | None = None
        try:
            body, last = compile_cell(code, filename)
            exec(body, namespace)  # mainsdk: allow MAIN-SANDBOX-0010
            value = eval(last, namespace) if last is not None else None  # mainsdk: allow MAIN-SANDBOX-0010
            if value is not None:
                namespace["_"] = value
                bundle = plain_bundle(value)
                cell.show(bundle, main=True)
        except SyntaxError as exc:
            error = error_of(exc, 2)
            error["traceback"] = "".join(traceback.format_exception_only(type(exc), exc))
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: a cell's exit() ends the cell, not the interpreter
            error = error_of(exc, 1)
        with contextlib.suppress(BaseException):  # an interrupt that lands while the figures are drawn
            figures(cell, shown)
        return error

    return run
