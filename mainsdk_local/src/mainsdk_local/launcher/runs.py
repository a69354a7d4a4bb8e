"""What the server keeps of a box and its execs: the box (``ServerBox``), the validated request (``ExecRequest``),
the run, and the worker serving it. The box's files and their transfer are in ``boxes``."""

from __future__ import annotations

import collections
import contextlib
import math
import os
import signal
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from . import cgroups, common, protocol, rootfs

if TYPE_CHECKING:
    from . import stages

# No exec may bind these, or anything under them, read-only from the host (nor /tmp: see below).
FORBIDDEN_READONLY = ("/proc", "/sys", "/dev", "/work", "/out")


class ExecRequest:
    """The server's validated copy of the client's ExecSpec."""

    def __init__(self, raw: object, has_stdin: bool) -> None:
        if not isinstance(raw, dict):
            raise common.RequestError("value", "spec must be an object")
        argv = raw.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and "\0" not in a for a in argv):
            raise common.RequestError("value", "argv must be a non-empty list of strings without NUL")
        if not argv[0].startswith("/"):
            raise common.RequestError("value", f"argv[0] must be an absolute path, got {argv[0]!r}")
        env = raw.get("env")
        if not isinstance(env, dict):
            raise common.RequestError("value", "env must be an object")
        for k, v in env.items():
            if not isinstance(v, str) or not k or "=" in k or "\0" in k or "\0" in v:
                raise common.RequestError("value", f"invalid environment entry {k!r}")
        timeout = raw.get("timeout")
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
            raise common.RequestError("value", "timeout must be a positive number of seconds")
        if not math.isfinite(timeout):
            raise common.RequestError("value", "timeout must be finite")
        memory = raw.get("memory_bytes")
        if memory is not None and (not isinstance(memory, int) or isinstance(memory, bool) or memory < 1 << 20):
            raise common.RequestError("value", "memory_bytes must be None or at least 1 MiB")
        procs = raw.get("max_processes")
        if not isinstance(procs, int) or isinstance(procs, bool) or procs < 1:
            raise common.RequestError("value", "max_processes must be a positive integer")
        readonly = self._paths(raw.get("readonly_paths", []), "readonly_paths")
        for path in readonly:
            if rootfs.within(path, "/tmp"):  # the box's own /tmp is bound over it: it would be hidden
                raise common.RequestError(
                    "value", f"readonly path {path} is under /tmp, the box's own; put the program outside /tmp"
                )
            if path in ("/", "/etc") or any(rootfs.within(path, f) for f in FORBIDDEN_READONLY):
                raise common.RequestError("value", f"readonly path {path} is not allowed")
            if rootfs.within(common.MOUNT_BASE, path) or rootfs.within(path, common.MOUNT_BASE):
                # A recursive bind of an ancestor would carry every box's mount along.
                raise common.RequestError("value", f"readonly path {path} would expose the launcher's boxes")
        self.argv: list[str] = argv
        self.env: dict[str, str] = env
        self.timeout = float(timeout)
        self.memory_bytes: int | None = memory
        self.max_processes: int = procs
        self.readonly = tuple(sorted(set(readonly)))
        self.hidden = tuple(sorted(set(self._paths(raw.get("hidden_paths", []), "hidden_paths"))))
        self.overlays = self._overlays(raw.get("overlays", []), self.hidden)
        proxy = raw.get("proxy", False)
        if not isinstance(proxy, bool):
            raise common.RequestError("value", "proxy must be true or false")
        self.proxy = proxy  # the client wants the run's proxy listener (namespace mode)
        port = raw.get("proxy_port")
        if port is not None and (not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536):
            raise common.RequestError("value", "proxy_port must be None or a TCP port")
        self.proxy_port: int | None = port  # weak mode: the host port of the run's proxy, the one it may connect to
        self.has_stdin = has_stdin
        warm = raw.get("warm")
        if warm not in (None, "python", "node", "exec"):
            raise common.RequestError("value", "warm must be null, 'python', 'node' or 'exec'")
        # The client lets the exec run on a pool entry: "python" or "node" (argv is that interpreter: a warm one
        # may take it, else a pre-exec box), "exec" (a pre-exec box only); None: always cold (see pool.py).
        self.warm: str | None = warm
        self.disk_bytes = 0  # the box's disk size, set by the server as the exec starts (a warm node's key holds it)

    @staticmethod
    def _overlays(value: object, hidden: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
        """(source, hidden path) pairs: a canonical host folder outside the launcher's boxes, over a hidden path."""
        if not isinstance(value, list) or not all(isinstance(p, list) and len(p) == 2 for p in value):
            raise common.RequestError("value", "overlays must be a list of [source, hidden path] pairs")
        pairs: dict[str, str] = {}
        for source, target in value:
            ExecRequest._paths([source, target], "overlays")
            if target not in hidden and target not in common.KERNEL_SITES:
                raise common.RequestError(
                    "value", f"overlay target {target} is not one of the hidden paths nor {common.KERNEL_SITES}"
                )
            if target in pairs:
                raise common.RequestError("value", f"overlay target {target} is given twice")
            if os.path.realpath(source) != source or not os.path.isdir(source):
                raise common.RequestError("value", f"overlay source {source} must be a canonical, existing folder")
            # Host paths: /work and /out mean nothing on the host (the box's are its own tmpfs), so only these.
            if source in ("/", "/etc") or any(rootfs.within(source, f) for f in ("/proc", "/sys", "/dev")):
                raise common.RequestError("value", f"overlay source {source} is not allowed")
            if rootfs.within(common.MOUNT_BASE, source) or rootfs.within(source, common.MOUNT_BASE):
                raise common.RequestError("value", f"overlay source {source} would expose the launcher's boxes")
            pairs[target] = source
        return tuple(sorted((source, target) for target, source in pairs.items()))

    @staticmethod
    def _paths(value: object, what: str) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
            raise common.RequestError("value", f"{what} must be a list of strings")
        for p in value:
            if "\0" in p or not p.startswith("/") or os.path.normpath(p) != p:
                raise common.RequestError("value", f"{what}: {p!r} must be an absolute, normalized path")
        return list(value)


class Channel:
    """One client's connection to a box: its socket, what it sent so far, the frames queued to it.

    A box has one (its opener's); a shared launcher's session box may have more, one per app process that
    reached it (``attach``), each answered on its own.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.decoder = protocol.Decoder()
        self.outq: collections.deque[tuple[memoryview, list[int]]] = collections.deque()  # frames and their fds
        self.writing = False
        self.open = True
        self.box: ServerBox | None = None  # the box it reaches: set when it joins one


class ServerBox:
    """One box: its tmpfs (or private directory in weak mode), host uid and channels."""

    def __init__(self, slot: int, uid: int, gid: int, sock: socket.socket, *, drop_fsids: bool) -> None:
        self.slot = slot
        self.uid = uid
        self.gid = gid
        self.drop_fsids = drop_fsids  # file operations switch to the box's uid (the server is root)
        self.channel = Channel(sock)  # the opener's
        self.channel.box = self
        self.channels = [self.channel]  # the open ones: the opener's, and those of processes that attached
        # A shared launcher's session box (``launcher: shared``): the session it serves and its tenant, which an
        # attach must name, and how long it is kept once no process holds it (its idle time, from its last use).
        self.session_id: str | None = None
        self.tenant = ""
        self.idle = 0.0
        self.last_used = 0.0
        self.path = ""
        self.work_fd = -1
        self.out_fd = -1
        self.disk_bytes = 0
        self.max_files: int | None = None  # the tmpfs's nr_inodes; None: the kernel's default
        self.runs: dict[int, Run] = {}  # running execs by request id
        self.destroyed = False
        self.doomed = False  # closed: its files are removed when the server's loop has a moment
        self.failed = False  # a request on it failed: a one-shot exec sent behind it does not run
        self.close_after: int | None = None  # a one-shot box closes once the collection with this id is sent
        self.closing = False
        self.close_id: int | None = None
        self.close_channel: Channel | None = None  # the channel that asked for the close, answered once it is done
        # A session's box: its next exec is likely, so a hot spare is prepared for it. A one-shot run's box
        # runs one exec and closes: a spare made for it would be thrown away unused.
        self.session = False
        self.memory_cgroup: str | None = None  # a session box's memory cgroup: its commands' go beneath it
        self.memory_limit: int | None = None  # a session box's: the limit its memory cgroup gets
        self.execs = 0  # execs started in it: only a one-shot box's first may take a warm interpreter
        self.max_sockets = 0  # the box's socket bound (sockets.py), set at open
        self.pool_slot: int | None = None  # a warm interpreter's slot whose uid the box took (held until destroyed)


class Worker:
    """A forked process the server waits on: B in namespace mode, C itself when weak."""

    def __init__(self, pid: int, pidfd: int, sock: socket.socket) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.sock = sock
        self.decoder = protocol.Decoder()
        self.run: Run | None = None
        self.cgroup: cgroups.RunCgroup | None = None  # B sits in it; removed once B is reaped
        self.limits: cgroups.Limits = None  # the limits B wrote ahead (a guess: the last exec's)
        self.ready = False  # C said it waits for its job
        self.discarded = False  # an unused spare we killed on purpose
        self.bound: tuple[ServerBox, rootfs.TemplateKey] | None = None  # a hot spare's box and root
        self.error: dict[str, Any] | None = None  # what it reported before dying
        self.reaped = False
        self.status: int | None = None  # the worker's own wait status
        self.sock_open = True
        self.listener: int | None = None  # B's proxy listener, until a run takes it or the worker goes

    def kill(self) -> None:
        """SIGKILL the worker unless it is reaped: B is pid 1 of the run, and its death takes the tree."""
        if not self.reaped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class SpawnWorker(Protocol):
    """Forks a worker (``execs.Executor.spawn_worker``): what spares and the warm pool get to make theirs."""

    def __call__(
        self,
        limits: cgroups.Limits,
        bound: stages.ChildContext | None = None,
        *,
        child: Callable[[int, int], NoReturn] | None = None,
        keep: frozenset[int] = frozenset(),
    ) -> Worker: ...


class Run:
    """One exec: its worker, stdin pipe, cgroups, deadline and what the worker reported."""

    def __init__(self, rid: int, box: ServerBox, spec: ExecRequest, channel: Channel | None = None) -> None:
        self.rid = rid
        self.box = box
        self.channel = box.channel if channel is None else channel  # where its output and report go
        self.spec = spec
        self.worker: Worker | None = None
        self.warm = False  # on a pool entry (pool.py)
        self.warm_kind: str | None = None  # that entry's kind
        self.pool_key: Any = None  # the warm pool's key when the exec has one: its demand counts
        self.started = 0.0
        self.deadline = 0.0
        self.timed_out = False
        self.killed = False
        self.code_status: int | None = None
        self.error: dict[str, Any] | None = None
        self.stdin_w: int | None = None
        self.stdin_data = memoryview(b"")
        self.cgroup: cgroups.RunCgroup | None = None
        self.done = False
        self.then: tuple[int, int] | None = None  # a one-shot exec: (collect id, max_bytes) of /out after it


def set_limits(ctx: stages.ChildContext, run: Run, cgroup: cgroups.RunCgroup | None, spec: ExecRequest) -> None:
    """Where the exec's limits go: its cgroups, or rlimits for what has no cgroup."""
    run.cgroup = cgroup
    ctx.memory_dir = cgroup.memory_dir if cgroup else None
    ctx.memory_version = cgroup.memory_version if cgroup else 0
    ctx.pids_dir = cgroup.pids_dir if cgroup else None
    ctx.joins = list(cgroup.joins) if cgroup else []
    ctx.memory_bytes = spec.memory_bytes
    if ctx.namespaces and ctx.memory_dir is not None and spec.memory_bytes is not None:
        ctx.memory_bytes = cgroups.session_allowance(spec.memory_bytes, ctx.box_dir)  # the box's files are RAM
    ctx.max_processes = spec.max_processes + (1 if ctx.namespaces else 0)
    ctx.memory_rlimit = spec.memory_bytes if ctx.memory_dir is None else None
    ctx.nproc_rlimit = spec.max_processes if ctx.pids_dir is None else None


def describe_failure(error: dict[str, Any]) -> str:
    return f"{error.get('stage')}: {error.get('message')}"


def result(run: Run, oom: bool, ended: float) -> dict[str, Any]:
    """The result frame of a run that reported: its exit code or signal, why it stopped (``oom``: its memory
    cgroup killed it), how long it took (``ended``, monotonic) and how it started."""
    status = run.code_status
    exit_code: int | None = None
    sig: int | None = None
    if status is None:
        sig = signal.SIGKILL  # the worker was killed before C finished: timeout, kill or close
    elif os.WIFEXITED(status):
        exit_code = os.WEXITSTATUS(status)
    elif os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
    stop: str | None = None
    if run.timed_out:
        stop = "timeout"
    elif oom:
        stop = "memory"
    # Under RLIMIT_AS (no memory cgroup) nothing records why a process died: a signal is reported as the
    # crash it is, and the client calls it a memory stop only on the code's own out-of-memory error.
    return {
        "id": run.rid,
        "ok": True,
        "exit_code": exit_code,
        "signal": sig,
        "stop": stop,
        "duration": ended - run.started,
        "killed": run.killed,
        "warm": run.warm,
        "warm_kind": run.warm_kind,
    }
