"""The figures of one-shot Python runs, in the box: ``run.py`` runs this text (a string it carries) when the code
first imports a matplotlib name. ``wake`` makes the waiting finder set matplotlib's backend to ``mainsdk_figures``
(unless ``MPLBACKEND`` names one): Agg, saving each figure as ``<n>.png`` at ``plt.show()`` as matplotlib-inline
does, and at exit those still open (before pyplot's exit hook closes them). Standard library only.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import weakref
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

MAX_FIGURES = 50  # core keeps no more (mainsdk.figures)
BACKEND = "mainsdk_figures"
WATCHED = ("matplotlib", "matplotlib.pyplot")


def wake(finder: Any, folder: str) -> None:
    """Make ``finder`` (first on ``sys.meta_path``) load matplotlib's names and the backend, saving in ``folder``."""
    count = [0]

    def save(figure: Any) -> None:
        count[0] += 1
        if count[0] > MAX_FIGURES:
            if count[0] == MAX_FIGURES + 1:
                sys.stderr.write(f"mainsdk: figures past the {MAX_FIGURES}th are not kept\n")
            return
        try:
            os.makedirs(folder, exist_ok=True)
            figure.savefig(os.path.join(folder, f"{count[0]}.png"), format="png")
        except Exception as exc:  # noqa: BLE001 - a figure lost never ends the run
            sys.stderr.write(f"mainsdk: figure {count[0]} not kept: {type(exc).__name__}\n")

    def loaded(fullname: str, module: ModuleType) -> None:
        if fullname == "matplotlib":
            if "MPLBACKEND" not in os.environ:
                with contextlib.suppress(Exception):  # refused: matplotlib's own backend
                    module.rcParams["backend"] = f"module://{BACKEND}"
            return
        with contextlib.suppress(Exception):  # an odd matplotlib: no figures
            __import__(BACKEND)
        sys.meta_path[:] = [f for f in sys.meta_path if f is not finder]

    def find_spec(fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if fullname == BACKEND:
            return ModuleSpec(fullname, finder)
        if fullname not in WATCHED:
            return None
        spec: ModuleSpec | None = None
        for other in sys.meta_path:
            find = getattr(other, "find_spec", None)
            spec = None if other is finder or find is None else find(fullname, path, target)
            if spec is not None:
                break
        loader: Any = spec.loader if spec is not None else None
        real = getattr(loader, "exec_module", None)
        if real is None:
            return spec

        def exec_module(module: ModuleType) -> None:
            with contextlib.suppress(AttributeError):
                del loader.exec_module
            real(module)
            loaded(fullname, module)

        with contextlib.suppress(AttributeError, TypeError):  # an odd loader: no figures
            loader.exec_module = exec_module
        return spec

    def exec_module(module: ModuleType) -> None:
        backend(module, save)

    finder.find_spec, finder.create_module, finder.exec_module = find_spec, lambda spec: None, exec_module


def backend(module: ModuleType, save: Any) -> None:
    """Fill the ``mainsdk_figures`` module: Agg canvases whose ``show`` saves, and the figures left open at exit."""
    gcf: Any = __import__("matplotlib._pylab_helpers", fromlist=["Gcf"]).Gcf
    bases: Any = __import__("matplotlib.backend_bases", fromlist=["FigureManagerBase"])
    agg: Any = __import__("matplotlib.backends.backend_agg", fromlist=["FigureCanvasAgg"])
    shown: weakref.WeakSet[Any] = weakref.WeakSet()

    def manager_show(self: Any) -> None:
        shown.add(self.canvas.figure)
        save(self.canvas.figure)

    def show(*args: object, **kwargs: object) -> None:
        for _number, manager in sorted(gcf.figs.items()):
            save(manager.canvas.figure)
        gcf.destroy_all()

    def left_open() -> None:
        for _number, manager in sorted(gcf.figs.items()):
            if manager.canvas.figure not in shown:
                save(manager.canvas.figure)

    manager = type("FigureManager", (bases.FigureManagerBase,), {"show": manager_show})
    canvas = type("FigureCanvas", (agg.FigureCanvasAgg,), {"manager_class": manager})
    module.__dict__.update(FigureManager=manager, FigureCanvas=canvas, show=show)
    atexit.register(left_open)
