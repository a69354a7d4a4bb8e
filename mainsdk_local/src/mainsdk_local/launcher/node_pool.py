"""The warm pool's node kind: a ``node`` exec'd ahead in its own fresh box, handed one ``node -e CODE`` run.

The box is the Python kind's (``pool.py``): a worker whose C enters a pool folder's box exactly as the
cold path does (the same ``stages`` functions), then, instead of the Python stub, execs
``node --expose-internals -e STUB`` (``node_stub.py``). What differs:

- **Output.** Node cannot put the run's pipes on its descriptors 1 and 2 (no ``dup2``), so they are
  pipes the server makes for the node at warm time, and keeps the read ends of. At hand-off the
  server checks that nothing was written on them (``FIONREAD``: a node that printed while starting
  is dirty and its key runs cold) and sends the read ends to the app in an ``output`` frame, before
  the run's reply; the app reads the run's output from them, with the same limits, and EOF when the
  last writer (a background child too) is gone. The server holds no write end.
- **The bottom frame.** The stub stands in for ``node:internal/main/eval_string``'s call of
  ``evalScript``; where that call is comes from a cold ``node -e PROBE_CODE`` run once per key by
  the first warm node's C, in its box, before it execs the stub (``probe``, cached by the server).
- **Limits.** The server writes the run's cgroup limits (as for Python). Node cannot set rlimits,
  and ``prlimit`` from the server needs CAP_SYS_RESOURCE, which this machine's root lacks: the
  node starts with its box's disk size as ``RLIMIT_FSIZE`` (the only rlimit the cold path sets
  per run where cgroups exist), and that size is part of the key. The stub sends B the run's
  timeout: the time limit counts from hand-off.
- **What runs cold:** anything but ``node -e CODE`` with no further argument, code on stdin, a run
  with hosts (its proxy preload is a start-up option), ``COLD_VARIABLES`` (``NODE_OPTIONS``, coverage),
  start-up variables (``startup_environment``) unlike the warm node's, text that is not valid UTF-8 (the job is JSON),
  fewer than ``MIN_PROCESSES`` processes (node's own threads are already there), code naming
  ``worker_threads`` or ``Worker`` (a Worker inherits the node's start-up argv and options, the stub's),
  a key whose probe or stub said "dirty", and, as for Python, a session's box or a box's later exec.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import resource
import signal
import struct
from typing import TYPE_CHECKING, Any, NoReturn

from . import common, node_stub
from .pool import MAX_KINDS, Entry, Kind, PoolKey

if TYPE_CHECKING:
    from . import stages
    from .runs import ExecRequest

# Variables node, libuv, OpenSSL, ICU or the C library read while node starts (HOME: the global module
# folders): a run must have the values its warm node started with, or it runs cold.
STARTUP_VARIABLES = (
    "HOME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TZDIR",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LOCPATH",
    "NLSPATH",
    "TMPDIR",
)
STARTUP_PREFIXES = ("NODE_", "UV_", "OPENSSL_", "SSL_", "LC_", "LD_", "MALLOC_", "ICU_", "GCONV_", "V8_")
# Variables under which a run never takes a warm node: options (a run with hosts preloads its proxy this way),
# coverage written at exit (it would cover the stub's script too), and a parent's IPC channel or cluster id.
COLD_VARIABLES = (
    "NODE_OPTIONS",
    "NODE_V8_COVERAGE",
    "NODE_CHANNEL_FD",
    "NODE_CHANNEL_SERIALIZATION_MODE",
    "NODE_UNIQUE_ID",
)
# Node starts its own threads (here 7 with the main one); below this many processes a cold node may fail to
# start where a warm one already runs.
MIN_PROCESSES = 16
# Where C moves descriptors before placing them, out of the numbers node gives its own at start.
_HIGH_FD = 200
_PROBE_LIMIT = 1 << 16
# A worker_threads Worker takes its parent's start-up argv and options (--expose-internals, the stub) unless
# given its own: code naming one runs cold. (Code that reaches it without naming it is a documented difference.)
_WORKERS = re.compile(r"worker_threads|\bWorker\b")
_LENGTH = struct.Struct(">I")


def startup_environment(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The variables of ``env`` a node reads while it starts, sorted."""
    return tuple(sorted((k, v) for k, v in env.items() if k in STARTUP_VARIABLES or k.startswith(STARTUP_PREFIXES)))


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _run_probe(node: str, env: dict[str, str]) -> str | None:
    """C: run ``node -e PROBE_CODE`` cold, here in the box, and return what it printed (None: it failed)."""
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(write_end, 1)
            null = os.open("/dev/null", os.O_WRONLY)
            os.dup2(null, 2)
            common.close_all_except({0, 1, 2})
            os.execve(node, [node, "-e", node_stub.PROBE_CODE], env)
        finally:
            os._exit(127)
    os.close(write_end)
    chunks: list[bytes] = []
    size = 0
    while size <= _PROBE_LIMIT:
        chunk = os.read(read_end, 1 << 14)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    os.close(read_end)
    if size > _PROBE_LIMIT:
        os.kill(pid, signal.SIGKILL)  # it would block on a pipe nobody reads
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode("utf-8", "replace")
    if status != 0 or size > _PROBE_LIMIT or not node_stub.usable_probe(text):
        return None
    return text


class NodeStub(Kind):
    """A warm ``node --expose-internals -e STUB`` (see the module's docstring and ``node_stub.py``).

    Its key: ``(node, disk bytes, start-up environment)``. It keeps each key's cold probe, sent by the
    first warm node's C of that key; later ones exec the stub at once.
    """

    name = "node"
    own_output = True

    def __init__(self) -> None:
        self.probes: dict[PoolKey, str] = {}

    def key(self, spec: ExecRequest, root: tuple[Any, ...]) -> tuple[PoolKey, Any] | None:
        """The key of a ``node -e CODE`` exec and its code (the plan), or None: it runs cold."""
        if spec.warm != "node" or spec.has_stdin or spec.proxy or len(spec.argv) != 3 or spec.argv[1] != "-e":
            return None
        if any(name in spec.env for name in COLD_VARIABLES) or spec.max_processes < MIN_PROCESSES:
            return None
        if not all(_utf8(text) for text in (spec.argv[2], *spec.env, *spec.env.values())):
            return None
        if _WORKERS.search(spec.argv[2]):
            return None  # a Worker thread inherits the node's own start-up options and argv: the stub's
        return (self.name, root, (spec.argv[0], spec.disk_bytes, startup_environment(spec.env))), spec.argv[2]

    def configure(self, ctx: stages.ChildContext, key: PoolKey) -> None:
        node, disk, startup = key[2]
        probe = self.probes.get(key)
        ctx.argv = node_stub.stub_argv(node, probe) if probe is not None else [node]
        ctx.env = dict(startup)
        ctx.disk_bytes = disk

    def start(
        self, ctx: stages.ChildContext, control_fd: int, report_fd: int, timeout_w: int, stage: list[str]
    ) -> NoReturn:
        """Exec the stub with 0 /dev/null, 1 and 2 the pipes whose read ends the server holds, the control
        socket and B's deadline pipe at ``node_stub.CONTROL_FD`` and ``node_stub.DEADLINE_FD``, and
        ``RLIMIT_FSIZE`` the box's disk size, as the cold path's C sets it. All else is closed (the report
        socket is close-on-exec). With no probe for its key yet, C first runs it here, cold, and sends it to
        the server (``P``, length, text)."""
        stage[0] = "pool descriptors"
        os.chdir("/")  # an empty box: the run's files arrive at hand-off
        null = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
        sources = (null, ctx.stdout, ctx.stderr, control_fd, timeout_w)
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _HIGH_FD) for fd in sources]
        for target, fd in zip((0, 1, 2, node_stub.CONTROL_FD, node_stub.DEADLINE_FD), moved, strict=True):
            os.dup2(fd, target, inheritable=True)
        common.close_all_except({0, 1, 2, node_stub.CONTROL_FD, node_stub.DEADLINE_FD, report_fd})
        resource.setrlimit(resource.RLIMIT_FSIZE, (ctx.disk_bytes, ctx.disk_bytes))
        argv = ctx.argv
        if len(argv) == 1:
            stage[0] = "probe"
            probe = _run_probe(argv[0], ctx.env)
            if probe is None:
                os.write(node_stub.CONTROL_FD, b"D")
                os._exit(0)
            data = probe.encode()
            os.write(node_stub.CONTROL_FD, b"P" + _LENGTH.pack(len(data)) + data)
            argv = node_stub.stub_argv(argv[0], probe)
        stage[0] = "execve"
        os.execve(argv[0], argv, ctx.env)

    def job(self, ctx: stages.ChildContext, plan: Any) -> tuple[bytes, list[int]]:
        """The code, the run's environment, its folder and timeout; no descriptor (the output pipes are the node's)."""
        if ctx.memory_rlimit is not None or ctx.nproc_rlimit is not None:
            raise OSError(errno.ENOTSUP, "a warm node's limits are cgroups")  # the pool is off without cgroups
        return node_stub.encode_job(str(plan), ctx.env, "/work", float(ctx.timeout)), []

    def feed(self, entry: Entry, data: bytes) -> str:
        """``P`` (length, the key's cold probe: kept for the next warm nodes), then ``R`` or ``D``."""
        if not data:
            return "gone"
        entry.said += data
        while entry.said[:1] == b"P":
            if len(entry.said) < 1 + _LENGTH.size:
                return "wait"
            (size,) = _LENGTH.unpack_from(entry.said, 1)
            if size > _PROBE_LIMIT:
                return "gone"
            if len(entry.said) < 1 + _LENGTH.size + size:
                return "wait"
            text = entry.said[1 + _LENGTH.size : 1 + _LENGTH.size + size].decode("utf-8", "replace")
            entry.said = entry.said[1 + _LENGTH.size + size :]
            if not node_stub.usable_probe(text):
                return "dirty"
            self.probes.setdefault(entry.key, text)
            while len(self.probes) > MAX_KINDS:
                del self.probes[next(iter(self.probes))]  # bounded as the pool's kinds are: the oldest goes
        if not entry.said:
            return "wait"
        said, entry.said = entry.said[:1], entry.said[1:]
        if said == b"R" and not entry.ready and not entry.said:
            return "ready"
        return "dirty" if said == b"D" else "gone"
