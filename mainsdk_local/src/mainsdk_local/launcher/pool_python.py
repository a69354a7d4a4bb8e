"""The kind "python" of the warm pool: a Python interpreter exec'd ahead, running the run's code as ``-c`` does.

C enters the pool folder's box exactly as the cold path's C would (``pool.warm_main``), then
execs ``python <flags> -c STUB``: the interpreter's start (9-10 ms here) is off the run's
critical path. At hand-off the stub gets the job (argv, env, the fds of the run's stdout and
stderr, the deadline) on the control socket only it holds. It sends B the run's timeout (B's
timer starts now: the time limit counts from hand-off), sets rlimits, puts the run's pipes on
0-2, closes the control socket, the deadline pipe and every other descriptor it had, sets the
run's environment, ``sys.argv`` and ``sys.orig_argv``, forgets the modules it imported itself,
and runs the code with ``PyRun_SimpleStringFlags``: exactly what ``python -c`` calls, so
``__main__``, tracebacks, ``SystemExit``, ``KeyboardInterrupt`` and exit codes are those of
the cold path. The code can never reach the control channel: it is closed before the code
runs, and B's report socket is close-on-exec, so it cannot forge its exit status.

What this kind refuses (another kind or the cold path takes it; never a different-looking
run): flags outside ``POOL_FLAGS``, code on stdin, an environment whose start-up variables
(``STARTUP_VARIABLES``) differ from a ready interpreter's, and an interpreter whose start
printed anything (the kind is then marked broken). Known differences, documented: the code's
top frame has the stub's frame above it (stack introspection sees one more frame and
recursion hits its limit a frame or two earlier) and ``/proc/self/environ`` shows the
start-up variables only (``os.environ`` and children see the run's environment).
"""

from __future__ import annotations

import fcntl
import marshal
import os
import struct
from typing import TYPE_CHECKING, Any, NoReturn

from . import common
from .pool import MAX_KIND_BYTES, MAX_KINDS, Entry, Kind, PoolKey

if TYPE_CHECKING:
    from . import stages
    from .runs import ExecRequest

# Python flags a pooled interpreter may start with (the pool key holds the exact ones). Flags that print at
# start (-X importtime, -v), read a script (-m, a file) or change what runs after (-i) are not here.
POOL_FLAGS = frozenset({"-E", "-s", "-S", "-I", "-P", "-B", "-u", "-b", "-bb", "-O", "-OO", "-q"})
# One of these must be there: without them Python adds the user's site-packages (~/.local, /work/.local in the
# box) to sys.path as it starts, and runs its .pth files. A warm interpreter started in an empty box would miss the
# run's, so such a shape is not the stub's (a pre-exec box runs the interpreter itself, as the cold path does).
NO_USER_SITE = frozenset({"-s", "-I", "-S"})
# Variables read while the interpreter (or the C library under it) starts: a run must have exactly the values
# its pooled interpreter started with, or it is not this kind's.
# HOME: site reads it as the interpreter starts (without it, ``expanduser`` imports pwd); TMPDIR beside it.
STARTUP_VARIABLES = (
    "HOME",
    "TMPDIR",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TZDIR",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LOCPATH",
    "NLSPATH",
)
STARTUP_PREFIXES = ("LC_", "PYTHON", "LD_", "MALLOC_", "GCONV_")
# Descriptors of the pooled interpreter before its job (the stub knows them by number).
_CONTROL_FD, _DEADLINE_FD, _STARTUP_OUTPUT_FD, _TEXT_FD = 3, 4, 5, 6
# A ``-c`` text a key's last two runs both had is compiled ahead by that key's next interpreters (core's figures
# wrapper is every Python run's: ~0.5 ms of each run's compile). Bounded: it travels in one pipe's buffer.
MAX_AHEAD_BYTES = 32 << 10
_DEADLINE = struct.Struct("d")  # what C sends B in the cold path, sent by the stub here

# The pooled interpreter's program (``python <flags> -c STUB``). Standard library only; every name it needs
# lives in a function, and what it leaves in __main__ is popped before the code runs, so the code's globals are
# those ``python -c`` gives. Its own imports run with the current directory at / and without '' on sys.path,
# before any box folder is there, and are forgotten (sys.modules, path_importer_cache) before the code runs.
STUB = """\
def _mainsdk_pool():
    import sys, os
    try:
        modules = set(sys.modules)
        finders = set(sys.path_importer_cache)
        path0 = sys.path.pop(0) if sys.path[:1] == [""] else None
        import _ctypes, _socket, marshal, resource  # _ctypes alone: the ctypes package costs 3-4 CPU-ms more
        if path0 is not None:
            sys.path.insert(0, path0)
        with open("/proc/self/environ", "rb") as f:
            raw = dict(e.partition(b"=")[::2] for e in f.read().split(b"\\0") if e)
        startup = [(k, v) for k, v in os.environb.items() if raw.get(k) != v]

        class Int(_ctypes._SimpleCData):
            _type_ = "i"

        class Text(_ctypes._SimpleCData):
            _type_ = "z"

        class Pointer(_ctypes._SimpleCData):
            _type_ = "P"

        class Flags(_ctypes.Structure):
            _fields_ = [("cf_flags", Int), ("cf_feature_version", Int)]

        class PythonApi(_ctypes.CFuncPtr):  # ctypes.pythonapi's kind: called with the GIL held
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_PYTHONAPI
            _restype_ = Int

        class Self:
            _handle = _ctypes.dlopen(None, 0)

        flags = Flags(0x0800, sys.version_info[1])  # PyCF_IGNORE_COOKIE, as python -c compiles its command
        run = PythonApi(("PyRun_SimpleStringFlags", Self))
        run.argtypes = (Text, Pointer)
        os.set_blocking(5, False)
        try:
            fit = not os.read(5, 1)  # anything printed while starting would show in no cold run
        except BlockingIOError:
            fit = True
    except Exception:
        fit = False  # not CPython, no ctypes: this kind runs cold
    if not fit:
        os.write(3, b"D")
        os._exit(0)
    ready = None
    text = b""
    try:
        while more := os.read(6, 1 << 16):
            text += more
    except OSError:
        text = b""  # no text to compile ahead for this entry (6 is not open)
    try:
        os.close(6)
    except OSError:
        pass
    if text and sys.version_info < (3, 13):  # 3.13 runs -c otherwise (_PyRun_SimpleStringFlagsWithName)
        try:

            class Object(_ctypes._SimpleCData):
                _type_ = "O"

            class Evaluate(_ctypes.CFuncPtr):
                _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_PYTHONAPI
                _restype_ = Object

            evaluate = Evaluate(("PyEval_EvalCode", Self))
            evaluate.argtypes = (Object, Object, Object)
            # As PyRun_SimpleStringFlags compiles it (the interned "<string>" this -c's own code has, exec mode,
            # PyCF_IGNORE_COOKIE for str source, this feature version, the interpreter's -O); used only if the
            # compile printed nothing (a SyntaxWarning must show in the run's stderr, as cold).
            ready = text, compile(text.decode("utf-8"), sys._getframe().f_code.co_filename, "exec", dont_inherit=True)
            if os.read(5, 1):
                ready = None
        except BlockingIOError:
            pass
        except Exception:
            ready = None

    class Guard:
        # An exception out of the code reaches pymain's own PyRun_SimpleStringFlags (PyErr_Print: sys.last_*,
        # the excepthook, SystemExit, the KeyboardInterrupt exit, exit code 1) with the traceback it has cold:
        # the entry this module's frame added is dropped, and the with statement re-raises without adding one.
        def __enter__(self):
            pass

        def __exit__(self, kind, value, tb, set_tb=BaseException.__traceback__.__set__):
            if tb is not None:
                set_tb(value, tb.tb_next)

    guard = Guard()  # made before the job: off the run's critical path
    sock = _socket.socket(fileno=3)
    sock.sendall(b"R" if ready is None else b"P")
    data, anc, _, _ = sock.recvmsg(1 << 16, _socket.CMSG_SPACE(16))
    while 0 < len(data) < 4 or 4 <= len(data) < 4 + int.from_bytes(data[:4], "big"):
        more = sock.recv(1 << 20)
        if not more:
            break
        data += more
    if len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
        os._exit(0)
    fds = []
    for level, kind, blob in anc:
        fds += [int.from_bytes(blob[i : i + 4], sys.byteorder) for i in range(0, len(blob) - len(blob) % 4, 4)]
    job = marshal.loads(data[4:])
    os.write(4, job["deadline"])
    os.close(4)
    resource.setrlimit(resource.RLIMIT_FSIZE, (job["disk"], job["disk"]))
    for target, fd in zip((1, 2, 0), fds):
        os.dup2(fd, target)
    for fd in [*fds, 5]:
        os.close(fd)
    sock.close()
    os.chdir("/work")
    os.environb.clear()
    os.environb.update(job["env"])
    for k, v in startup:
        os.environb[k] = v
    argv = [os.fsdecode(a) for a in job["argv"]]
    sys.argv[:] = ["-c", *argv[job["code"] + 1 :]]
    if hasattr(sys, "orig_argv"):
        sys.orig_argv[:] = argv
    code = argv[job["code"]].encode("utf-8")

    def finish(failed, sys=sys, KeyboardInterrupt=KeyboardInterrupt, SystemExit=SystemExit, keep=(flags, code)):
        # python -c exits 1 after an uncaught exception (printed already); after KeyboardInterrupt the
        # interpreter itself exits by SIGINT once finalized, as it does for -c.
        if failed and getattr(sys, "last_type", None) is not KeyboardInterrupt:
            raise SystemExit(1)

    for name in set(sys.modules) - modules:
        del sys.modules[name]
    for name in set(sys.path_importer_cache) - finders:
        del sys.path_importer_cache[name]
    main = globals()
    if ready is not None and code == ready[0]:
        # The text compiled ahead: evaluated as PyRun_SimpleStringFlags does (__main__'s dict as globals and
        # locals, __builtins__ in it already), its exception left to Guard.
        main.update(_mainsdk_finish=bool, _mainsdk_run=evaluate, _mainsdk_args=(ready[1], main, main))
    else:
        main.update(_mainsdk_finish=finish, _mainsdk_run=run, _mainsdk_args=(code, _ctypes.byref(flags)))
    main.update(_mainsdk_guard=guard)


_mainsdk_pool()
del _mainsdk_pool
with globals().pop("_mainsdk_guard"):
    globals().pop("_mainsdk_finish")(globals().pop("_mainsdk_run")(*globals().pop("_mainsdk_args")))
"""


def startup_environment(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The variables of ``env`` an interpreter reads while it starts, sorted."""
    return tuple(sorted((k, v) for k, v in env.items() if k in STARTUP_VARIABLES or k.startswith(STARTUP_PREFIXES)))


def code_index(argv: list[str]) -> int | None:
    """Where the code is in a ``python <POOL_FLAGS> -c CODE [ARGS]`` argv with one of ``NO_USER_SITE`` among the
    flags; None for any other shape."""
    for i, arg in enumerate(argv[1:], 1):
        if arg == "-c":
            return i + 1 if i + 1 < len(argv) and NO_USER_SITE.intersection(argv[1:i]) else None
        if arg not in POOL_FLAGS:
            return None
    return None


class PythonStub(Kind):
    """A warm ``python <flags> -c STUB`` (see the module's docstring). Its key: ``(argv up to -c, start-up env)``."""

    name = "python"

    def __init__(self) -> None:
        # Per key: the last run's -c text and whether the run before had it too (then entries compile it ahead).
        self.texts: dict[PoolKey, tuple[str, bool]] = {}

    def key(self, spec: ExecRequest, root: tuple[Any, ...]) -> tuple[PoolKey, Any] | None:
        """The pool key of a ``python <POOL_FLAGS> -c CODE`` exec and the index of its code in argv."""
        if spec.warm != "python" or spec.has_stdin:
            return None
        index = code_index(spec.argv)
        if index is None:
            return None
        try:
            spec.argv[index].encode("utf-8")  # what python -c does with its command; a lone surrogate fails there
        except UnicodeEncodeError:
            return None
        key: PoolKey = (self.name, root, (tuple(spec.argv[:index]), startup_environment(spec.env)))
        text = spec.argv[index]
        last = self.texts.pop(key, None)
        if len(text) <= MAX_AHEAD_BYTES // 4 and len(repr(key[2])) <= MAX_KIND_BYTES:  # else never kept (pool.py)
            self.texts[key] = (text, last is not None and last[0] == text)
            while len(self.texts) > MAX_KINDS:
                del self.texts[next(iter(self.texts))]  # the key seen least recently
        return key, index

    def fits(self, entry: Entry, spec: ExecRequest, plan: Any) -> bool:
        """An interpreter given a ``-c`` text ahead (an earlier run's) serves only a run of that very text: any
        other run could find it in the interpreter's memory (a pooled run sees nothing of another run)."""
        return not entry.ahead or entry.ahead == spec.argv[plan].encode("utf-8")

    def configure(self, ctx: stages.ChildContext, key: PoolKey) -> None:
        command, startup = key[2]
        ctx.argv = list(command)  # the interpreter and its flags, up to -c
        ctx.env = dict(startup)
        text, again = self.texts.get(key, ("", False))
        ctx.ahead = text.encode("utf-8") if again else b""

    def start(
        self, ctx: stages.ChildContext, control_fd: int, report_fd: int, timeout_w: int, stage: list[str]
    ) -> NoReturn:
        """Exec the stub with: 0 /dev/null, 1 and 2 a pipe whose other end is 5 (the stub checks that start-up
        printed nothing), 3 the control socket, 4 the deadline pipe to B, 6 (if ``ctx.ahead``) a pipe holding
        the text to compile ahead. All else is closed; B's report socket is close-on-exec."""
        stage[0] = "pool descriptors"
        os.chdir("/")  # the stub imports before any box is bound, and '' on sys.path must find nothing
        null = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        ends = [null, out_w, control_fd, timeout_w, out_r]
        targets = [0, 1, _CONTROL_FD, _DEADLINE_FD, _STARTUP_OUTPUT_FD]
        if ctx.ahead:  # the text to compile ahead, on a pipe read to EOF (it fits the pipe's buffer)
            text_r, text_w = os.pipe2(os.O_CLOEXEC)
            view = memoryview(ctx.ahead)
            while view:
                view = view[os.write(text_w, view) :]
            os.close(text_w)
            ends.append(text_r)
            targets.append(_TEXT_FD)
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in ends]
        for target, fd in zip(targets, moved, strict=True):
            os.dup2(fd, target, inheritable=True)
        os.dup2(1, 2, inheritable=True)
        common.close_all_except({*targets, 2, report_fd})
        stage[0] = "execve"
        os.execve(ctx.argv[0], [*ctx.argv, STUB], ctx.env)

    def feed(self, entry: Entry, data: bytes) -> str:
        """``b"P"``: ready, with the key's ``-c`` text compiled ahead (kept in ``entry.said`` for ``stats``)."""
        if data == b"P" and not entry.ready:
            entry.said = data
            return "ready"
        return super().feed(entry, data)

    def stats(self, idle: list[Entry]) -> dict[str, int]:
        """``ahead``: ready entries holding their key's ``-c`` text compiled."""
        return {"ahead": sum(1 for entry in idle if entry.ready and entry.said == b"P")}

    def job(self, ctx: stages.ChildContext, plan: Any) -> tuple[bytes, list[int]]:
        job = marshal.dumps(
            {
                "argv": [os.fsencode(a) for a in ctx.argv],
                "code": plan,
                "env": {os.fsencode(k): os.fsencode(v) for k, v in ctx.env.items()},
                "deadline": _DEADLINE.pack(float(ctx.timeout)),
                "disk": ctx.disk_bytes,
            },
            4,
        )
        return len(job).to_bytes(4, "big") + job, [ctx.stdout, ctx.stderr]
