# mypy: ignore-errors
# ruff: noqa: BLE001, SIM105
# (The kernel catches whatever the cell raises, and must never die of a broken repr or figure. It runs cells
# with exec and eval on purpose: it is the interpreter inside the box, hence the allow comments.)
"""The cell kernel: a Python interpreter that lives in the box as long as its session (standard library only).

Core sends this file's text as ``python3 -E -s -u -c <this> <folder>``, with a random token on stdin, through
the driver's ordinary exec, so every driver that can keep one command running gets cells. The app never
imports it.

Protocol: the app writes cell N as ``<folder>/<N>.json`` (``{"code", "timeout", "grace", "max_results"}``)
with the driver's write-file call; the kernel polls for it, deletes it and runs it. The cell's own output goes
to fd 1 and 2 as it is made. When the cell is over the kernel writes one frame on stdout,
``\\x1e<token>:<json>\\n``, and ``\\x1e<token>:end\\n`` on stderr, so the app knows where the cell's output
ends on both streams. The token is random per interpreter and is not in the cell's namespace or argv, so
output that merely looks like a frame (a file the cell prints) is never taken as one.

Time: a watchdog thread sends SIGINT at the cell's timeout (KeyboardInterrupt, the state survives) and ends
the interpreter with ``os._exit`` after ``grace`` more seconds if the cell is still running; the app kills the
whole command a little later still, should even the watchdog be stuck.
"""

import ast
import base64
import builtins
import io
import json
import linecache
import os
import signal
import sys
import threading
import time
import traceback
import types

MARK = "\x1e"
WATCHDOG_EXIT = 124  # cells.WATCHDOG_EXIT
TEXT_LIMIT = 64 * 1024  # cells.TEXT_LIMIT
IDLE_POLLS = ((0.5, 0.0002), (5.0, 0.002), (60.0, 0.02))  # (seconds idle, poll interval) steps; then 0.05 s
RICH_METHODS = (
    ("image/png", "_repr_png_"),
    ("image/svg+xml", "_repr_svg_"),
    ("text/html", "_repr_html_"),
    ("application/json", "_repr_json_"),
)


def _poll_interval(idle):
    for limit, interval in IDLE_POLLS:
        if idle < limit:
            return interval
    return 0.05


def _wait_for(path):
    since = time.monotonic()
    while True:
        try:
            with open(path, "rb") as f:
                raw = f.read()
            request = json.loads(raw)  # a half-written file does not parse yet: read it again
            os.unlink(path)
            return request
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(_poll_interval(time.monotonic() - since))


class _Results:
    """The rich results of one cell, bounded in bytes (what does not fit is counted, not sent)."""

    def __init__(self, max_bytes):
        self.items = []
        self.dropped = 0
        self._room = max_bytes

    def add(self, mime, data):
        if isinstance(data, bytes):
            text, encoding = base64.b64encode(data).decode("ascii"), "base64"
        elif mime == "application/json" and not isinstance(data, str):
            text, encoding = json.dumps(data, default=repr), "utf-8"
        else:
            text, encoding = str(data), "utf-8"
        if len(text) > self._room:
            self.dropped += 1
            return
        self._room -= len(text)
        self.items.append({"mime": mime, "data": text, "encoding": encoding})

    def add_value(self, value):
        bundle = {}
        for mime, method in RICH_METHODS:
            fn = getattr(type(value), method, None)
            if fn is None:
                continue
            try:
                data = fn(value)
            except Exception:  # a broken rich form does not lose the value: its repr still comes
                continue
            if data is None:
                continue
            if mime == "image/png" and isinstance(data, str):
                try:
                    data = base64.b64decode(data, validate=True)
                except ValueError:
                    continue
            bundle[mime] = data
        for mime, data in bundle.items():
            self.add(mime, data)
        try:
            text = repr(value)
        except Exception as exc:
            text = f"<repr failed: {type(exc).__name__}>"
        self.add("text/plain", text)


def _png(figure, results):
    """One figure as a PNG result."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    results.add("image/png", buffer.getvalue())


def _figures(results, shown):
    """Every open matplotlib figure not yet shown as a PNG, then all closed: what a notebook shows at a cell's end."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    try:
        numbers = list(pyplot.get_fignums())
    except Exception:
        return
    for number in numbers:
        try:
            figure = pyplot.figure(number)
            if id(figure) not in shown:
                _png(figure, results)
        except Exception:
            continue
    try:
        pyplot.close("all")
    except Exception:
        pass


# The cells' matplotlib backend, ``module://mainsdk_cell_figures``: Agg canvases whose ``plt.show()`` (and
# ``fig.show()``) hand the figures to the running cell's results, as matplotlib-inline's ``show`` does in a
# notebook, instead of Agg's "non-interactive, cannot be shown" warning. Its text runs only when matplotlib asks
# for the backend, so a kernel that never draws imports nothing of matplotlib.
_BACKEND = """
from matplotlib._pylab_helpers import Gcf
from matplotlib.backend_bases import FigureManagerBase
from matplotlib.backends.backend_agg import FigureCanvasAgg


class FigureManager(FigureManagerBase):
    def show(self):
        _emit(self.canvas.figure)


class FigureCanvas(FigureCanvasAgg):
    manager_class = FigureManager


def show(*args, **kwargs):
    for _number, manager in sorted(Gcf.figs.items()):
        _emit(manager.canvas.figure)
    Gcf.destroy_all()
"""


def _cell_backend(emit):
    """The backend module, put in ``sys.modules``; its names are made on first use (PEP 562)."""
    module = types.ModuleType("mainsdk_cell_figures")

    def lazy(name):
        if "FigureCanvas" not in module.__dict__:
            module.__dict__["_emit"] = emit
            text = compile(_BACKEND, "<mainsdk_cell_figures>", "exec")  # mainsdk: allow MAIN-SANDBOX-0010
            exec(text, module.__dict__)  # mainsdk: allow MAIN-SANDBOX-0010
        if name in module.__dict__:
            return module.__dict__[name]
        raise AttributeError(name)

    module.__getattr__ = lazy
    return module


def _compile_cell(code, filename):
    """The cell as (statements, final expression or None), as a notebook runs it."""
    tree = ast.parse(code, filename, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    body = compile(tree, filename, "exec")  # mainsdk: allow MAIN-SANDBOX-0010
    return body, (compile(last, filename, "eval") if last is not None else None)  # mainsdk: allow MAIN-SANDBOX-0010


def _error(exc, skip):
    tb = exc.__traceback__
    for _ in range(skip):  # the kernel's own frames are not the cell's
        if tb is not None:
            tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    try:
        value = str(exc)
    except Exception:
        value = "<str failed>"
    return {"name": type(exc).__name__, "value": value[:TEXT_LIMIT], "traceback": text[-TEXT_LIMIT:]}


# Bound now, before any cell runs: a cell that rebinds os._exit or os.kill does not disarm the watchdog.
_EXIT = os._exit
_KILL = os.kill
_PID = os.getpid()


class _Watchdog:
    """Interrupts the running cell at its timeout, and ends the interpreter a grace later."""

    def __init__(self):
        self._lock = threading.Lock()
        self._cell = None
        self.interrupted = False
        self._wake = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def arm(self, cell, timeout, grace):
        with self._lock:
            self._cell = (cell, time.monotonic() + timeout, grace)
            self.interrupted = False
        self._wake.set()

    def disarm(self):
        with self._lock:
            self._cell = None

    def _run(self):
        while True:
            self._wake.wait()
            self._wake.clear()
            while True:
                with self._lock:
                    armed = self._cell
                if armed is None:
                    break
                _cell, deadline, grace = armed
                now = time.monotonic()
                if now < deadline:
                    self._wake.wait(deadline - now)
                    self._wake.clear()
                    continue
                with self._lock:
                    if self._cell is not armed:
                        continue
                    self.interrupted = True
                _KILL(_PID, signal.SIGINT)
                end = time.monotonic() + grace
                while time.monotonic() < end:
                    time.sleep(0.01)
                    with self._lock:
                        if self._cell is not armed:
                            break
                else:
                    _EXIT(WATCHDOG_EXIT)  # the cell would not stop: the state goes with the interpreter
                break


def main():
    token = sys.stdin.readline().strip()  # on stdin, never in argv (/proc/<pid>/cmdline is readable)
    folder = sys.argv[1]
    sys.argv[:] = [""]
    frame_out = os.dup(1)
    frame_err = os.dup(2)
    os.set_inheritable(frame_out, False)
    os.set_inheritable(frame_err, False)
    os.makedirs(folder, exist_ok=True)
    folder = os.path.abspath(folder)
    mark_out = (MARK + token + ":").encode()
    end_err = (MARK + token + ":end\n").encode()
    del token
    current = [None, set()]  # the running cell's results, and the ids of the figures it has shown

    def emit(figure):
        results_now, shown = current
        if results_now is not None:
            _png(figure, results_now)
            shown.add(id(figure))

    sys.modules["mainsdk_cell_figures"] = _cell_backend(emit)
    os.environ.setdefault("MPLBACKEND", "module://mainsdk_cell_figures")  # no display in a box: PNG results
    namespace = {"__name__": "__main__", "__builtins__": builtins, "__doc__": None}
    watchdog = _Watchdog()
    running = [False]

    def interrupt(signum, frame):
        # Only a running cell is interrupted: a SIGINT that lands after it ended must not break the kernel.
        if running[0]:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    number = 0
    while True:
        number += 1
        request = _wait_for(os.path.join(folder, f"{number}.json"))
        results = _Results(int(request.get("max_results", 1 << 20)))
        current[:] = [results, set()]
        filename = f"<cell-{number}>"
        code = request["code"]
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        error = None
        stop = None
        started = time.monotonic()
        watchdog.arm(number, float(request["timeout"]), float(request.get("grace", 1.0)))
        try:
            try:
                running[0] = True
                body, last = _compile_cell(code, filename)
                exec(body, namespace)  # mainsdk: allow MAIN-SANDBOX-0010
                value = eval(last, namespace) if last is not None else None  # mainsdk: allow MAIN-SANDBOX-0010
            finally:
                running[0] = False
                watchdog.disarm()
            if value is not None:
                namespace["_"] = value
                results.add_value(value)
        except KeyboardInterrupt as exc:
            if watchdog.interrupted:
                stop = "timeout"
            error = _error(exc, 1)
        except SyntaxError as exc:
            error = _error(exc, 2)
            error["traceback"] = "".join(traceback.format_exception_only(type(exc), exc))
        except BaseException as exc:  # SystemExit too: a cell's exit() ends the cell, not the interpreter
            error = _error(exc, 1)
        duration = time.monotonic() - started
        try:
            _figures(results, current[1])
        except BaseException:
            pass
        current[:] = [None, set()]
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        frame = {
            "cell": number,
            "results": results.items,
            "results_dropped": results.dropped,
            "error": error,
            "stop": stop,
            "duration": duration,
        }
        data = mark_out + json.dumps(frame).encode() + b"\n"
        while data:
            data = data[os.write(frame_out, data) :]
        os.write(frame_err, end_err)


if __name__ == "__main__":
    main()
