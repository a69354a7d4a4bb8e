"""Plots from one-shot Python runs: each matplotlib figure the code shows or leaves open comes back as a PNG result.

Every Python run (no look at the code's text) is sent as ``python3 -E -s -c <WRAPPER> <code>`` (or with the
code on stdin when it is long). The wrapper runs the code as ``python -c`` (or ``python -``) would: the same
``__main__`` globals, ``sys.argv``, file name and line numbers, and a traceback without the wrapper's frames.
Before that it puts one import hook at the head of ``sys.meta_path`` that waits for ``matplotlib``:

- when ``matplotlib`` is imported, the hook sets its backend to ``module://mainsdk_figures`` (unless the run's
  environment names one in ``MPLBACKEND``); that backend draws with Agg and, as a notebook's inline backend
  does (matplotlib-inline's ``backend_inline.show``), saves every open figure at ``plt.show()`` and closes it;
- when ``matplotlib.pyplot`` is imported, the backend module is loaded, which saves the figures still open at
  exit (before pyplot's own exit hook closes them), and the hook leaves ``sys.meta_path``.

A run that never imports matplotlib pays for compiling a small run function (the hook is a string constant,
compiled only when matplotlib is imported) and one failed name check per new import.
Figures are written as ``../out/.mainsdk-figures/<n>.png``; core takes that folder out of the run's files and
returns its PNGs as ``RunResult.results`` (``take_figures``). So any driver that collects the out folder gets
them, with no driver change. Code could write that folder itself: it gets no more than it could with any out
file (the same ``limits.files`` bytes, at most ``MAX_FIGURES`` PNGs, each checked to be a PNG, and the names
it chose never shown).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import attrs

from mainsdk.driver import Collected, Command, OutFile
from mainsdk.files import FileRef
from mainsdk.rich import INLINE_LIMIT, RichResult

FOLDER = ".mainsdk-figures"  # in the out folder; reserved: what the code writes there is taken as figures
MAX_FIGURES = 50  # figures a run returns; the wrapper saves no more, core keeps no more
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_FIGURE_NAME = re.compile(r"([1-9][0-9]{0,5})\.png")

# The wrapper is three texts, standard library only. ``_RUN`` is what every run compiles: it sets up the code as
# ``python -c`` / ``python -`` would, puts a finder at the head of ``sys.meta_path`` that does nothing but compare
# names, and ``exec``s the code text (``exec`` of a string, unlike the first ``compile()`` call, does not set up
# the ``ast`` module's types: about 1 ms). ``_HOOK`` (the real finder) and ``_BACKEND`` (the matplotlib backend)
# ride along as string constants, compiled only when matplotlib is imported. Every name ``_RUN`` needs lives in
# a function, so the code's globals are the ones ``python -c`` gives.
_RUN = """\
def _mainsdk_run(hook, backend):
    import os, sys
    main = sys.modules["__main__"].__dict__
    del main["_mainsdk_run"]
    if len(sys.argv) > 1:
        code, name = sys.argv.pop(1), "<string>"
        cache = getattr(sys.modules.get("linecache"), "cache", None)
        if cache is not None and name in cache:
            cache[name] = (len(code), None, [line + "\\n" for line in code.splitlines()], name)
    else:
        code, name = sys.stdin.buffer.read(), "<stdin>"
        sys.argv[0] = "-"
        main["__file__"], main["__cached__"] = name, None
    scope = {"backend": backend, "folder": os.path.join(os.path.dirname(os.getcwd()), "out", ".mainsdk-figures")}

    def find_spec(fullname, path=None, target=None):
        if fullname not in ("matplotlib", "matplotlib.pyplot", "mainsdk_figures"):
            return None
        exec(hook, scope)
        return Hook.find_spec(fullname, path, target)

    Hook = scope["Hook"] = type(sys.implementation)(find_spec=find_spec)
    sys.meta_path.insert(0, Hook)
    here = sys._getframe()
    outer = here.f_back.f_code
    here = here.f_code
    try:
        if name == "<stdin>":
            code = compile(code, name, "exec", dont_inherit=True)
        exec(code, main)
    except SystemExit:
        raise
    except BaseException:
        if name == "<stdin>":
            for stream in (sys.stderr, sys.stdout):
                try:
                    stream.flush()
                except Exception:
                    pass
        shown = sys.excepthook

        def trimmed(kind, value, tb):
            while tb is not None and (tb.tb_frame.f_code is here or tb.tb_frame.f_code is outer):
                tb = tb.tb_next
            shown(kind, value.with_traceback(tb) if value is not None else value, tb)

        sys.excepthook = trimmed
        raise
"""

# Run once, by the first import of a matplotlib name, in a namespace holding ``Hook`` (a SimpleNamespace, cheaper
# to make than a class), ``backend`` and ``folder``: it makes ``Hook`` the real finder and loader.
# ``type(sys.__spec__)`` is ModuleSpec without an import.
_HOOK = """\
import os, sys
count = [0]

def save(figure):
    count[0] += 1
    if count[0] > 50:
        if count[0] == 51:
            sys.stderr.write("mainsdk: figures past the 50th are not kept\\n")
        return
    try:
        os.makedirs(folder, exist_ok=True)
        figure.savefig(os.path.join(folder, "%d.png" % count[0]), format="png")
    except Exception as exc:
        sys.stderr.write("mainsdk: figure %d not kept: %s\\n" % (count[0], type(exc).__name__))

def loaded(fullname, module):
    if fullname == "matplotlib":
        if "MPLBACKEND" not in os.environ:
            try:
                module.rcParams["backend"] = "module://mainsdk_figures"
            except Exception:
                pass
    else:
        try:
            __import__("mainsdk_figures")
        except Exception:
            pass
        sys.meta_path[:] = [f for f in sys.meta_path if f is not Hook]

def find_spec(fullname, path=None, target=None):
    if fullname == "mainsdk_figures":
        return type(sys.__spec__)(fullname, Hook)
    if fullname not in ("matplotlib", "matplotlib.pyplot"):
        return None
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = None if finder is Hook or find is None else find(fullname, path, target)
        if spec is not None:
            break
    else:
        return None
    loader = spec.loader
    real = getattr(loader, "exec_module", None)
    if real is None:
        return spec

    def exec_module(module):
        try:
            del loader.exec_module
        except AttributeError:
            pass
        real(module)
        loaded(fullname, module)

    try:
        loader.exec_module = exec_module
    except (AttributeError, TypeError):
        pass
    return spec

def create_module(spec):
    return None

def exec_module(module):
    module._save = save
    exec(compile(backend, "<mainsdk_figures>", "exec", dont_inherit=True), module.__dict__)

Hook.find_spec, Hook.create_module, Hook.exec_module = find_spec, create_module, exec_module
"""

# The ``mainsdk_figures`` backend module; ``_save`` is set on it before it runs.
_BACKEND = """\
import atexit, weakref
from matplotlib._pylab_helpers import Gcf
from matplotlib.backend_bases import FigureManagerBase
from matplotlib.backends.backend_agg import FigureCanvasAgg
_shown = weakref.WeakSet()

class FigureManager(FigureManagerBase):
    def show(self):
        _shown.add(self.canvas.figure)
        _save(self.canvas.figure)

class FigureCanvas(FigureCanvasAgg):
    manager_class = FigureManager

def show(*args, **kwargs):
    for _number, manager in sorted(Gcf.figs.items()):
        _save(manager.canvas.figure)
    Gcf.destroy_all()

def _left_open():
    for _number, manager in sorted(Gcf.figs.items()):
        if manager.canvas.figure not in _shown:
            _save(manager.canvas.figure)

atexit.register(_left_open)
"""

WRAPPER = f"{_RUN}_mainsdk_run({_HOOK!r}, {_BACKEND!r})\n"


def python_command(code: str, *, on_stdin: bool, timeout: float, env: Mapping[str, str]) -> Command:
    """The command that runs Python ``code`` under the wrapper (the code in argv, or on stdin when long)."""
    if on_stdin:
        return Command("python3", ("-E", "-s", "-c", WRAPPER), stdin=code.encode(), timeout=timeout, env=env)
    return Command("python3", ("-E", "-s", "-c", WRAPPER, code), timeout=timeout, env=env)


@attrs.frozen
class Figures:
    """The figures a run drew, split from its out files: ``collected`` is what is left, the code's own files."""

    collected: Collected
    pngs: tuple[bytes, ...] = ()
    dropped: int = 0  # figures not returned: past MAX_FIGURES, not a PNG, a name the wrapper never writes


def take_figures(collected: Collected) -> Figures:
    """Split the figures folder out of a run's collected out folder, in the order they were drawn."""
    files: list[OutFile] = []
    numbered: list[tuple[int, bytes]] = []
    dropped = 0
    prefix = FOLDER + "/"
    for file in collected.files:
        if not file.name.startswith(prefix):
            files.append(file)
            continue
        match = _FIGURE_NAME.fullmatch(file.name[len(prefix) :])
        if match is None or not file.data.startswith(PNG_SIGNATURE):
            dropped += 1
            continue
        numbered.append((int(match.group(1)), file.data))
    numbered.sort(key=lambda item: item[0])
    dropped += max(0, len(numbered) - MAX_FIGURES)
    # What the driver left out of the folder (past limits.files) is a figure lost, not one of the code's files.
    skipped = tuple(entry for entry in collected.skipped if not entry[0].startswith(prefix))
    dropped += len(collected.skipped) - len(skipped)
    rest = attrs.evolve(collected, files=tuple(files), skipped=skipped)
    return Figures(rest, tuple(data for _n, data in numbered[:MAX_FIGURES]), dropped)


@attrs.frozen
class Drawn:
    """The figures a run drew, as results, and how many did not come back."""

    results: tuple[RichResult, ...] = ()
    dropped: int = 0


def keep_figures(figures: Figures, put: Callable[[str, bytes], FileRef]) -> Drawn:
    """The figures as ``image/png`` results: inline up to ``INLINE_LIMIT``, else kept with ``put`` as FileRefs.

    A figure the store cannot keep is counted, not raised: the run has finished, its result stands.
    """
    results: list[RichResult] = []
    lost = 0
    for number, data in enumerate(figures.pngs, start=1):
        if len(data) <= INLINE_LIMIT:
            results.append(RichResult("image/png", data))
            continue
        try:
            results.append(RichResult("image/png", None, put(f"figure-{number}.png", data)))
        except OSError:
            lost += 1
    return Drawn(tuple(results), figures.dropped + lost)
