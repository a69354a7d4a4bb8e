# mypy: ignore-errors
# ruff: noqa: BLE001, SIM105, E402
# (The kernel catches whatever the cell raises, and must never die of a broken repr or figure. It runs cells
# with exec and eval on purpose: it is the interpreter inside the box, hence the allow comments. Its first
# statements make the supervisor undumpable, before anything else is imported: hence E402.)
"""The cell kernel: a supervisor and the interpreter it runs cells in, in the box (standard library only).

Core sends this file's text as ``python3 -I -u -c <this>`` through the driver's ordinary exec, with a random
token as the first line of its stdin, and keeps that stdin open (``Command.input``): every cell request comes
on it, one JSON object per line (``{"code", "timeout", "grace", "max_results"}``), and nothing else writes
there. The app never imports this file.

Two processes. The SUPERVISOR (this command) makes itself undumpable first (``prctl(PR_SET_DUMPABLE, 0)``), so no
other process of the box's uid can read its memory or open its descriptors through ``/proc``, then reads the token,
then the start line (one JSON object: ``{"language", "cwd", "site"}``, the interpreter to run, its folder, and the
folders of the kernel's own packages), and starts the EXECUTOR with fork+exec (``-I -u -c <this> executor R W``): a
fresh interpreter that never held the token, its stdin ``/dev/null``, its stdout and stderr the supervisor's own (a
cell's output streams live), and a private pipe pair: R brings it each cell, W takes each cell's result (one JSON
line). The executor runs cells in its main thread and, between cells, waits in ``read(R)``.

The end of a cell is the supervisor's own observation, never the executor's word: after a result line has
come, the cell is over only once ``/proc/<executor>/syscall`` shows the executor's main thread blocked in
``read`` on R (the signature measured when it first waited, before any cell ran) with the request pipe
empty. A thread a cell left behind can write lines on W, but while the main thread still runs the app's
code they end nothing. Where the box refuses a parent ``/proc/<child>/syscall`` (Yama's ptrace_scope 2 or 3)
the supervisor falls back to a probe: it writes one NUL byte on R, and the cell is over once that byte was
taken, which the executor's code does only when it waits for its next request again (weaker: a thread the
cell left reading R would take it too). The frame says which (``"watch": "syscall"`` or ``"probe"``).
Then the supervisor writes the cell's frame, ``\\x1e<token>:<json>\\n`` on stdout and ``\\x1e<token>:end\\n``
on stderr, so the app knows where the cell's output ends on both streams; the frame
carries the SHA-256 of the code the supervisor received, which the app checks against what it sent. The
token is only ever in the supervisor's memory.

Time: at a cell's timeout the supervisor sends the executor SIGINT (KeyboardInterrupt, the state survives;
the frame says ``"stop": "timeout"``); ``grace`` seconds later, if the cell has not ended, it kills the
executor and exits with status 124. An executor that dies (a crash, ``os._exit``, a kill at a limit) ends
the supervisor the same way (its exit status or signal). The app kills the whole command a little later
still, should even the supervisor be stuck.

What this does not change: a cell owns its interpreter. Its code can rewrite the executor (the loop, the
result it reports, later cells' code) and print into later cells' output; only the end of a cell, its
code's hash and the frames are out of its reach.
"""

import os
import sys

PR_SET_DUMPABLE = 4
PR_SET_PDEATHSIG = 1


def _prctl(option, value):
    """``prctl(option, value)`` through ctypes; False when the platform gives no way to call it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except Exception:
        return False


GUARDED = False
if __name__ == "__main__" and sys.argv[1:2] != ["executor"]:
    # The supervisor: undumpable before it reads the token (same-uid code cannot read its memory or descriptors).
    GUARDED = _prctl(PR_SET_DUMPABLE, 0)

import ast
import base64
import builtins
import hashlib
import io
import json
import linecache
import selectors
import signal
import time
import traceback
import types

MARK = "\x1e"
WATCHDOG_EXIT = 124  # cells.WATCHDOG_EXIT
UNSUPPORTED_EXIT = 125  # cells.UNSUPPORTED_EXIT: the box gives no way to watch the executor
TEXT_LIMIT = 64 * 1024  # cells.TEXT_LIMIT
CHECK_FIRST = 0.00005  # after a result line, how soon the supervisor looks at the executor again ...
CHECK_LAST = 0.01  # ... doubling up to this while the main thread is still busy
READY_WAIT = 30.0  # how long a new executor may take to reach its first wait
SYSCALL_PATH = "/proc/{}/syscall"  # where the supervisor sees what the executor's main thread is blocked in
PROBE = b"\0"  # the probe byte (the "probe" watch); a request line never holds one
LANGUAGES = ("python",)  # the executors this kernel can start (the start line's "language")
RICH_METHODS = (
    ("image/png", "_repr_png_"),
    ("image/svg+xml", "_repr_svg_"),
    ("text/html", "_repr_html_"),
    ("application/json", "_repr_json_"),
)


# -- the supervisor -----------------------------------------------------------------------------------------


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _own_source():
    """This file's text, as the supervisor was given it (``-c <text>``), for the executor's own ``-c``."""
    argv = list(getattr(sys, "orig_argv", ()))
    if not argv:
        with open("/proc/self/cmdline", "rb") as f:
            argv = [a.decode("utf-8", "surrogateescape") for a in f.read().split(b"\0")]
    return argv[argv.index("-c") + 1]


def _fionread(fd):
    import fcntl
    import termios

    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)


def _die_like(status):
    """End the supervisor as the executor ended (``status`` from ``waitpid``)."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), number)
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


class _Lines:
    """Complete lines out of a byte stream, each at most ``limit`` bytes (a longer one is dropped)."""

    def __init__(self, limit):
        self.limit = limit
        self.partial = []
        self.size = 0
        self.dropping = False
        self.lines = []

    def feed(self, data):
        while data:
            newline = data.find(b"\n")
            part = data if newline < 0 else data[:newline]
            if not self.dropping:
                self.partial.append(part)
                self.size += len(part)
                if self.size > self.limit:
                    self.partial, self.size, self.dropping = [], 0, True
            if newline < 0:
                return
            if not self.dropping:
                self.lines.append(b"".join(self.partial))
            self.partial, self.size, self.dropping = [], 0, False
            data = data[newline + 1 :]

    def clear(self):
        self.partial, self.size, self.dropping, self.lines = [], 0, False, []


class _Supervisor:
    """Holds the token, takes requests from stdin, runs them in the executor, writes the frames."""

    def __init__(self):
        self.stdin = _Lines(1 << 62)  # only the app writes there: a request is as long as the app sent it
        token = self._read_line().decode().strip()  # on stdin, never in argv (/proc/<pid>/cmdline is readable)
        self.mark_out = (MARK + token + ":").encode()
        self.end_err = (MARK + token + ":end\n").encode()
        del token
        self.start = self._start_line()
        self.seen = False  # result bytes came since the last look at the executor
        self.sel = selectors.SelectSelector()  # microsecond timeouts (epoll and poll round up to a millisecond)
        self.sel.register(0, selectors.EVENT_READ, "stdin")
        self._spawn()

    def _start_line(self):
        """The second stdin line: which interpreter to run, in which folder, with which kernel packages."""
        try:
            start = json.loads(self._read_line())
        except ValueError:
            start = None
        if not isinstance(start, dict):
            self._unsupported("the start line is not a JSON object")
        language = start.get("language", "python")
        if language not in LANGUAGES:
            self._unsupported(f"no executor for language {language!r}")
        site = start.get("site") or []
        if not isinstance(site, list) or not all(isinstance(folder, str) for folder in site):
            self._unsupported("the start line's site is not a list of folders")
        cwd = start.get("cwd")
        if cwd is not None:
            try:
                os.chdir(cwd)  # the executor inherits it
            except (OSError, TypeError) as exc:
                self._unsupported(f"cannot enter the interpreter's folder {cwd!r}: {exc}")
        return {"language": language, "cwd": cwd, "site": site}

    def _spawn(self):
        req_r, self.req_w = os.pipe()
        self.res_r, res_w = os.pipe()
        os.set_inheritable(req_r, True)
        os.set_inheritable(res_w, True)
        self.req_fd = req_r
        argv = [sys.executable, "-I", "-u", "-c", _own_source(), "executor", str(req_r), str(res_w)]
        argv.append(json.dumps(self.start))
        self.pid = os.posix_spawn(
            sys.executable,
            argv,
            os.environ,
            file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)],
            setsigdef=(signal.SIGINT, signal.SIGPIPE),
        )
        os.close(req_r)
        os.close(res_w)
        os.set_blocking(self.res_r, False)
        self.results = _Lines(1 << 20)
        self.sel.register(self.res_r, selectors.EVENT_READ, "results")
        try:
            self.pidfd = os.pidfd_open(self.pid)
            self.sel.register(self.pidfd, selectors.EVENT_READ, "dead")
        except (AttributeError, OSError):
            self.pidfd = None  # an old kernel: waitpid is polled instead
        self._calibrate()

    def _calibrate(self):
        """Learn what the executor's main thread looks like waiting in read(R): before any cell has run.

        The "syscall" watch, where the box lets a parent read ``/proc/<child>/syscall`` (Yama's ptrace_scope 2
        or 3 refuses it): the main thread itself is seen blocked in read(R). Otherwise the "probe" watch: a
        probe byte written on R is taken only by a thread reading R, which the executor's code does only once
        a cell is over (weaker: a thread that a cell leaves reading R takes it too; the README says so).
        """
        self.syscall = None
        self.watch = "probe"
        self.probe_out = False
        end = time.monotonic() + READY_WAIT
        while time.monotonic() < end:
            self._pump(0.0002 if self.results.lines else 0.05)
            if not self.results.lines:
                continue
            try:
                if self.syscall is None:
                    # Only once it said it is ready: until its execve the child is an undumpable copy of this
                    # process, which /proc hides or refuses.
                    self.syscall = os.open(SYSCALL_PATH.format(self.pid), os.O_RDONLY | os.O_CLOEXEC)
                state = self._main_state()
            except OSError:
                break
            if state is not None and state[1] == self.req_fd:
                self.idle_nr = state[0]
                self.watch = "syscall"
                break
        else:
            self._unsupported("the executor never reached its first wait")
        self.results.clear()

    def _unsupported(self, why):
        _write_all(2, f"mainsdk cell kernel: {why}; cells cannot run in this box\n".encode())
        self._kill_executor()
        os._exit(UNSUPPORTED_EXIT)

    def _main_state(self):
        """(syscall number, first argument) the executor's main thread is blocked in, or None when it runs.

        An OSError when the file cannot be read at all."""
        fields = os.pread(self.syscall, 256, 0).split()
        try:
            return int(fields[0]), int(fields[1], 16)
        except (ValueError, IndexError):
            return None  # "running", or a field that is not a number

    def _idle(self):
        """The executor's main thread is back waiting for a request, and none is left unread."""
        if _fionread(self.req_w):
            return False  # the request (or a probe) is still unread: the cell cannot be over
        if self.watch == "syscall":
            try:
                return self._main_state() == (self.idle_nr, self.req_fd)
            except OSError:
                return False
        if not self.probe_out:
            try:
                _write_all(self.req_w, PROBE)  # taken only once the executor waits for its next request again
            except OSError:
                return False  # no reader left: the executor is dying (the pidfd says so) or can take nothing
            self.probe_out = True
            return False
        self.probe_out = False
        return True

    def _read_line(self):
        while not self.stdin.lines:
            data = os.read(0, 1 << 16)
            if not data:
                self._kill_executor()
                os._exit(0)  # the app closed the channel: the session is over
            self.stdin.feed(data)
        return self.stdin.lines.pop(0)

    def _kill_executor(self):
        pid = getattr(self, "pid", None)
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass

    def _pump(self, timeout):
        """Wait up to ``timeout`` for anything: result bytes (kept), a request (kept), the executor's death."""
        for key, _ in self.sel.select(timeout):
            if key.data == "results":
                try:
                    data = os.read(self.res_r, 1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    # Every W is closed: the executor is dying (its death comes on the pidfd), or a cell closed
                    # it and no cell can end by a result again (its timeout still ends it). Never spin on it.
                    self.sel.unregister(self.res_r)
                    continue
                self.results.feed(data)
                self.seen = True
            elif key.data == "dead":
                self._reap(0)
            elif key.data == "stdin":
                data = os.read(0, 1 << 16)
                if not data:
                    self._kill_executor()
                    os._exit(0)
                self.stdin.feed(data)
        if self.pidfd is None:
            self._reap(os.WNOHANG)

    def _end_with_executor(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass
        self._reap(0)

    def _reap(self, flags):
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:
            pid, status = self.pid, 1 << 8
        if pid == self.pid:
            _die_like(status)

    def _drain(self):
        while True:
            try:
                data = os.read(self.res_r, 1 << 16)
            except BlockingIOError:
                return
            if not data:
                return
            self.results.feed(data)

    def serve(self):
        number = 0
        self.seen = False
        while True:
            while not self.stdin.lines:
                self._pump(None if self.pidfd is not None else 0.05)
                self._drain()
                self.results.clear()  # what a thread writes between cells is nobody's result
            request = json.loads(self.stdin.lines.pop(0))
            number += 1
            self.cell(number, request)

    def cell(self, number, request):
        code = request["code"]
        digest = hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()
        max_results = int(request.get("max_results", 1 << 20))
        self.results.limit = 8 * max_results + (1 << 20)
        self._drain()
        self.results.clear()
        self.seen = False
        message = {"cell": number, "code": code, "max_results": max_results}
        try:
            _write_all(self.req_w, json.dumps(message).encode() + b"\n")
        except OSError:
            self._end_with_executor()  # it can take no request: it died, or a cell closed its end
        deadline = time.monotonic() + float(request["timeout"])
        grace = float(request.get("grace", 1.0))
        kill_at = None
        check_at, interval = 0.0, CHECK_FIRST
        while True:
            now = time.monotonic()
            until = (deadline if kill_at is None else kill_at) - now
            if self.seen:
                until = min(until, check_at - now)
            if self.pidfd is None:
                until = min(until, 0.05)
            self._pump(max(until, 0.0))
            now = time.monotonic()
            if self.seen and now >= check_at:
                if self._idle():
                    break
                check_at, interval = now + interval, min(interval * 2, CHECK_LAST)
            if kill_at is None and now >= deadline:
                os.kill(self.pid, signal.SIGINT)
                kill_at = now + grace
            elif kill_at is not None and now >= kill_at:
                self._kill_executor()
                os._exit(WATCHDOG_EXIT)  # the cell would not stop: the state goes with the interpreter
        self._drain()  # the main thread is waiting: all it wrote is in the pipe
        frame = None
        for line in reversed(self.results.lines):
            try:
                candidate = json.loads(line)
            except ValueError:
                continue
            if isinstance(candidate, dict) and candidate.get("cell") == number:
                frame = candidate
                break
        self.results.clear()
        if frame is None:
            error = "the interpreter's result for this cell was lost: something in it wrote on the kernel's pipe"
            frame = {"results": [], "results_dropped": 0, "error": {"name": "KernelError", "value": error}}
        out = {
            "cell": number,
            "results": frame.get("results", []),
            "results_dropped": frame.get("results_dropped", 0),
            "error": frame.get("error"),
            "stop": "timeout" if kill_at is not None else None,
            "code_sha256": digest,
            "undumpable": GUARDED,
            "watch": self.watch,
        }
        _write_all(1, self.mark_out + json.dumps(out).encode() + b"\n")
        _write_all(2, self.end_err)


# -- the executor: runs the cells -------------------------------------------------------------------------


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


def _executor(req_fd, res_fd, start):
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the supervisor gone, nothing would ever end this cell
    sys.argv[:] = [""]
    sys.path.insert(0, "")  # a notebook imports from its folder (``-I`` left it out while the kernel imported)
    # The kernel's own packages come after the user's site-packages: a user who pins one of them gets theirs.
    sys.path.extend(start.get("site") or [])
    os.set_inheritable(req_fd, False)
    os.set_inheritable(res_fd, False)
    current = [None, set()]  # the running cell's results, and the ids of the figures it has shown

    def emit(figure):
        results_now, shown = current
        if results_now is not None:
            _png(figure, results_now)
            shown.add(id(figure))

    sys.modules["mainsdk_cell_figures"] = _cell_backend(emit)
    os.environ.setdefault("MPLBACKEND", "module://mainsdk_cell_figures")  # no display in a box: PNG results
    namespace = {"__name__": "__main__", "__builtins__": builtins, "__doc__": None}
    running = [False]

    def interrupt(signum, frame):
        # Only a running cell is interrupted: a SIGINT that lands after it ended must not break the kernel.
        if running[0]:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    pending = []

    def next_request():
        # The main thread waits here, in read(req_fd), between cells: what the supervisor watches for.
        while True:
            joined = b"".join(pending)
            if b"\n" in joined:
                line, _, rest = joined.partition(b"\n")
                pending[:] = [rest] if rest else []
                return json.loads(line)
            pending[:] = [joined]
            data = os.read(req_fd, 1 << 16)
            if not data:
                os._exit(0)
            pending.append(data.replace(PROBE, b""))  # the supervisor's probes: "this thread waits here"

    _write_all(res_fd, b'{"ready": true}\n')
    while True:
        request = next_request()
        number = request["cell"]
        results = _Results(int(request.get("max_results", 1 << 20)))
        current[:] = [results, set()]
        filename = f"<cell-{number}>"
        code = request["code"]
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        error = None
        try:
            try:
                running[0] = True
                body, last = _compile_cell(code, filename)
                exec(body, namespace)  # mainsdk: allow MAIN-SANDBOX-0010
                value = eval(last, namespace) if last is not None else None  # mainsdk: allow MAIN-SANDBOX-0010
            finally:
                running[0] = False
            if value is not None:
                namespace["_"] = value
                results.add_value(value)
        except SyntaxError as exc:
            error = _error(exc, 2)
            error["traceback"] = "".join(traceback.format_exception_only(type(exc), exc))
        except BaseException as exc:  # SystemExit too: a cell's exit() ends the cell, not the interpreter
            error = _error(exc, 1)
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
        frame = {"cell": number, "results": results.items, "results_dropped": results.dropped, "error": error}
        try:
            data = json.dumps(frame).encode() + b"\n"
        except Exception:
            data = json.dumps({"cell": number, "results": [], "results_dropped": len(results.items), "error": error})
            data = data.encode() + b"\n"
        _write_all(res_fd, data)


if __name__ == "__main__":
    if sys.argv[1:2] == ["executor"]:
        _executor(int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4]))
    else:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the executor's to take (it is reset there)
        _Supervisor().serve()
