"""The warm pool: Python interpreters exec'd ahead, each in its own fresh box, waiting for one run's code.

A pooled interpreter is a worker like any other (B, pid 1 of a fresh pid namespace with fresh
cgroups; C in its own mount, net, ipc, uts and user namespaces, root pivoted, uid dropped,
seccomp), except that C has already exec'd ``python <flags> -c STUB`` before any run asked
for it: the interpreter's start (9-10 ms here) is off the run's critical path. Each pooled
interpreter is its own execve, never a fork of a shared zygote, so the hash secret, ASLR
layout, ``random`` state, heap and capabilities are fresh per run, and it serves one run:
its box is destroyed with that run.

The server's part is the mixin ``WarmExecution`` (a run takes an interpreter, a new one is
warmed when the loop is idle); ``Pool`` keeps the interpreters and the demand for each key.

How a run takes one (``Pool.hand_off``):

- Its ``/work`` and ``/out`` are mount points of a pool folder made *shared* in the server's
  mount namespace (C's copies are slaves of it). The server binds the run's box folders over
  them; the mounts propagate into C's namespace, and the stub changes into ``/work`` again.
  So the warm start never saw the run's (or a session's) files: it started in an empty box,
  from ``/``, with the stub's own imports done before any file could be there.
- The box's files take the pooled interpreter's uid (each pooled interpreter has a box slot
  of its own); only a one-shot run's box before its first exec qualifies (its files were
  written by the app, not by code), with a bounded number of entries.
- The cgroup limits are written by the server, the rlimits by the stub, both the run's own.
- The job (argv, env, the fds of the run's stdout and stderr, the deadline) goes on a control
  socket only the stub holds. The stub sends B the run's timeout (B's timer starts now: the
  time limit counts from hand-off), sets rlimits, puts the run's pipes on 0-2, closes the
  control socket, the deadline pipe and every other descriptor it had, sets the run's
  environment, ``sys.argv`` and ``sys.orig_argv``, forgets the modules it imported itself,
  and runs the code with ``PyRun_SimpleStringFlags``: exactly what ``python -c`` calls, so
  ``__main__``, tracebacks, ``SystemExit``, ``KeyboardInterrupt`` and exit codes are those of
  the cold path. The code can never reach the control channel: it is closed before the code
  runs, and B's report socket is close-on-exec, so it cannot forge its exit status.

What falls back to the cold path (never a different-looking run): a language other than
Python, flags outside ``POOL_FLAGS``, code on stdin, a session's box or a box that already
ran something, an environment whose start-up variables (``STARTUP_VARIABLES``) differ from
a ready interpreter's, a box with more than ``MAX_REHOMED_ENTRIES`` files, an interpreter
whose start printed anything, and no ready interpreter. Known differences, documented:
the code's top frame has the stub's frame above it (stack introspection sees one more frame
and recursion hits its limit a frame or two earlier) and ``/proc/self/environ`` shows the
start-up variables only (``os.environ`` and children see the run's environment).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import marshal
import os
import selectors
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from . import cgroups as G
from . import common as C
from . import linux as L
from . import stages as S
from .spares import FAILED_SPARE_PAUSE

if TYPE_CHECKING:
    from . import rootfs as R
    from . import sockets as SK
    from .boxes import Box
    from .runs import ExecSpec, Run, Worker
    from .spares import Spares

# Python flags a pooled interpreter may start with (the pool key holds the exact ones). Flags that print at
# start (-X importtime, -v), read a script (-m, a file) or change what runs after (-i) are not here.
POOL_FLAGS = frozenset({"-E", "-s", "-S", "-I", "-P", "-B", "-u", "-b", "-bb", "-O", "-OO", "-q"})
# Variables read while the interpreter (or the C library under it) starts: a run must have exactly the values
# its pooled interpreter started with, or it runs cold.
STARTUP_VARIABLES = ("LANG", "LANGUAGE", "TZ", "TZDIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCPATH", "NLSPATH")
STARTUP_PREFIXES = ("LC_", "PYTHON", "LD_", "MALLOC_", "GCONV_")
# A one-shot box's files are given to the pooled interpreter's uid one by one: past this many, run cold.
MAX_REHOMED_ENTRIES = 256
# An idle interpreter nobody took for this long is dropped, and so is a key nobody asked for (the default).
IDLE_SECONDS = 60.0
# Demand is the most runs of a key in flight at once over this window.
DEMAND_WINDOW = 10.0
# Descriptors of the pooled interpreter before its job (the stub knows them by number).
_CONTROL_FD, _DEADLINE_FD, _STARTUP_OUTPUT_FD = 3, 4, 5
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
    sock = _socket.socket(fileno=3)
    sock.sendall(b"R")
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
    globals().update(_mainsdk_finish=finish, _mainsdk_run=run, _mainsdk_args=(code, _ctypes.byref(flags)))


_mainsdk_pool()
del _mainsdk_pool
globals().pop("_mainsdk_finish")(globals().pop("_mainsdk_run")(*globals().pop("_mainsdk_args")))
"""

PoolKey = tuple[tuple[str, ...], tuple[Any, ...], tuple[tuple[str, str], ...]]  # argv up to -c, root, start-up env


def startup_environment(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The variables of ``env`` an interpreter reads while it starts, sorted."""
    return tuple(sorted((k, v) for k, v in env.items() if k in STARTUP_VARIABLES or k.startswith(STARTUP_PREFIXES)))


def code_index(argv: list[str]) -> int | None:
    """Where the code is in a ``python <POOL_FLAGS> -c CODE [ARGS]`` argv; None for any other shape."""
    for i, arg in enumerate(argv[1:], 1):
        if arg == "-c":
            return i + 1 if i + 1 < len(argv) else None
        if arg not in POOL_FLAGS:
            return None
    return None


def pool_key(spec: ExecSpec, root: tuple[Any, ...]) -> tuple[PoolKey, int] | None:
    """The pool key of an exec and the index of its code in argv, or None when it must run cold."""
    if spec.warm != "python" or spec.has_stdin:
        return None
    index = code_index(spec.argv)
    if index is None:
        return None
    try:
        spec.argv[index].encode("utf-8")  # what python -c does with its command; a lone surrogate fails there
    except UnicodeEncodeError:
        return None
    return (tuple(spec.argv[:index]), root, startup_environment(spec.env)), index


class Entry:
    """One pooled interpreter: its worker, control socket, pool folder and box slot."""

    def __init__(self, key: PoolKey, slot: int, uid: int, gid: int, folder: str) -> None:
        self.key = key
        self.slot = slot
        self.uid = uid
        self.gid = gid
        self.folder = folder  # shared mount; work/ and out/ in it are the interpreter's /work and /out
        self.worker: Worker | None = None
        self.control: socket.socket | None = None  # the server's end; the stub holds the other
        self.ready = False  # the stub said it waits for its job
        self.taken = False
        self.given = False  # a box took its uid (and holds its slot until destroyed)
        self.born = time.monotonic()
        self.bound: list[str] = []  # box folders bound over work/ and out/ at hand-off


class Pool:
    """The warm interpreters of a server, keyed by interpreter, flags, root and start-up environment.

    ``size`` caps the idle interpreters kept at once (0: no pool). ``spawn(entry)`` forks a
    worker whose C execs the stub for ``entry``; ``kill(worker)`` kills one; ``unwatch(sock)``
    stops the server's loop watching a control socket before it is closed.
    """

    def __init__(
        self,
        size: int,
        base: str,
        spawn: Callable[[Entry], Worker],
        kill: Callable[[Worker], None],
        unwatch: Callable[[socket.socket], None],
    ) -> None:
        self.size = size
        self.idle_seconds = IDLE_SECONDS
        self.base = base
        self._spawn = spawn
        self._kill = kill
        self._unwatch = unwatch
        self.entries: list[Entry] = []
        self.held: set[int] = set()  # slots of entries, and of boxes that took one (until they close)
        self.demand: dict[PoolKey, list[float]] = {}  # key: [last seen, in flight, peak, peak time, last miss]
        self.broken: set[PoolKey] = set()
        # Refills owed to runs that reported: each report of a run of a pooled kind may warm one interpreter at
        # once, even while other runs go on (under steady concurrency the loop is never quiet, and the pool
        # would drain); anything more waits for a quiet moment, as spares do. At most ``size`` are owed.
        self.refills = 0  # keys whose interpreter printed at start: always cold
        self.hits = 0
        self.misses = 0
        self._count = 0

    # -- demand --------------------------------------------------------------

    def asked(self, key: PoolKey) -> None:
        """A run of ``key`` starts (warm or cold): its demand counts."""
        now = time.monotonic()
        seen = self.demand.setdefault(key, [now, 0.0, 0.0, now, -DEMAND_WINDOW])
        seen[0] = now
        seen[1] += 1
        if seen[1] >= seen[2] or now - seen[3] > DEMAND_WINDOW:
            seen[2], seen[3] = seen[1], now

    def missed(self, key: PoolKey) -> None:
        """A run of ``key`` found no ready interpreter: keep one more ahead for a while (see ``wanted``)."""
        seen = self.demand.get(key)
        if seen is not None:
            seen[4] = time.monotonic()

    def finished(self, key: PoolKey) -> None:
        """A run of ``key`` reported: one less in flight, and one refill owed."""
        seen = self.demand.get(key)
        if seen is not None and seen[1] > 0:
            seen[1] -= 1
        self.refills = min(self.size, self.refills + 1)

    def wanted(self, free_slot: Callable[[], int | None]) -> PoolKey | None:
        """The key of the next interpreter to warm, or None. Drops idle ones first."""
        if self.size <= 0:
            return None
        now = time.monotonic()
        for entry in [e for e in self.entries if not e.taken and now - e.born > self.idle_seconds]:
            self.discard(entry)  # shrinking when idle: nobody took it for a while
        for key in [k for k, seen in self.demand.items() if now - seen[0] > self.idle_seconds and seen[1] <= 0]:
            del self.demand[key]
        idle = [e for e in self.entries if not e.taken]
        for key, seen in sorted(self.demand.items(), key=lambda item: -item[1][0]):  # most recently asked first
            if key in self.broken:
                continue
            want = max(1, int(seen[2] if now - seen[3] <= DEMAND_WINDOW else seen[1]))
            # Runs that found none ready (back to back: a refill starts only once a run reports) get one more
            # warming ahead, so the next run finds the one that warmed while this one ran.
            want = min(self.size, want + (1 if now - seen[4] <= DEMAND_WINDOW else 0))
            if sum(1 for e in idle if e.key == key) >= want:
                continue
            if len(idle) >= self.size:
                # Full: make room from a kind asked for less recently than this one, or none is warmed for it
                # until those idle out (a kind used once must not keep the kind in use cold for a minute).
                asked = {e.key: self.demand.get(e.key, [-IDLE_SECONDS])[0] for e in idle}
                older = [e for e in idle if asked[e.key] < seen[0]]
                if not older:
                    return None
                victim = min(older, key=lambda e: (asked[e.key], e.born))
                self.discard(victim)
                idle.remove(victim)
            return key if free_slot() is not None else None
        return None

    def next_expiry(self) -> float | None:
        """Seconds until the oldest idle interpreter is dropped (the loop wakes for it); None: none idle."""
        born = [e.born for e in self.entries if not e.taken]
        return max(0.0, min(born) + self.idle_seconds - time.monotonic()) if born else None

    def stats(self) -> dict[str, int]:
        """What the pool holds and has done, for tests and benchmarks."""
        idle = [e for e in self.entries if not e.taken]
        ready = sum(1 for e in idle if e.ready)
        warming = len(idle) - ready
        return {"capacity": self.size, "ready": ready, "warming": warming, "hits": self.hits, "misses": self.misses}

    # -- entries -------------------------------------------------------------

    def warm(self, key: PoolKey, slot: int, uid: int, gid: int) -> Entry:
        """Start warming an interpreter for ``key`` in box slot ``slot``."""
        self._count += 1
        folder = os.path.join(self.base, f"pool-{self._count}")
        entry = Entry(key, slot, uid, gid, folder)
        os.mkdir(folder, 0o711)
        try:
            L.mount(folder, folder, None, L.MS_BIND)
            L.mount(None, folder, None, L.MS_SHARED)
            for name in ("work", "out"):
                os.mkdir(os.path.join(folder, name), 0o755)
        except OSError:
            self._remove_folder(entry)
            raise
        self.held.add(slot)
        try:
            entry.worker = self._spawn(entry)
        except BaseException:
            self.held.discard(slot)
            self._remove_folder(entry)
            raise
        self.entries.append(entry)
        return entry

    def on_control(self, entry: Entry) -> str:
        """What the stub wrote on its control socket: "ready", "dirty" (it printed at start, or no ctypes), "gone"."""
        if entry.control is None:
            return "wait"  # closed (discarded or reaped) earlier in the loop turn that found it readable
        try:
            data = entry.control.recv(16)
        except BlockingIOError:
            return "wait"
        except OSError:
            data = b""
        if data == b"R" and not entry.ready:
            entry.ready = True
            return "ready"
        if data == b"D":
            self.broken.add(entry.key)
            return "dirty"
        return "gone"

    def take(self, key: PoolKey) -> Entry | None:
        """A ready interpreter for ``key`` (it leaves the pool), or None."""
        for entry in self.entries:
            if entry.key == key and entry.ready and not entry.taken:
                worker = entry.worker
                if worker is None or worker.reaped or not worker.sock_open:
                    continue
                entry.taken = True
                return entry
        return None

    def hand_off(self, entry: Entry, box: Box, ctx: S.ChildContext, index: int, has_cgroups: bool) -> None:
        """Give ``entry``'s interpreter the run: box, limits, job. OSError: it cannot (then run cold)."""
        if box.uid != entry.uid:
            rehome(box, entry.uid, entry.gid)
            box.uid, box.gid = entry.uid, entry.gid
            box.pool_slot, entry.given = entry.slot, True  # the box holds the slot (its uid) until destroyed
        for name in ("work", "out"):
            target = os.path.join(entry.folder, name)
            L.mount(os.path.join(box.path, name), target, None, L.MS_BIND)
            entry.bound.append(target)
        if has_cgroups:
            G.configure_cgroup(ctx.memory_dir, ctx.memory_version, ctx.pids_dir, ctx.memory_bytes, ctx.max_processes)
        job = marshal.dumps(
            {
                "argv": [os.fsencode(a) for a in ctx.argv],
                "code": index,
                "env": {os.fsencode(k): os.fsencode(v) for k, v in ctx.env.items()},
                "deadline": _DEADLINE.pack(float(ctx.timeout)),
                "disk": ctx.disk_bytes,
            },
            4,
        )
        frame = len(job).to_bytes(4, "big") + job
        if entry.control is None:
            raise OSError(errno.EPIPE, "the warm interpreter's control socket is closed")
        control, entry.control = entry.control, None
        self._unwatch(control)
        try:
            control.setblocking(True)
            sent = socket.send_fds(control, [frame], [ctx.stdout, ctx.stderr])
            if sent < len(frame):
                control.sendall(frame[sent:])
        finally:
            control.close()

    def discard(self, entry: Entry) -> None:
        """Drop an interpreter nobody will take: kill its worker; its folder goes when the worker is reaped."""
        entry.taken = True
        self._close_control(entry)
        if entry.worker is not None:
            entry.worker.discarded = entry.worker.run is None
            self._kill(entry.worker)

    def gone(self, worker: Worker) -> Entry | None:
        """``worker`` was reaped: if it was an entry's, unmount and remove its folder."""
        entry = next((e for e in self.entries if e.worker is worker), None)
        if entry is None:
            return None
        self.entries.remove(entry)
        self._close_control(entry)
        if not entry.given:
            self.held.discard(entry.slot)  # no box holds its uid
        self._remove_folder(entry)
        return entry

    def box_destroyed(self, box: Box) -> None:
        if box.pool_slot is not None:
            self.held.discard(box.pool_slot)
            box.pool_slot = None

    def shutdown(self) -> None:
        for entry in list(self.entries):
            if entry.control is not None:
                entry.control.close()
                entry.control = None
            self._remove_folder(entry)
        self.entries.clear()

    def _close_control(self, entry: Entry) -> None:
        if entry.control is not None:
            self._unwatch(entry.control)
            entry.control.close()
            entry.control = None

    @staticmethod
    def _remove_folder(entry: Entry) -> None:
        for target in [*entry.bound, entry.folder]:
            with contextlib.suppress(OSError):
                L.umount(target)
        entry.bound = []
        for name in ("work", "out", ""):
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(entry.folder, name) if name else entry.folder)


def rehome(box: Box, uid: int, gid: int) -> None:
    """Give ``box``'s work/ and out/ and everything in them to ``uid``; OSError past MAX_REHOMED_ENTRIES.

    Only for a box no code has run in: what is there the app wrote. Links are changed, never followed.
    """
    todo = [os.path.join(box.path, "work"), os.path.join(box.path, "out")]
    found: list[str] = list(todo)
    while todo:
        with os.scandir(todo.pop()) as listing:
            for item in listing:
                found.append(item.path)
                if len(found) > MAX_REHOMED_ENTRIES:
                    raise OSError(0, f"more than {MAX_REHOMED_ENTRIES} files in the box: run cold")
                if item.is_dir(follow_symlinks=False):
                    todo.append(item.path)
    for path in found:
        os.chown(path, uid, gid, follow_symlinks=False)


def warm_main(ctx: S.ChildContext, flags: list[str], control_fd: int, report_fd: int, timeout_w: int) -> NoReturn:
    """C of a pooled worker (after B forked it): enter the pool folder's box as the code would, exec the stub.

    ``ctx`` holds the root, the pool folder (as ``box_dir``), uid and gid and the start-up
    environment; nothing of any run. The descriptors the stub gets: 0 /dev/null, 1 and 2 a
    pipe whose other end is 5 (the stub checks that start-up printed nothing), 3 the control
    socket, 4 the deadline pipe to B. All else is closed; B's report socket is close-on-exec.
    """
    gc.disable()
    stage = ["prepare"]
    try:
        report_fd = fcntl.fcntl(report_fd, fcntl.F_DUPFD_CLOEXEC, 10)  # out of the numbers the stub uses
        S._code_prepare()
        S._code_enter_root(ctx, stage)
        stage[0] = "pool mounts"
        for name in ("/work", "/out"):
            L.mount(None, name, None, L.MS_SLAVE)  # receive the run's box from the server; send nothing back
        S._code_enter_user(ctx, stage)
        stage[0] = "pool descriptors"
        os.chdir("/")  # the stub imports before any box is bound, and '' on sys.path must find nothing
        null = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (null, out_w, control_fd, timeout_w, out_r)]
        for target, fd in zip((0, 1, _CONTROL_FD, _DEADLINE_FD, _STARTUP_OUTPUT_FD), moved, strict=True):
            os.dup2(fd, target, inheritable=True)
        os.dup2(1, 2, inheritable=True)
        C.close_all_except({0, 1, 2, _CONTROL_FD, _DEADLINE_FD, _STARTUP_OUTPUT_FD, report_fd})
        stage[0] = "execve"
        os.execve(ctx.argv[0], [ctx.argv[0], *flags, "-c", STUB], ctx.env)
    except BaseException as exc:  # noqa: BLE001 - whatever it is, report it and exit
        S.report_failure(report_fd, stage[0], exc)
    os._exit(127)


class WarmExecution:
    """The server's side of the warm pool (a mixin of ``server.Server``, beside ``execs.RunExecution``)."""

    sel: selectors.BaseSelector
    root: bool
    uid_base: int
    boxes: dict[int, Box]
    templates: R.Templates
    spares: Spares
    pool: Pool
    sockets: SK.SocketBound | None

    if TYPE_CHECKING:  # the loop's and the runs', in server.py and execs.py

        def _spawn_worker(
            self,
            limits: G.Limits,
            bound: S.ChildContext | None = None,
            *,
            child: Callable[[int, int], NoReturn] | None = None,
            keep: frozenset[int] = frozenset(),
        ) -> Worker: ...

        @staticmethod
        def _set_limits(ctx: S.ChildContext, run: Run, cgroup: G.RunCgroup | None, spec: ExecSpec) -> None: ...

        def _hand_listener(self, run: Run) -> None: ...

    def _warm_one(self) -> None:
        """Start one warm interpreter for the key the pool wants most."""
        key = self.pool.wanted(self._free_pool_slot)
        slot = self._free_pool_slot()
        if key is None or slot is None:
            return
        uid = self.uid_base + slot if self.root else self.uid_base
        gid = uid if self.root else 0
        self.pool.refills = max(0, self.pool.refills - 1)
        try:
            self.pool.warm(key, slot, uid, gid)
        except (OSError, C.RequestError) as exc:
            print(f"mainsdk-local launcher: warm interpreter: {exc}", file=sys.stderr)
            self.spares.not_before = time.monotonic() + FAILED_SPARE_PAUSE

    def _free_pool_slot(self) -> int | None:
        """A box slot for a warm interpreter (its uid), from the top: boxes take theirs from the bottom."""
        return next(
            (s for s in range(C.SLOTS_PER_SERVER - 1, -1, -1) if s not in self.boxes and s not in self.pool.held), None
        )

    def _spawn_pooled(self, entry: Entry) -> Worker:
        """Fork a worker whose C execs a warm interpreter for ``entry`` (see ``warm_main``)."""
        command, root, startup = entry.key
        ctx = S.ChildContext()
        ctx.template = self.templates.get(*root)
        ctx.box_dir = entry.folder
        ctx.uid, ctx.gid = entry.uid, entry.gid
        ctx.drop_uid = self.root
        ctx.argv = [command[0]]
        ctx.env = dict(startup)
        flags = list(command[1:-1])
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fd = theirs.fileno()
        try:
            worker = self._spawn_worker(
                self.spares.last_limits,
                child=lambda report_fd, timeout_w: warm_main(ctx, flags, fd, report_fd, timeout_w),
                keep=frozenset({fd}),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        entry.control = ours
        self.sel.register(ours, selectors.EVENT_READ, lambda mask: self._on_pool_control(entry))
        return worker

    def _on_pool_control(self, entry: Entry) -> None:
        state = self.pool.on_control(entry)
        if state == "dirty":
            print(
                "mainsdk-local launcher: a warm interpreter cannot be made of this kind; it runs cold", file=sys.stderr
            )
        if state in ("dirty", "gone"):
            self.pool.discard(entry)

    def _unwatch(self, sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(sock)

    def _start_warm(
        self, box: Box, run: Run, ctx: S.ChildContext, spec: ExecSpec, root: tuple[Any, ...], has_cgroups: bool
    ) -> bool:
        """Hand the exec, the first of a one-shot box, to a warm interpreter if one fits; False: it runs cold."""
        found = pool_key(spec, root) if self.pool.size and not box.session and box.execs == 1 else None
        if found is None:
            return False
        key, index = found
        self.pool.asked(key)
        run.pool_key = key
        entry = self.pool.take(key)
        if entry is None or entry.worker is None:
            self.pool.misses += 1
            self.pool.missed(key)
            return False
        worker = entry.worker
        self._set_limits(ctx, run, worker.cgroup, spec)
        run.started = time.monotonic()
        try:
            if self.sockets is not None and box.uid != entry.uid:
                self.sockets.set_bound(entry.slot, box.max_sockets)  # the bound follows the box to its new uid
            self.pool.hand_off(entry, box, ctx, index, has_cgroups)
        except OSError as exc:
            if exc.errno:  # errno 0: too many files in the box to give to the interpreter's uid, an expected cold run
                print(f"mainsdk-local launcher: warm hand-off failed, running cold: {exc}", file=sys.stderr)
            self.pool.discard(entry)
            self.pool.misses += 1
            ctx.uid, ctx.gid = box.uid, box.gid  # the box may have taken the interpreter's uid before it failed
            return False
        except BaseException:
            self.pool.discard(entry)  # taken and never handed a run: it must not wait forever
            raise
        self.pool.hits += 1
        run.warm = True
        run.worker, worker.run = worker, run
        self._hand_listener(run)
        return True
