# mypy: ignore-errors
# ruff: noqa: BLE001, SIM105, E402
# (The kernel catches whatever the cell raises, and must never die of a broken repr or figure. It runs cells
# with exec and eval on purpose: it is the interpreter inside the box, hence the allow comments. Its first
# statements make the supervisor undumpable, before anything else is imported: hence E402.)
"""The cell kernel: a supervisor and the interpreter it runs cells in, in the box (standard library only).

Core sends this file's text as ``python3 -I -u -c <this>`` through the driver's ordinary exec, with a random
token as the first line of its stdin, and keeps that stdin open (``Command.input``): every cell request comes
on it, one JSON object per line (``{"code", "timeout", "grace", "max_results"}``, and optionally ``"env"``, the
cell's own variables over the session's, restored after it, and ``"pip_index": true`` when ``%pip`` may reach the
package index), and nothing else writes there. The app never imports this file.

Two processes. The SUPERVISOR (this command) makes itself undumpable first (``prctl(PR_SET_DUMPABLE, 0)``), so no
other process of the box's uid can read its memory or open its descriptors through ``/proc``, then reads the token,
then the start line (one JSON object: ``{"language", "cwd", "site"}``, the interpreter to run, its folder, and the
folders of the kernel's own packages), and starts the EXECUTOR with fork+exec (``-I -u -c <this> executor R W``): a
fresh interpreter that never held the token, its stdin ``/dev/null``, its stdout and stderr the supervisor's own (a
cell's output streams live), and a private pipe pair: R brings it each cell, W takes each cell's result (one JSON
line). The executor runs cells in its main thread and, between cells, waits in ``read(R)``.

The start line's language picks the executor. ``python``: this file again, as above. ``javascript`` and
``typescript``: ``node --expose-internals -e <_kernel_node.js> R W <language> <site...>``; ``bash``: ``bash
--noprofile --norc -c <_kernel_bash.sh> mainsdk-bash R W`` (their sources travel in this text, ``EXECUTORS``,
which ``cells.kernel_source()`` fills in; each file's header says how it runs a cell). Those two are forked in
a process group of their own with a parent-death SIGKILL, so the timeout's SIGINT reaches the cell's
foreground job too (a ``sleep`` in bash, a child a JS cell waits on synchronously). Bash reads its requests as
one line of escaped fields (``_request_line``), having no JSON parser; every executor writes the same JSON
result line, and every guarantee below holds the same for each: the program is found on the box's ``PATH``,
and a box without it ends the kernel with 125 and a message naming it.

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

Display outputs come live: the executor writes each one (``display()``, a figure, the final expression's result,
all its MIME forms) on W as it is made, ``{"cell", "display", "results"}``, and the supervisor sends it on at once
as a frame of its own, ``\\x1e<token>:{"cell", "display", "results"}\\n`` on stdout (never with ``code_sha256``:
the app never takes one for the cell's end), for ``on_result``. The end frame still holds every result; each
item says its output (``"display"``, an index) and whether it is the final expression's (``"main"``).

The executor runs cells through IPython's ``InteractiveShell`` when it can import IPython (the driver's kernel
package set, ``site`` in the start line, after the user's site-packages): IPython's input transformers, magics,
``!cmd``, display formatter and traceback text. Without IPython it runs plain Python (statements, then the
final expression's ``repr`` and ``_repr_*_`` forms).

Time: at a cell's timeout the supervisor sends the executor SIGINT (KeyboardInterrupt, the state survives;
in node an "Interrupted" error, in bash the status 130, with the same caveats each file states; the frame
says ``"stop": "timeout"``); ``grace`` seconds later, if the cell has not ended, it kills the
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
LANGUAGES = ("python", "javascript", "typescript", "bash")  # the executors this kernel can start
# The node and bash executors' sources by language (cells.kernel_source() puts them here: the box has no other copy).
EXECUTORS = {}
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
        self.group = False  # the executor leads a process group of its own (node, bash): signals go to the group
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
        if self.start["language"] != "python":
            return self._spawn_other(self.start["language"])
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
        self._watch_executor()

    def _spawn_other(self, language):
        """Start the node or bash executor: fork+exec, in a process group of its own, with a parent-death kill.

        Its own group, so a timeout's SIGINT reaches the cell's foreground job (a ``sleep`` in bash, a child a
        JS cell waits on synchronously) as a terminal's Ctrl-C would; the parent-death SIGKILL, because a
        group of its own is out of reach of whatever ends the supervisor's group.
        """
        import shutil

        program = "bash" if language == "bash" else "node"
        path = shutil.which(program)
        if path is None:
            self._unsupported(f"{language} cells need {program} on the box's PATH, and this box has none")
        source = EXECUTORS.get(program)
        if not source:
            self._unsupported(f"this kernel was sent without its {program} executor")
        req_r, self.req_w = os.pipe()
        self.res_r, res_w = os.pipe()
        os.set_inheritable(req_r, True)
        os.set_inheritable(res_w, True)
        self.req_fd = req_r
        if program == "bash":
            argv = [path, "--noprofile", "--norc", "-c", source, "mainsdk-bash", str(req_r), str(res_w)]
        else:
            argv = [path, "--expose-internals", "-e", source, str(req_r), str(res_w), language, *self.start["site"]]
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: nothing but system calls until execve
            try:
                os.setpgid(0, 0)
                _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                if os.getppid() != parent:
                    os._exit(1)  # the supervisor died before the parent-death signal was set
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.close(null)
                for number in (signal.SIGINT, signal.SIGPIPE):
                    signal.signal(number, signal.SIG_DFL)
                os.execve(path, argv, os.environ)
            finally:
                os._exit(127)
        self.pid = pid
        self.group = True
        os.close(req_r)
        os.close(res_w)
        self._watch_executor()

    def _watch_executor(self):
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

    def _signal(self, number):
        """Send the executor (and for node and bash, its group: the cell's foreground job) a signal."""
        if self.group:
            try:
                os.killpg(self.pid, number)
                return
            except OSError:
                pass
        os.kill(self.pid, number)

    def _kill_executor(self):
        pid = getattr(self, "pid", None)
        if pid is None:
            return
        try:
            self._signal(signal.SIGKILL)
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

    def _request_line(self, message):
        """The request as the executor reads it: a JSON line, or for bash one line of escaped fields."""
        if self.start["language"] != "bash":
            return json.dumps(message).encode() + b"\n"
        fields = [str(message["cell"]), message["code"]]
        for name, value in (message.get("env") or {}).items():
            fields += [str(name), str(value)]
        # Each field ":" and its text escaped as printf %b reads it back (a NUL cannot be in a bash string).
        escaped = (
            ":" + f.replace("\0", "").replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t") for f in fields
        )
        return "\t".join(escaped).encode("utf-8", "surrogatepass") + b"\n"

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

    def _forward_displays(self, number):
        """Send each display output the executor reported for cell ``number`` as a live frame (``on_result``).

        Its lines are taken out of the results; True when nothing else is left there (the cell still runs). A
        live frame holds ``"display"`` and never ``"code_sha256"``: the app never takes one for the cell's end.
        """
        kept = []
        for line in self.results.lines:
            try:
                candidate = json.loads(line) if line.startswith(b'{"cell": ') and b'"display": ' in line else None
            except ValueError:
                candidate = None
            if not (isinstance(candidate, dict) and candidate.get("cell") == number and "display" in candidate):
                kept.append(line)
                continue
            live = {"cell": number, "display": candidate["display"], "results": candidate.get("results", [])}
            _write_all(1, self.mark_out + json.dumps(live).encode() + b"\n")
        self.results.lines = kept
        if kept or self.results.partial:
            return False
        self.seen = False
        return True

    def cell(self, number, request):
        code = request["code"]
        digest = hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()
        max_results = int(request.get("max_results", 1 << 20))
        self.results.limit = 8 * max_results + (1 << 20)
        self._drain()
        self.results.clear()
        self.seen = False
        message = {"cell": number, "code": code, "max_results": max_results}
        for key in ("env", "pip_index"):  # the cell's own env over the session's; whether %pip may reach the index
            if key in request:
                message[key] = request[key]
        try:
            _write_all(self.req_w, self._request_line(message))
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
            if self.results.lines and self._forward_displays(number):
                check_at, interval = 0.0, CHECK_FIRST  # only displays came: the cell is still running
            now = time.monotonic()
            if self.seen and now >= check_at:
                if self._idle():
                    break
                check_at, interval = now + interval, min(interval * 2, CHECK_LAST)
            if kill_at is None and now >= deadline:
                self._signal(signal.SIGINT)
                kill_at = now + grace
            elif kill_at is not None and now >= kill_at:
                self._kill_executor()
                os._exit(WATCHDOG_EXIT)  # the cell would not stop: the state goes with the interpreter
        self._drain()  # the main thread is waiting: all it wrote is in the pipe
        self._forward_displays(number)
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

# MIME types whose data is bytes (sent base64); every other form is text. IPython's formatters give these as bytes.
BINARY_MIMES = ("image/png", "image/jpeg", "application/pdf")
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
PIP_TARGET = os.path.join("~", ".mainsdk", "pip-packages")  # where %pip installs in a session (expanded at start)
NO_INDEX = (
    "pip: this box has no route to the package index (pypi.org and files.pythonhosted.org are not among the "
    "session's hosts), so nothing was installed. Add the package as name==version to sandbox.packages.python "
    "in main.yaml (for example `packages: {{python: [{example}]}}`) and create the session with it, or allow "
    "both hosts for the session to install here.\n"
)


class _Results:
    """The rich results of one cell, bounded in bytes (what does not fit is counted, not sent).

    Each display output is a bundle of forms (one MIME type each); every item says which output it belongs to
    (``display``, its index in the cell) and whether that output is the final expression's (``main``).
    """

    def __init__(self, max_bytes):
        self.items = []
        self.dropped = 0
        self.displays = 0
        self._room = max_bytes

    def add(self, mime, data, index=None, main=False):
        """One form as a result item (None when it does not fit or cannot be encoded)."""
        if isinstance(data, (bytes, bytearray, memoryview)):
            text, encoding = base64.b64encode(bytes(data)).decode("ascii"), "base64"
        elif mime in BINARY_MIMES and isinstance(data, str):
            try:  # IPython gives a binary form as base64 text when the object did
                raw = base64.b64decode(data.encode("ascii"), validate=False)
            except (ValueError, UnicodeEncodeError):
                self.dropped += 1
                return None
            text, encoding = base64.b64encode(raw).decode("ascii"), "base64"
        elif not isinstance(data, str):
            try:
                text, encoding = json.dumps(data, default=repr), "utf-8"
            except (TypeError, ValueError):
                self.dropped += 1
                return None
        else:
            text, encoding = data, "utf-8"
        if len(text) > self._room:
            self.dropped += 1
            return None
        self._room -= len(text)
        item = {"mime": mime, "data": text, "encoding": encoding}
        if index is not None:
            item["display"] = index
            item["main"] = main
        self.items.append(item)
        return item

    def add_bundle(self, bundle, main=False):
        """One display output, all its forms (``text/plain`` last), as result items; the items sent."""
        index = self.displays
        self.displays += 1
        sent = []
        forms = [(m, d) for m, d in bundle.items() if isinstance(m, str) and m != "text/plain"]
        if "text/plain" in bundle:
            forms.append(("text/plain", bundle["text/plain"]))
        for mime, data in forms:
            if data is None:
                continue
            item = self.add(mime, data, index, main)
            if item is not None:
                sent.append(item)
        return sent


class _Cell:
    """The running cell, as the executor's display hooks see it: its results, sent live as each output comes."""

    def __init__(self, res_fd):
        self.res_fd = res_fd
        self.number = None
        self.results = None
        self.lock = None  # made once threads exist (a thread may display while the main thread writes)

    def show(self, bundle, main=False):
        """One display output: kept for the cell's result and sent to the supervisor at once (``on_result``)."""
        results, number = self.results, self.number
        if results is None or not isinstance(bundle, dict):
            return  # between cells (a thread's display): nobody's result
        items = results.add_bundle(bundle, main)
        if not items:
            return
        for stream in (sys.stdout, sys.stderr):  # the output before it reaches the app before it
            try:
                stream.flush()
            except Exception:
                pass
        line = json.dumps({"cell": number, "display": items[0]["display"], "results": items}).encode() + b"\n"
        self.write(line)

    def write(self, data):
        if self.lock is None:
            import threading

            self.lock = threading.Lock()
        with self.lock:
            _write_all(self.res_fd, data)


class _InlineBackend:
    """Makes matplotlib's default backend IPython's inline one when a cell first imports matplotlib.

    Set in ``rcParams``, not as ``MPLBACKEND`` in the environment, which every child process would inherit
    without the kernel's packages on its path (``!python plot.py`` would fail to import the backend). A
    backend the code names itself (``MPLBACKEND``, ``matplotlib.use``, ``%matplotlib``) wins.
    """

    def find_spec(self, name, path=None, target=None):
        if name != "matplotlib":
            return None
        import importlib.util

        try:
            sys.meta_path.remove(self)  # once: the real finders find it
        except ValueError:
            pass
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or "MPLBACKEND" in os.environ:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            try:
                module.rcParams["backend"] = INLINE_BACKEND
            except Exception:
                pass

        spec.loader.exec_module = exec_module
        return spec


def _pip_command(code_line):
    """``pip``'s arguments when a ``!`` command is pip (``pip``, ``pip3``, ``python -m pip``), else None."""
    import shlex

    try:
        words = shlex.split(code_line)
    except ValueError:
        return None
    if words and os.path.basename(words[0]) in ("pip", "pip3"):
        return words[1:]
    if len(words) >= 3 and os.path.basename(words[0]).startswith("python") and words[1:3] == ["-m", "pip"]:
        return words[3:]
    return None


class _Pip:
    """``%pip`` and ``!pip``: installs into the session (a folder on ``sys.path``) when the index is in reach."""

    def __init__(self, site):
        self.site = list(site)
        self.target = os.path.expanduser(PIP_TARGET)
        self.index = False  # the running cell's: pypi.org and files.pythonhosted.org among the session's hosts

    def run(self, args, shell):
        import subprocess

        if args[:1] == ["install"] and not self.index:
            import re

            named = [a for a in args[1:] if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[^\]]*\])?(==\S+)?", a)]
            example = next((a for a in named if not a.endswith((".txt", ".whl"))), "name")
            if "==" not in example:
                example += "==<version>"
            sys.stderr.write(NO_INDEX.format(example=example))
            shell.user_ns["_exit_code"] = 1
            return
        argv = [sys.executable, "-m", "pip", *args]
        if args[:1] == ["install"]:
            os.makedirs(self.target, exist_ok=True)
            # --target: the session's own folder, never the box's site-packages (no PEP 668 wall, nothing shared).
            argv[4:4] = ["--target", self.target, "--no-input", "--disable-pip-version-check", "--upgrade"]
        env = dict(os.environ)
        # pip itself comes from the kernel's packages when the box's python has none of its own.
        env["PYTHONPATH"] = os.pathsep.join([*self.site, *filter(None, [env.get("PYTHONPATH")])])
        try:
            status = subprocess.call(argv, env=env, stdin=subprocess.DEVNULL)
        except KeyboardInterrupt:
            status = 130
        shell.user_ns["_exit_code"] = status
        if args[:1] == ["install"] and status == 0:
            import importlib

            if self.target not in sys.path:
                at = next((i for i, p in enumerate(sys.path) if p in self.site), len(sys.path))
                sys.path.insert(at, self.target)  # after the user's site-packages, before the kernel's own
            importlib.invalidate_caches()
            print("Note: an already imported package needs the interpreter restarted to see the new version.")


def _ipython_shell(cell, pip):
    """An IPython ``InteractiveShell`` whose displays and final results go to ``cell``; None without IPython."""
    try:
        from IPython.core.displayhook import DisplayHook
        from IPython.core.displaypub import DisplayPublisher
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets import Type
        from traitlets.config import Config
    except Exception:
        return None

    class Publisher(DisplayPublisher):
        """``display()``: each output, all its forms, to the cell (a notebook's display_data)."""

        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
            cell.show(data)

        def clear_output(self, wait=False):
            pass  # what was sent is the app's already

    class Hook(DisplayHook):
        """The final expression's result, all its forms, to the cell (a notebook's execute_result)."""

        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            cell.show(format_dict, main=True)

        def log_output(self, format_dict):
            pass  # IPython would keep every output's bundle in its history for as long as the kernel lives

    class Shell(InteractiveShell):
        displayhook_class = Type(Hook)
        display_pub_class = Type(Publisher)

        def _showtraceback(self, etype, evalue, stb):
            # The traceback goes in the cell's error (IPython's text, no colours), not on its stdout.
            self.last_traceback_text = self.InteractiveTB.stb2text(stb)

        def enable_gui(self, gui=None):
            # A box has no screen: inline figures (results) need no event loop; a GUI backend cannot show.
            if gui not in (None, "inline"):
                from IPython.core.error import UsageError

                raise UsageError(f"the box has no display for the {gui!r} GUI; use %matplotlib inline")

        def system(self, cmd):
            args = _pip_command(self.var_expand(cmd, depth=1))
            if args is not None:
                return pip.run(args, self)
            return self.system_raw(cmd)  # straight on the box's stdout and stderr, as it comes

    config = Config()
    config.HistoryManager.hist_file = ":memory:"  # history in memory: nothing of the cells written to the box's disk
    config.HistoryManager.db_log_output = False
    try:
        shell = Shell.instance(config=config, colors="nocolor")
    except Exception as exc:  # an IPython this executor cannot drive (a box's own, far older): plain cells
        sys.stderr.write(f"mainsdk cell kernel: IPython did not start ({type(exc).__name__}: {exc}); plain Python\n")
        return None
    shell.last_traceback_text = ""

    def pip_magic(line):
        """Install packages into this session with pip (when the session may reach the package index)."""
        import shlex

        pip.run(shlex.split(line), shell)

    shell.register_magic_function(pip_magic, "line", "pip")
    register = globals().get("register_forms")  # the data forms of charts and frames (_kernel_forms.py)
    if callable(register):
        try:
            register(shell)
        except Exception:
            pass
    return shell


def _plain_bundle(value):
    """The final expression's forms without IPython: its ``_repr_*_`` methods', and ``repr``."""
    bundle = {}
    for mime, method in RICH_METHODS:
        fn = getattr(type(value), method, None)
        if fn is None:
            continue
        try:
            data = fn(value)
        except Exception:  # a broken rich form does not lose the value: its repr still comes
            continue
        if data is not None:
            bundle[mime] = data
    try:
        bundle["text/plain"] = repr(value)
    except Exception as exc:
        bundle["text/plain"] = f"<repr failed: {type(exc).__name__}>"
    return bundle


def _png(figure):
    """One figure as PNG bytes (without IPython)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _figures(cell, shown):
    """Every open matplotlib figure not yet shown, as a PNG, then all closed (without IPython)."""
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
                cell.show({"image/png": _png(figure)})
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
    site = list(start.get("site") or [])  # the supervisor checked it: folders
    # The kernel's own packages come after the user's site-packages: a user who pins one of them gets theirs.
    sys.path.extend(site)
    os.set_inheritable(req_fd, False)
    os.set_inheritable(res_fd, False)
    cell = _Cell(res_fd)
    pip = _Pip(site)
    shell = _ipython_shell(cell, pip)  # imported before the folder joins sys.path: nothing planted there runs
    if shell is not None:
        sys.meta_path.insert(0, _InlineBackend())
        run = _ipython_runner(shell)
    else:
        run = _plain_runner(cell)
    sys.path.insert(0, "")  # a notebook imports from its folder (``-I`` left it out while the kernel imported)
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

    cell.write(b'{"ready": true}\n')
    while True:
        request = next_request()
        number = request["cell"]
        results = _Results(int(request.get("max_results", 1 << 20)))
        cell.number, cell.results = number, results
        pip.index = request.get("pip_index") is True
        env = request.get("env") if isinstance(request.get("env"), dict) else {}
        saved = {name: os.environ.get(name) for name in env}
        error = None
        try:
            os.environ.update({str(k): str(v) for k, v in env.items()})  # this cell's own, over the session's
            running[0] = True
            error = run(request["code"], number)
        except BaseException as exc:  # an interrupt that landed in the kernel's own code, between the cell's
            error = _error(exc, 0)
        finally:
            running[0] = False
            for name, value in saved.items():
                try:
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
                except Exception:
                    pass
        cell.number, cell.results = None, None
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
        cell.write(data)


def _ipython_runner(shell):
    """Run a cell as IPython runs it: transformers, magics, ``!cmd``, display hooks, its traceback text."""

    def run(code, number):
        shell.last_traceback_text = ""
        outcome = shell.run_cell(code, store_history=True)
        exc = outcome.error_before_exec or outcome.error_in_exec
        if exc is None:
            return None
        try:
            value = str(exc)
        except Exception:
            value = "<str failed>"
        text = shell.last_traceback_text or "".join(traceback.format_exception_only(type(exc), exc))
        return {"name": type(exc).__name__, "value": value[:TEXT_LIMIT], "traceback": text[-TEXT_LIMIT:]}

    return run


def _plain_runner(cell):
    """Run a cell as plain Python (no IPython in the box): statements, then the final expression's value."""
    shown = set()

    def emit(figure):
        if cell.results is not None:
            cell.show({"image/png": _png(figure)})
            shown.add(id(figure))

    sys.modules["mainsdk_cell_figures"] = _cell_backend(emit)
    os.environ.setdefault("MPLBACKEND", "module://mainsdk_cell_figures")  # no display in a box: PNG results
    namespace = {"__name__": "__main__", "__builtins__": builtins, "__doc__": None}

    def run(code, number):
        filename = f"<cell-{number}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        shown.clear()
        error = None
        try:
            body, last = _compile_cell(code, filename)
            exec(body, namespace)  # mainsdk: allow MAIN-SANDBOX-0010
            value = eval(last, namespace) if last is not None else None  # mainsdk: allow MAIN-SANDBOX-0010
            if value is not None:
                namespace["_"] = value
                bundle = _plain_bundle(value)
                cell.show(bundle, main=True)
        except SyntaxError as exc:
            error = _error(exc, 2)
            error["traceback"] = "".join(traceback.format_exception_only(type(exc), exc))
        except BaseException as exc:  # SystemExit too: a cell's exit() ends the cell, not the interpreter
            error = _error(exc, 1)
        try:
            _figures(cell, shown)
        except BaseException:
            pass
        return error

    return run


if __name__ == "__main__":
    if sys.argv[1:2] == ["executor"]:
        _executor(int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4]))
    else:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the executor's to take (it is reset there)
        _Supervisor().serve()
