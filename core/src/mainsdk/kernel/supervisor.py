"""The kernel's supervisor: holds the token, takes the app's requests, runs each cell in the executor, writes frames.

See the package's docstring for the protocol. ``main`` is called by the loader, in the process the app started.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import select
import shutil
import signal
import sys
import termios
import time
from typing import Any, NoReturn

from .loader import fail, prctl
from .protocol import LANGUAGES, MARK, NODE_CONSTANTS, PROBE, UNSUPPORTED_EXIT, WATCHDOG_EXIT
from .watch import IDLE_WAIT, Watch

PR_SET_PDEATHSIG = 1
CHECK_FIRST = 0.00005  # after a result line, how soon the supervisor looks at the executor again ...
CHECK_LAST = 0.01  # ... doubling up to this while the main thread is still busy
READY_POLL = 0.005  # how often, at most, the supervisor looks whether the executor is ready for a request
READY_WAIT = 30.0  # how long a new executor may take to reach its first wait
HELD = (
    "the interpreter was not waiting for a cell: code an earlier cell left (a signal handler, a trap, a callback) "
    "holds it"
)
TAKEN = "code an earlier cell left (a thread reading the kernel's request pipe) took this cell's request"
# How node runs its executor: the code on the descriptor in argv[1], checked against the SHA-256 in argv[2].
NODE_BOOT = (
    'const fs=require("fs");const fd=Number(process.argv[1]);const code=fs.readFileSync(fd,"utf8");'
    "fs.closeSync(fd);"
    'if(require("crypto").createHash("sha256").update(code).digest("hex")!==process.argv[2]){'
    'process.stderr.write("mainsdk cell kernel: the node executor does not match its SHA-256\\n");'
    f"process.exit({UNSUPPORTED_EXIT})}}"
    'require("vm").runInThisContext(code,{filename:"mainsdk_kernel/node_executor.js"})(require,process.argv.slice(3),(s)=>import(s))'
)
# How bash runs its executor: the script on the descriptor in $3 (bash reads a sourced file whole, then runs it).
BASH_BOOT = 'source "/dev/fd/$3"'
MFD_ALLOW_SEALING = 2


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            # node makes the stdout and stderr it shares with the supervisor non-blocking (one open file for
            # both): wait until the pipe takes more, never lose the frame or die of EAGAIN.
            select.select([], [fd], [])


def _fionread(fd: int) -> int:
    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)


def _die_like(status: int) -> NoReturn:
    """End the supervisor as the executor ended (``status`` from ``waitpid``)."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def code_fd(data: bytes) -> int:
    """A descriptor of a sealed in-memory file holding ``data``, for an executor to read its code from.

    Sealed (no write, no resize): a process of the box that opens it through ``/proc/<executor>/fd`` can read the
    kernel's code, which is no secret, but never change it. A box with no sealed memory file cannot run cells.
    """
    try:
        fd = os.memfd_create("mainsdk-kernel", MFD_ALLOW_SEALING)
    except (AttributeError, OSError) as exc:
        fail(f"the box gives no in-memory file to hand the executor its code (memfd_create: {exc})")
    _write_all(fd, data)
    seals = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL
    try:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    except OSError as exc:
        fail(f"the box cannot seal the executor's code file (F_ADD_SEALS: {exc})")
    os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    return fd


def executor_argv(
    program: str, language: str, code: int, digest: str, req: int, res: int, start: dict[str, Any], loader: str
) -> list[str]:
    """The executor's command line: never its code (that comes on the descriptor ``code``, checked by ``digest``)."""
    pipes = [str(req), str(res)]
    if language == "python":
        return [program, "-I", "-u", "-c", loader, "executor", digest, str(code), *pipes, json.dumps(start)]
    if language == "bash":
        return [program, "--noprofile", "--norc", "-c", BASH_BOOT, "mainsdk-bash", *pipes, str(code)]
    constants = json.dumps(NODE_CONSTANTS)
    return [
        program,
        "--expose-internals",
        "-e",
        NODE_BOOT,
        str(code),
        digest,
        *pipes,
        language,
        constants,
        *start["site"],
    ]


class _Lines:
    """Complete lines out of a byte stream, each at most ``limit`` bytes (a longer one is dropped)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.partial: list[bytes] = []
        self.size = 0
        self.dropping = False
        self.lines: list[bytes] = []

    def feed(self, data: bytes) -> None:
        """Take a chunk of the stream."""
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

    def clear(self) -> None:
        """Forget every line and the partial one."""
        self.partial, self.size, self.dropping, self.lines = [], 0, False, []


class _Supervisor:
    """Holds the token, takes requests from stdin, runs them in the executor, writes the frames."""

    def __init__(
        self, token: bytes, rest: bytes, files: dict[str, str], raw: bytes, digest: str, guarded: bool
    ) -> None:
        self.stdin = _Lines(1 << 62)  # only the app writes there: a request is as long as the app sent it
        self.stdin.feed(rest)  # what came after the package (the start line, maybe a first request)
        self.mark_out = MARK.encode() + token.strip() + b":"
        self.end_err = MARK.encode() + token.strip() + b":end\n"
        self.files, self.raw, self.digest = files, raw, digest
        self.guarded = guarded
        self.pid: int | None = None
        self.group = False  # the executor leads a process group of its own (node, bash): signals go to the group
        self.start = self._start_line()
        self.seen = False  # result bytes came since the last look at the executor
        self.interrupting = False  # the running cell was sent SIGINT (its timeout, its flood of display lines)
        self.flooded = False  # the running cell's display lines passed their bound
        self.live_bytes = 0
        # What ``_pump`` waits on, by descriptor: select's microsecond timeouts (epoll and poll round up to a
        # millisecond), called directly (a selector's bookkeeping costs a warm cell more than the call itself).
        self.watched = {0: "stdin"}
        self._spawn()

    def _start_line(self) -> dict[str, Any]:
        """The line after the package: which interpreter to run, in which folder, with which kernel packages."""
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

    def _spawn(self) -> None:
        """Start the executor for the start line's language, with its pipes, and learn how to watch it.

        Python: ``posix_spawn`` of the loader, in this process group. Node and bash: fork+exec in a process group
        of their own with a parent-death SIGKILL. Their own group, so a timeout's SIGINT reaches the cell's
        foreground job (a ``sleep`` in bash, a child a JS cell waits on synchronously) as a terminal's Ctrl-C
        would; the parent-death SIGKILL, because a group of their own is out of reach of whatever ends the
        supervisor's group.
        """
        language = self.start["language"]
        if language == "python":
            path, text = sys.executable, self.raw
        else:
            program = "bash" if language == "bash" else "node"
            found = shutil.which(program)
            if found is None:
                self._unsupported(f"{language} cells need {program} on the box's PATH, and this box has none")
            path, text = found, self.files[f"{program}_executor.{'sh' if program == 'bash' else 'js'}"].encode()
        digest = self.digest if language == "python" else hashlib.sha256(text).hexdigest()
        code = code_fd(text)
        req_r, self.req_w = os.pipe()
        self.res_r, res_w = os.pipe()
        os.set_inheritable(req_r, True)
        os.set_inheritable(res_w, True)
        self.req_fd = req_r
        argv = executor_argv(path, language, code, digest, req_r, res_w, self.start, self.files["loader.py"])
        if language == "python":
            self.pid = os.posix_spawn(
                path,
                argv,
                os.environ,
                file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)],
                setsigdef=(signal.SIGINT, signal.SIGPIPE),
            )
        else:
            self.pid = self._fork_exec(path, argv)
            self.group = True
        for fd in (req_r, res_w, code):
            os.close(fd)
        self._watch_executor()

    @staticmethod
    def _fork_exec(path: str, argv: list[str]) -> int:
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: nothing but system calls until execve
            try:
                os.setpgid(0, 0)
                prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
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
        return pid

    def _watch_executor(self) -> None:
        os.set_blocking(self.res_r, False)
        self.results = _Lines(1 << 20)
        self.watched[self.res_r] = "results"
        self.pidfd: int | None = None
        try:
            assert self.pid is not None
            self.pidfd = os.pidfd_open(self.pid)
            self.watched[self.pidfd] = "dead"
        except (AttributeError, OSError):
            self.pidfd = None  # an old kernel: waitpid is polled instead
        self._calibrate()

    def _calibrate(self) -> None:
        """Learn what the executor's waiter looks like waiting in read(R): before any cell has run.

        The "syscall" watch, where the box lets a parent read ``/proc/<child>/task/<tid>/syscall`` (Yama's
        ptrace_scope 2 or 3 refuses it): the waiter itself is seen blocked in read(R) (``watch.py``). Otherwise
        the "probe" watch: a probe byte written on R is taken only by a thread reading R, which the executor's
        code does only once a cell is over (weaker: code that a cell leaves reading R takes it too; the README
        says so).
        """
        assert self.pid is not None
        self.waiter = Watch(self.pid, self.req_fd, self.start["language"])
        self.watch = "probe"
        self.probe_out = False
        end = time.monotonic() + READY_WAIT
        while time.monotonic() < end:
            self._pump(0.0002 if self.results.lines else 0.05)
            if not self.results.lines:
                continue
            try:
                # Only once it said it is ready: until its execve the child is an undumpable copy of this
                # process, which /proc hides or refuses.
                found = self.waiter.find()
            except OSError:
                break
            if found:
                probe = lambda: _write_all(self.req_w, PROBE)  # noqa: E731 - what the warm-up writes
                if not self.waiter.warm_up(probe, lambda: not _fionread(self.req_w), self._pump):
                    self._unsupported("the executor never came back to its first wait")
                self.watch = "syscall"
                break
        else:
            self._unsupported("the executor never reached its first wait")
        self.results.clear()

    def _unsupported(self, why: str) -> NoReturn:
        self._kill_executor()
        fail(why)

    def _idle(self) -> bool:
        """The executor's waiter is back waiting for a request, took this cell's, and none is left unread."""
        if _fionread(self.req_w):
            return False  # the request (or a probe) is still unread: the cell cannot be over
        if self.watch == "syscall":
            if not self.waiter.took_request():
                return False  # the waiter never read since the request came: another thread took it
            try:
                return self.waiter.waiting()
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

    def _read_line(self) -> bytes:
        while not self.stdin.lines:
            data = os.read(0, 1 << 16)
            if not data:
                self._kill_executor()
                os._exit(0)  # the app closed the channel: the session is over
            self.stdin.feed(data)
        return self.stdin.lines.pop(0)

    def _signal(self, number: int) -> None:
        """Send the executor (and for node and bash, its group: the cell's foreground job) a signal."""
        assert self.pid is not None
        if self.group:
            try:
                os.killpg(self.pid, number)
                return
            except OSError:
                pass
        os.kill(self.pid, number)

    def _kill_executor(self) -> None:
        if self.pid is None:
            return
        with contextlib.suppress(OSError):
            self._signal(signal.SIGKILL)
            os.waitpid(self.pid, 0)

    def _pump(self, timeout: float | None) -> None:
        """Wait up to ``timeout`` for anything: result bytes (kept), a request (kept), the executor's death."""
        for fd in select.select(list(self.watched), [], [], timeout)[0]:
            what = self.watched.get(fd)
            if what == "results":
                try:
                    data = os.read(self.res_r, 1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    # Every W is closed: the executor is dying (its death comes on the pidfd), or a cell closed
                    # it and no cell can end by a result again (its timeout still ends it). Never spin on it.
                    del self.watched[self.res_r]
                    continue
                self.results.feed(data)
                self.seen = True
            elif what == "dead":
                self._reap(0)
            elif what == "stdin":
                data = os.read(0, 1 << 16)
                if not data:
                    self._kill_executor()
                    os._exit(0)
                self.stdin.feed(data)
        if self.pidfd is None:
            self._reap(os.WNOHANG)

    def _end_with_executor(self) -> None:
        assert self.pid is not None
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        self._reap(0)

    def _reap(self, flags: int) -> None:
        assert self.pid is not None
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:
            pid, status = self.pid, 1 << 8
        if pid == self.pid:
            if self.interrupting:
                # It died of (or after) the interrupt the supervisor sent at the cell's timeout: a cell that put
                # SIGINT back to its default (bash's ``trap - INT``) ends at its timeout, as one ignoring it does.
                os._exit(WATCHDOG_EXIT)
            _die_like(status)

    def _await_ready(self) -> bool:
        """Whether the waiter is back at its own wait for a request (up to IDLE_WAIT): only then does a request
        go, so code an earlier cell left sitting in read(R) (a handler, a trap, a callback) never takes it."""
        if self.watch != "syscall":
            return True
        end = time.monotonic() + IDLE_WAIT
        interval = CHECK_FIRST  # most often a moment: node's main thread finishing the last cell's turn
        while True:
            try:
                if self.waiter.ready():
                    return True
            except OSError:
                return True  # it is dying: its death comes on the pidfd as the cell is sent
            if time.monotonic() >= end:
                return False
            self._pump(interval)
            interval = min(interval * 2, READY_POLL)

    def _not_run(self, number: int, digest: str, why: str = HELD) -> None:
        """The frame of a cell whose code the executor's loop never got: something an earlier cell left holds
        the waiter (the request was not sent), or took the request in its place."""
        error = f"{why}, so this cell's code was not run"
        out = {"cell": number, "results": [], "results_dropped": 0, "stop": None, "not_run": True}
        out.update({"error": {"name": "KernelError", "value": error, "traceback": ""}, "code_sha256": digest})
        out.update({"undumpable": self.guarded, "watch": self.watch})
        self._write_frame(out)

    def _write_frame(self, out: dict[str, Any]) -> None:
        """The end of a cell: the mark on stderr first, then the frame on stdout, the one the app waits for (it
        then finds the stderr mark there already, and waits for nothing more)."""
        _write_all(2, self.end_err)
        _write_all(1, self.mark_out + json.dumps(out).encode() + b"\n")

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.res_r, 1 << 16)
            except BlockingIOError:
                return
            if not data:
                return
            self.results.feed(data)

    def _request_line(self, message: dict[str, Any]) -> bytes:
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

    def serve(self) -> NoReturn:
        """Run the app's requests, one cell each, until the app closes stdin."""
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

    def _forward_displays(self, number: int) -> bool:
        """Send each display output the executor reported for cell ``number`` as a live frame (``on_result``).

        Its lines are taken out of the results; True when nothing else is left there (the cell still runs). A
        live frame holds ``"display"`` and never ``"code_sha256"``: the app never takes one for the cell's end.
        """
        kept: list[bytes] = []
        for line in self.results.lines:
            try:
                candidate = json.loads(line) if line.startswith(b'{"cell": ') and b'"display": ' in line else None
            except (ValueError, RecursionError):
                candidate = None
            if not (isinstance(candidate, dict) and candidate.get("cell") == number and "display" in candidate):
                kept.append(line)
                continue
            # Every display line counts, and past the bound of one cell's results none goes on: the cell is
            # interrupted and ends with "stop": "output" (the app would take no more of them anyway).
            self.live_bytes += len(line)
            if self.live_bytes > self.results.limit:
                self.flooded = True
                continue
            live = {"cell": number, "display": candidate["display"], "results": candidate.get("results", [])}
            _write_all(1, self.mark_out + json.dumps(live).encode() + b"\n")
        self.results.lines = kept
        if kept or self.results.partial:
            return False
        self.seen = False
        return True

    def cell(self, number: int, request: dict[str, Any]) -> None:
        """Run one cell in the executor; its frame once the executor waits for the next one."""
        code = request["code"]
        digest = hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()
        max_results = int(request.get("max_results", 1 << 20))
        self.results.limit = 8 * max_results + (1 << 20)
        self._drain()
        self.results.clear()
        self.seen = self.interrupting = self.flooded = False
        self.live_bytes = 0
        if not self._await_ready():
            return self._not_run(number, digest)  # this cell's code is not sent: no result can be made up for it
        message: dict[str, Any] = {"cell": number, "code": code, "max_results": max_results}
        for key in ("env", "pip_index"):  # the cell's own env over the session's; whether %pip may reach the index
            if key in request:
                message[key] = request[key]
        try:
            if self.watch == "syscall":
                self.waiter.sent()
            _write_all(self.req_w, self._request_line(message))
        except OSError:
            self._end_with_executor()  # it can take no request: it died, or a cell closed its end
        deadline = time.monotonic() + float(request["timeout"])
        grace = float(request.get("grace", 1.0))
        kill_at: float | None = None
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
            if self.flooded and kill_at is None:
                self._signal(signal.SIGINT)  # as at the timeout: the state is kept where the cell stops
                self.interrupting, kill_at = True, now + grace
            if self.seen and now >= check_at:
                if self._idle():
                    break
                check_at, interval = now + interval, min(interval * 2, CHECK_LAST)
            if kill_at is None and now >= deadline:
                if self.watch == "syscall" and not self.waiter.took_request():
                    # The waiter never read since the request was written: no code of this cell can have run.
                    return self._not_run(number, digest, TAKEN)
                self._signal(signal.SIGINT)
                self.interrupting, kill_at = True, now + grace
            elif kill_at is not None and now >= kill_at:
                self._kill_executor()
                os._exit(WATCHDOG_EXIT)  # the cell would not stop: the state goes with the interpreter
        self._drain()  # the main thread is waiting: all it wrote is in the pipe
        self._forward_displays(number)
        frame: dict[str, Any] | None = None
        for line in reversed(self.results.lines):
            try:
                candidate = json.loads(line)
            except (ValueError, RecursionError):
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
            "stop": "output" if self.flooded else "timeout" if kill_at is not None else None,
            "code_sha256": digest,
            "undumpable": self.guarded,
            "watch": self.watch,
        }
        self._write_frame(out)


def main(token: bytes, rest: bytes, files: dict[str, str], raw: bytes, digest: str, guarded: bool) -> NoReturn:
    """The supervisor, as the loader starts it: ``token`` and what followed the package on stdin (``rest``), the
    package's files and its bytes (``raw``, checked against ``digest``), whether the process is undumpable."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the executor's to take (it is reset there)
    _Supervisor(token, rest, files, raw, digest, guarded).serve()
