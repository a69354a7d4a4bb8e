"""The forked stages of a run, B and C, from fork to execve. Nothing here returns into the server.

B (``worker_main``) is pid 1 of the run's new pid namespace. It makes and joins
the run's cgroups, unshares net, ipc, uts and cgroup namespaces, brings lo up,
listens on the proxy's port there (the listener goes to the server, which hands
it to the app's proxy or closes it), forks C, then reaps: once C exits it kills
whatever C left and reports C's wait status, which therefore means "the whole
tree is gone". B also keeps the run's deadline itself: C passes it the job's
timeout, B arms a kernel timer (``setitimer``), and when it fires kills the tree
and reports the status as a timeout. So a deadline holds even when the server's
loop is busy, stalled or stopped; the server's own deadline is a second line.

C (``code_main``) becomes the code. Before its job arrives it does what does
not depend on the job (session, signals, OOM score, rlimits; in a hot spare
also the mounts and pivot_root). With the job it enters the box's root as
root, drops to the box's host uid, enters a user namespace where that uid is
1000, gets a new keyring, empties its capability bounding set, sets
no_new_privs, installs the seccomp filter (``seccomp``) and execs. In weak mode the
server forks C directly (``weak_child_main``); C skips the namespace steps and
restricts itself with Landlock (``landlock``) where the kernel has it.

Everything C needs is decided before it is forked (``ChildContext``); a setup
failure is reported on the worker's socket with the stage it happened in.
"""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import select
import signal
import socket
import struct
from collections.abc import Callable
from typing import Any, NoReturn

from . import cgroups, common, landlock, linux, protocol, seccomp

NOFILE_LIMIT = 4096
TCP_INITIAL_RCVBUF = 16384  # the box's net.ipv4.tcp_rmem default (the kernel's is 128 KiB)
CODE_OOM_SCORE_ADJ = 500
TIMEOUT_STRUCT = struct.Struct("d")  # C to B: the job's timeout in seconds
MAX_TIMER_SECONDS = 1e8  # setitimer takes no more; a timeout beyond it is no deadline anyway

# Signals the server ignores (Python ignores SIGPIPE and SIGXFSZ; the app may have ignored
# others). An ignored signal stays ignored across execve, so C restores these to default.
IGNORED_SIGNALS = [
    s
    for s in signal.valid_signals()
    if s not in (signal.SIGKILL, signal.SIGSTOP) and signal.getsignal(s) is signal.SIG_IGN
]


class ChildContext:
    """What C needs after fork; everything is decided before forking."""

    def __init__(self) -> None:
        self.namespaces = True
        self.template = ""
        self.box_dir = ""
        self.uid = 0
        self.gid = 0
        self.drop_uid = True
        self.argv: list[str] = []
        self.env: dict[str, str] = {}
        self.timeout = 0.0  # B kills the tree this long after C has its job
        self.stdout = -1
        self.stderr = -1
        self.stdin: int | None = None
        self.cgroup_fds: list[int] = []
        self.report_fd = -1
        self.disk_bytes = 0
        self.memory_rlimit: int | None = None
        self.nproc_rlimit: int | None = None
        # Limits C writes into the cgroups B made and joined (namespace mode).
        self.memory_dir: str | None = None
        self.memory_version = 0
        self.pids_dir: str | None = None
        self.memory_bytes: int | None = None
        self.max_processes = 0
        self.joins: list[str] = []  # cgroups C makes and joins itself (a generic spare taken by a session's box)
        self.box_memory: str | None = None  # the server's own: a hot spare's box's memory cgroup
        self.landlock: dict[str, list[Any]] | None = None  # weak mode: what the code may read, write, connect to
        self.ahead = b""  # a warm pool entry's: what its kind prepares ahead (the python kind: a -c text to compile)

    def job(self) -> dict[str, Any]:
        """The JSON part of a job for a worker; descriptors travel beside it."""
        return {
            "op": "job",
            "template": self.template,
            "box_dir": self.box_dir,
            "uid": self.uid,
            "gid": self.gid,
            "drop_uid": self.drop_uid,
            "argv": self.argv,
            "env": self.env,
            "timeout": self.timeout,
            "stdin": self.stdin is not None,
            "disk_bytes": self.disk_bytes,
            "memory_rlimit": self.memory_rlimit,
            "nproc_rlimit": self.nproc_rlimit,
            "memory_dir": self.memory_dir,
            "memory_version": self.memory_version,
            "pids_dir": self.pids_dir,
            "memory_bytes": self.memory_bytes,
            "max_processes": self.max_processes,
            "joins": self.joins,
        }

    @classmethod
    def from_job(cls, job: dict[str, Any], fds: list[int], report_fd: int) -> ChildContext:
        ctx = cls()
        for key in ("template", "box_dir", "uid", "gid", "drop_uid", "argv", "env", "disk_bytes", "max_processes"):
            setattr(ctx, key, job[key])
        for key in ("memory_rlimit", "nproc_rlimit", "memory_dir", "memory_version", "pids_dir", "memory_bytes"):
            setattr(ctx, key, job[key])
        ctx.timeout = job.get("timeout", 0.0)
        ctx.joins = list(job.get("joins") or [])
        ctx.stdout, ctx.stderr = fds[0], fds[1]
        rest = fds[2:]
        if job["stdin"]:
            ctx.stdin, rest = rest[0], rest[1:]
        ctx.cgroup_fds = rest
        ctx.report_fd = report_fd
        return ctx


def report_failure(fd: int, stage: str, exc: BaseException, *, ran: bool | None = False) -> None:
    """Tell the server where and why setup failed (from B or C, before execve).

    ``ran``: False when the code cannot have run (C before execve, B before it forked C).
    """
    err = exc.errno if isinstance(exc, OSError) else None
    message = f"{type(exc).__name__}: {exc}"[: common.REPORT_LIMIT]
    with contextlib.suppress(OSError):
        os.write(fd, protocol.encode({"op": "error", "stage": stage, "errno": err, "message": message, "ran": ran}))


def worker_main(
    sock: socket.socket,
    server_pidfd: int,
    cgroup: cgroups.RunCgroup | None,
    limits: cgroups.Limits,
    doomed: list[str],
    bound: dict[str, Any] | None,
    child: Callable[[int, int], NoReturn] | None = None,
    keep: frozenset[int] = frozenset(),
) -> NoReturn:
    """B: pid 1 of a fresh pid namespace. Prepares, forks C (which takes the job), reaps, reports.

    ``child(report_fd, timeout_w)``, when given, is what C runs instead of waiting for a job (a
    warm interpreter, see ``pool``); ``keep`` are descriptors it needs, closed in B once C has them.
    """
    gc.disable()  # a collection here could run finalizers of the server's objects
    report_fd = sock.fileno()
    stage = "worker"
    forked = False
    try:
        linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
        if select.select([server_pidfd], [], [], 0)[0]:
            os._exit(1)  # the server died before PDEATHSIG was armed
        # Other runs' pipes, box channels, the bootstrap socket: none of it is ours.
        common.close_all_except({0, 1, 2, report_fd, *keep})
        stage = "cgroup"
        # Empty cgroups of finished execs: removing them takes cgroup_mutex, so we do it here,
        # not the server. Whatever is still busy stays for the next worker.
        for path in doomed:
            with contextlib.suppress(OSError):
                os.rmdir(path)
        # Make and join the run's fresh cgroups now, ahead of the job: joining waits for an
        # RCU grace period (4-10 ms here) unless another join happened just before. C inherits.
        # The OOM killer should pick the code, not us. Lowering needs CAP_SYS_RESOURCE, which
        # some roots lack (this machine's does); C raises its own score either way.
        with contextlib.suppress(PermissionError):
            linux.write_file("/proc/self/oom_score_adj", "-1000")
        if cgroup is not None:
            cgroup.make_wrapper()
            for path in cgroup.dirs:
                os.mkdir(path, 0o755)
                linux.write_file(os.path.join(path, "cgroup.procs"), "0")  # "0": the writer; its children follow
            if limits is not None:  # the last exec's limits: likely this one's too, then C skips this
                cgroups.configure_cgroup(cgroup.memory_dir, cgroup.memory_version, cgroup.pids_dir, *limits)
        stage = "namespaces"
        linux.unshare(linux.CLONE_NEWNET | linux.CLONE_NEWIPC | linux.CLONE_NEWUTS | linux.CLONE_NEWCGROUP)
        socket.sethostname("sandbox")
        # Socket buffers are charged to the run's cgroup (cgroups.configure_cgroup), with two holes the
        # kernel leaves: each socket may take one packet past the limit (its minimum guarantee), and
        # a connection not yet accepted is charged to no cgroup until accept(). A 1500-byte MTU on lo
        # (not 64 KiB) makes that packet small, and a 16 KiB initial receive buffer (not 128 KiB)
        # bounds what an unaccepted connection holds; buffers of sockets that read still grow.
        linux.loopback_up(linux.LOOPBACK_MTU)
        low, _, high = linux.read_file("/proc/sys/net/ipv4/tcp_rmem").split()
        linux.write_file("/proc/sys/net/ipv4/tcp_rmem", f"{low} {TCP_INITIAL_RCVBUF} {high}")
        stage = "proxy listener"
        # The egress proxy's port, bound in this namespace before any code can run in it, so
        # the code can never take it. The server hands it to the app's proxy when the exec
        # has hosts, and closes it otherwise (then a connection to it is refused).
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", protocol.PROXY_PORT))
        listener.listen(protocol.PROXY_BACKLOG)
        stage = "fork"
        timeout_r, timeout_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            listener.close()
            os.close(timeout_r)
            if child is not None:
                child(report_fd, timeout_w)
            code_main(report_fd, bound, timeout_w)
        forked = True
        for fd in keep:
            os.close(fd)
        os.close(timeout_w)
        stage = "proxy listener"
        socket.send_fds(sock, [protocol.encode({"op": "listener", "fds": 1})], [listener.fileno()])
        listener.close()
        stage = "deadline"
        timed_out = _arm_deadline(timeout_r)  # once C has its job (or has died)
        stage = "reap"
        status = None
        while status is None:
            reaped, st = os.waitpid(-1, 0)
            if reaped == pid:
                status = st
        signal.setitimer(signal.ITIMER_REAL, 0)  # C is gone: a timer firing now would mislabel its end
        # C is gone: end the run now. Kill whatever it left (background jobs, double forks,
        # setsid) and reap until we have no child; a pending SIGKILL makes fork fail, so
        # nothing new can appear. Only then report: the report means "all of it is dead".
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            while True:
                os.waitpid(-1, 0)
        os.write(report_fd, protocol.encode({"op": "status", "status": status, "timeout": bool(timed_out)}))
        os._exit(0)
    except BaseException as exc:  # noqa: BLE001 - whatever it is, report it and exit
        report_failure(report_fd, stage, exc, ran=None if forked else False)
        os._exit(126)


def _arm_deadline(timeout_r: int) -> list[bool]:
    """B: wait for the job's timeout from C, then arm a timer that kills the tree when it fires.

    Returns a list that holds True once the timer has fired. EOF (C died before its
    job, or the spare was dropped) arms nothing: there is no code to stop.
    """
    fired: list[bool] = []
    raw = b""
    while len(raw) < TIMEOUT_STRUCT.size:
        chunk = os.read(timeout_r, TIMEOUT_STRUCT.size - len(raw))
        if not chunk:
            break
        raw += chunk
    os.close(timeout_r)
    if len(raw) < TIMEOUT_STRUCT.size:
        return fired
    (timeout,) = TIMEOUT_STRUCT.unpack(raw)
    if not 0 < timeout < float("inf"):
        return fired  # the server validates it; should it not, its own deadline still holds

    def on_deadline(signum: int, frame: object) -> None:
        # Runs as soon as waitpid is interrupted; nobody else can signal or delay B.
        fired.append(True)
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)  # every process of the namespace but B

    signal.signal(signal.SIGALRM, on_deadline)
    signal.setitimer(signal.ITIMER_REAL, min(timeout, MAX_TIMER_SECONDS))
    return fired


def code_main(report_fd: int, bound: dict[str, Any] | None, timeout_w: int) -> NoReturn:
    """C in a spare: do what does not depend on the job, wait for the job, then run it.

    A spare bound to a box (``bound``: the box and root of the exec it expects) also
    pivots into that root ahead of time. It stays root until the job comes, so nothing
    runs as the box's user between execs. With the job, C tells B (on ``timeout_w``)
    the timeout B then keeps.
    """
    gc.disable()
    stage = ["prepare"]
    try:
        code_prepare()
        rooted = bound is not None
        if bound is not None:
            code_enter_root(ChildContext.from_job(bound, [-1, -1], report_fd), stage)
        stage[0] = "job"
        sock = socket.socket(fileno=os.dup(report_fd))
        with contextlib.suppress(OSError):  # tell the server we are ready; only a hint
            sock.send(protocol.encode({"op": "ready"}))
        ctx, header = receive_job(sock, report_fd, timeout_w)
        if not rooted:
            stage[0] = "cgroup"
            for path in ctx.joins:  # beneath a session box's cgroup: made now, not ahead (see Cgroups.rehome)
                os.mkdir(path, 0o755)
                linux.write_file(os.path.join(path, "cgroup.procs"), "0")
            if not header.get("limits_set"):
                stage[0] = "cgroup limits"
                cgroups.configure_cgroup(
                    ctx.memory_dir, ctx.memory_version, ctx.pids_dir, ctx.memory_bytes, ctx.max_processes
                )
            code_enter_root(ctx, stage)
        code_enter_user(ctx, stage)
        code_launch(ctx, stage)
    except BaseException as exc:  # noqa: BLE001 - whatever it is, report it and exit
        report_failure(report_fd, stage[0], exc)
    os._exit(127)


def receive_job(sock: socket.socket, report_fd: int, timeout_w: int) -> tuple[ChildContext, dict[str, Any]]:
    """C: wait for the job on ``sock`` (exit quietly if the server dropped this worker), then tell B its timeout.

    From here B's timer runs: a run's time limit counts from the moment C has its job. Returns the job and
    its frame's header.
    """
    decoder = protocol.Decoder()
    frames: list[protocol.Frame] = []
    while not frames:
        data, fds = protocol.receive(sock)
        if not data and not fds:
            os._exit(0)  # the server dropped this spare or pool entry
        decoder.feed(data, fds)
        frames = decoder.frames()
    ctx = ChildContext.from_job(frames[0].header, frames[0].fds, report_fd)
    os.write(timeout_w, TIMEOUT_STRUCT.pack(float(ctx.timeout)))  # 8 bytes into an empty pipe: never blocks
    os.close(timeout_w)
    return ctx, frames[0].header


def weak_child_main(ctx: ChildContext) -> NoReturn:
    """C forked directly by the server (weak mode): join the cgroups, prepare, run."""
    gc.disable()
    stage = ["cgroup"]
    try:
        for fd in ctx.cgroup_fds:
            os.write(fd, b"0")
        stage[0] = "prepare"
        code_prepare()
        code_enter_root(ctx, stage)
        code_enter_user(ctx, stage)
        code_launch(ctx, stage)
    except BaseException as exc:  # noqa: BLE001 - whatever it is, report it and exit
        report_failure(ctx.report_fd, stage[0], exc)
    os._exit(127)


def code_prepare() -> None:
    """C's setup that does not depend on the job."""
    # Raising is always allowed: in the run's cgroup the code is the OOM victim rather than
    # B, and on the host it goes before the app.
    linux.write_file("/proc/self/oom_score_adj", str(CODE_OOM_SCORE_ADJ))
    os.setsid()  # also blocks the TIOCSTI terminal escape: no controlling terminal
    # Ignored signals survive execve (Python ignores SIGPIPE and SIGXFSZ); handlers do not.
    for sig in IGNORED_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    os.umask(0o022)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nofile = NOFILE_LIMIT if hard < 0 else min(NOFILE_LIMIT, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))


def code_enter_root(ctx: ChildContext, stage: list[str]) -> None:
    """Into the sandbox's root (namespace mode; nothing to do when weak), still as root."""
    if ctx.namespaces:
        stage[0] = "mounts"
        # Now, not when the spare was forked: the copy must hold the current boxes and roots.
        linux.unshare(linux.CLONE_NEWNS)
        # Our copies receive mount events from the server's namespace and send none back: detaching the
        # old root below must not propagate to a shared mount there (the warm pool's folders, see pool.py).
        linux.mount(None, "/", None, linux.MS_REC | linux.MS_SLAVE)
        root = ctx.template
        # hidepid=2: processes the code cannot ptrace are invisible. That is B, pid 1, which
        # stays in the server's mount namespace: its mountinfo and cmdline are not the code's business.
        linux.mount("proc", root + "/proc", "proc", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC, "hidepid=2")
        # The box's folders, all on its own tmpfs (nosuid, nodev; a bind keeps its mount's flags), so what
        # /tmp holds counts against the disk limit as /work does; never the host's /tmp.
        for name in common.BOX_FOLDERS:
            linux.mount(os.path.join(ctx.box_dir, name), os.path.join(root, name), None, linux.MS_BIND)
        stage[0] = "pivot_root"
        os.chdir(root)
        linux.pivot_root(".", ".")  # stacks the old root under the new one; detach it next
        linux.umount(".")
        os.chdir("/")


def code_enter_user(ctx: ChildContext, stage: list[str]) -> None:
    """Become the box's user: credentials, user namespace, keyring, no privileges, /work."""
    if not ctx.namespaces and ctx.drop_uid:
        # Weak mode as root: drop the bounding set while we still may (below we lose CAP_SETPCAP).
        stage[0] = "capabilities"
        linux.drop_bounding_set()
    stage[0] = "credentials"
    if ctx.drop_uid:
        os.setgroups([])
        os.setresgid(ctx.gid, ctx.gid, ctx.gid)
        os.setresuid(ctx.uid, ctx.uid, ctx.uid)
    if ctx.namespaces:
        stage[0] = "user namespace"
        # Changing uid made /proc/self root-owned; we must be able to write our own maps.
        linux.prctl(linux.PR_SET_DUMPABLE, 1)
        linux.unshare(linux.CLONE_NEWUSER)
        # An unprivileged process may map exactly its own uid and gid (after denying
        # setgroups), so no help from B is needed.
        linux.write_file("/proc/self/setgroups", "deny")
        linux.write_file("/proc/self/uid_map", f"{common.INSIDE_ID} {ctx.uid} 1")
        linux.write_file("/proc/self/gid_map", f"{common.INSIDE_ID} {ctx.gid} 1")
        # No nested user namespaces: without one the code can never hold a capability (to
        # mount, to make network namespaces, ...). The limit lives in this user namespace and
        # changing it needs CAP_SYS_RESOURCE here, which execve takes away.
        linux.write_file("/proc/sys/user/max_user_namespaces", "0")
    stage[0] = "keyring"
    linux.join_new_session_keyring()
    stage[0] = "capabilities"
    if ctx.namespaces:
        # In the new user namespace we hold every capability of that namespace and a full
        # bounding set: empty the bounding set. execve as uid 1000 then clears the rest.
        linux.drop_bounding_set()
    linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)
    if ctx.landlock is not None:
        stage[0] = "landlock"
        landlock.restrict(ctx.landlock["readable"], ctx.landlock["writable"], ctx.landlock["connect"])
    if seccomp.FILTER is not None:
        stage[0] = "seccomp"
        seccomp.FILTER.install()
    stage[0] = "chdir"
    os.chdir("/work" if ctx.namespaces else os.path.join(ctx.box_dir, "work"))


def code_launch(ctx: ChildContext, stage: list[str]) -> NoReturn:
    """The job's own part: rlimits, stdio, execve."""
    stage[0] = "rlimits"
    resource.setrlimit(resource.RLIMIT_FSIZE, (ctx.disk_bytes, ctx.disk_bytes))
    if ctx.memory_rlimit is not None:
        resource.setrlimit(resource.RLIMIT_AS, (ctx.memory_rlimit, ctx.memory_rlimit))
    if ctx.nproc_rlimit is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (ctx.nproc_rlimit, ctx.nproc_rlimit))
    stage[0] = "stdio"
    stdin = ctx.stdin if ctx.stdin is not None else os.open("/dev/null", os.O_RDONLY)
    os.dup2(stdin, 0)
    os.dup2(ctx.stdout, 1)
    os.dup2(ctx.stderr, 2)
    common.close_all_except({0, 1, 2, ctx.report_fd})  # the report socket is close-on-exec
    stage[0] = "execve"
    os.execve(ctx.argv[0], ctx.argv, ctx.env)
