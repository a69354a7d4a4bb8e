"""The launcher server: the only process of the local driver that forks.

Started once per ``Launcher`` as ``python -I -S _server.py --fd N --parent PID``,
single-threaded and standard-library only. Forking a small single-threaded
process is safe (the app may have threads, where fork + Python code is not) and
cheap; every run still execs a fresh interpreter in fresh namespaces, so
nothing of this process's memory reaches the code.

Per exec (namespace mode)::

    server --unshare(NEWPID)+fork--> B, pid 1 of a new pid namespace: makes and joins the
        exec's fresh cgroups, unshares net/ipc/uts/cgroup namespaces, brings lo up, sets the
        hostname, then
    B --fork--> C: new session, default signals, OOM score, rlimits; waits for the job.
        With the job, C writes the cgroup limits, unshares a mount namespace (a copy of
        the server's, so it holds the current boxes and roots), mounts /proc, /work and
        /out over a read-only root template and pivots into it, drops to the box's host
        uid, enters a new user namespace where that uid is 1000, gets a new session
        keyring, empties its capability bounding set, sets no_new_privs, execve.

B+C pairs are prepared ahead of time ("spares"), so that work is off the exec's
critical path: a generic one, and a "hot" one whose C has also pivoted into the
root of the box the last exec used (it stays root until its job comes).

B reaps everything until C exits, then SIGKILLs whatever is left in its pid
namespace, reaps until it has no child, and only then reports C's wait status:
the report means the whole tree is gone. Killing B (timeout, cancel, close) has
the same effect through the kernel: the death of a pid namespace's init kills
the namespace, and B's exit is seen only after all of it is gone.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import gc
import heapq
import math
import os
import resource
import select
import selectors
import signal
import socket
import stat
import sys
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from mainsdk_local import _linux as L
    from mainsdk_local import _protocol as P
elif __package__:
    from . import _linux as L
    from . import _protocol as P
else:
    # Run as a script with -I: the script's directory is not on sys.path. Append,
    # never prepend, so nothing next to this file can shadow the standard library.
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import _linux as L
    import _protocol as P

UID_BASE = 1_500_000_000
SLOTS_PER_SERVER = 512  # boxes open at once in one server; also spaces servers' uid ranges apart
INSIDE_ID = 1000
MOUNT_BASE = "/tmp/.mainsdk-local"
CGROUP_PREFIX = "mainsdk-local-"
TEMPLATE_CACHE = 8
NOFILE_LIMIT = 4096
WEAK_SWEEP_SECONDS = 2.0
REPORT_LIMIT = 4096
CODE_OOM_SCORE_ADJ = 500
# Workers kept ready, each a B and its C waiting for a job: one generic spare, plus one
# "hot" spare bound to the box and root of the last exec, whose C has entered the sandbox
# already (see Server._take_worker).
SPARES = 1
# A spare that replaces one nobody took waits until the latest exec is this old, so its
# preparation does not compete with a short run for the CPUs.
SPARE_DELAY = 0.03

# /etc entries copied into every root; everything else of the host's /etc stays out.
ETC_ENTRIES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "alternatives",
)
ETC_HIDDEN = ("ssl/private",)
DEVICES = ("null", "zero", "full", "random", "urandom")
FORBIDDEN_READONLY = ("/proc", "/sys", "/dev", "/work", "/out")

PASSWD = (
    "root:x:0:0:root:/root:/usr/sbin/nologin\n"
    f"sandbox:x:{INSIDE_ID}:{INSIDE_ID}:sandbox:/work:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
GROUP = f"root:x:0:\nsandbox:x:{INSIDE_ID}:\nnogroup:x:65534:\n"
HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tsandbox\n"

# Signals the server ignores (Python ignores SIGPIPE and SIGXFSZ; the app may have ignored
# others). An ignored signal stays ignored across execve, so C restores these to default.
IGNORED_SIGNALS = [
    s
    for s in signal.valid_signals()
    if s not in (signal.SIGKILL, signal.SIGSTOP) and signal.getsignal(s) is signal.SIG_IGN
]


class RequestError(Exception):
    """A request failed; ``kind`` tells the client which exception to raise."""

    def __init__(self, kind: str, message: str, err: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind  # "value" | "os" | "launcher"
        self.errno = err


def _launch_error(stage: str, exc: BaseException) -> RequestError:
    err = exc.errno if isinstance(exc, OSError) else None
    return RequestError("launcher", f"{stage}: {exc}", err)


def _host_pid() -> int:
    """Our pid as the host (and /proc) sees it; os.getpid() is 1 inside our own pid namespace."""
    return int(os.readlink("/proc/self"))


def _proc_starttime(pid: int | str) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    return raw[raw.rindex(b")") + 2 :].split()[19].decode()


def _close(fd: int | None) -> None:
    if fd is not None and fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)


def _close_all_except(keep: set[int]) -> None:
    """Close every descriptor but ``keep`` (close_range under the hood: cheap)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    top = 1 << 20 if hard < 0 or hard > 1 << 20 else hard  # RLIM_INFINITY is -1 here
    start = 0
    for fd in sorted(keep):
        if fd > start:
            os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, top)


# ---------------------------------------------------------------------------
# cgroups


# (memory_bytes, pids.max) of an exec's cgroups.
Limits = tuple[int | None, int] | None
# (readonly_paths, hidden_paths): which root template an exec uses.
TemplateKey = tuple[tuple[str, ...], tuple[str, ...]]


class RunCgroup:
    """The cgroup directories of one exec."""

    def __init__(self) -> None:
        self.dirs: list[str] = []
        self.procs_fds: list[int] = []
        self.memory_dir: str | None = None
        self.memory_version = 0
        self.pids_dir: str | None = None

    def close_fds(self) -> None:
        for fd in self.procs_fds:
            _close(fd)
        self.procs_fds = []


def _configure_cgroup(
    memory_dir: str | None, memory_version: int, pids_dir: str | None, memory_bytes: int | None, max_processes: int
) -> None:
    """Write one exec's limits into its cgroups (no cgroup_mutex: cheap even while others join)."""
    if memory_dir is not None and memory_bytes is not None:
        if memory_version == 1:
            memory = os.path.join(memory_dir, "memory.limit_in_bytes")
            # memory+swap too: without it a machine with swap would let the run swap.
            memsw = os.path.join(memory_dir, "memory.memsw.limit_in_bytes")
            knobs = [memory, memsw] if os.path.exists(memsw) else [memory]
            try:
                for knob in knobs:
                    L.write_file(knob, str(memory_bytes))
            except OSError as exc:
                if exc.errno != errno.EINVAL or len(knobs) == 1:
                    raise
                # memory may never exceed memory+swap: raising both, memory+swap goes first.
                for knob in reversed(knobs):
                    L.write_file(knob, str(memory_bytes))
        else:
            L.write_file(os.path.join(memory_dir, "memory.max"), str(memory_bytes))
            if os.path.exists(os.path.join(memory_dir, "memory.swap.max")):
                L.write_file(os.path.join(memory_dir, "memory.swap.max"), "0")
    if pids_dir is not None:
        L.write_file(os.path.join(pids_dir, "pids.max"), str(max_processes))


class Cgroups:
    """A per-server cgroup directory in each usable hierarchy; a fresh child per exec."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.memory: tuple[str, int] | None = None  # (server dir, cgroup version)
        self.pids: tuple[str, int] | None = None
        self._made: list[str] = []
        self._count = 0
        self._retry: list[str] = []
        self._doomed: list[str] = []  # empty cgroups of finished execs, for the next worker to remove
        self._handed: list[str] = []  # given to the last worker; checked at the next hand-out

    @property
    def memory_mode(self) -> str:
        if self.memory is None:
            return "rlimit"
        return f"cgroup-v{self.memory[1]}"

    def setup(self) -> None:
        """Find our own cgroups, clean dead servers' leftovers, make our directories."""
        v1_mounts: dict[str, str] = {}
        v2_mount: str | None = None
        try:
            with open("/proc/self/mountinfo") as fh:
                for line in fh:
                    left, _, right = line.partition(" - ")
                    fields, rfields = left.split(), right.split()
                    if len(rfields) < 3 or len(fields) < 5:
                        continue
                    if rfields[0] == "cgroup2" and v2_mount is None:
                        v2_mount = fields[4]
                    elif rfields[0] == "cgroup":
                        for opt in rfields[2].split(","):
                            if opt in ("memory", "pids"):
                                v1_mounts.setdefault(opt, fields[4])
            own_v1: dict[str, str] = {}
            own_v2: str | None = None
            with open("/proc/self/cgroup") as fh:
                for line in fh:
                    _, controllers, path = line.rstrip("\n").split(":", 2)
                    if controllers == "":
                        own_v2 = path
                    for c in controllers.split(","):
                        own_v1[c] = path
        except OSError:
            return
        for controller in ("memory", "pids"):
            found: tuple[str, int] | None = None
            if controller in v1_mounts and controller in own_v1:
                found = self._make(v1_mounts[controller] + own_v1[controller].rstrip("/"), 1, controller)
            if found is None and v2_mount is not None and own_v2 is not None:
                found = self._make(v2_mount + own_v2.rstrip("/"), 2, controller)
            if controller == "memory":
                self.memory = found
            else:
                self.pids = found

    def _make(self, parent: str, version: int, controller: str) -> tuple[str, int] | None:
        if not os.path.isdir(parent):
            return None
        self._clean_stale(parent)
        path = os.path.join(parent, self.tag)
        try:
            if version == 2:
                with open(os.path.join(parent, "cgroup.controllers")) as fh:
                    if controller not in fh.read().split():
                        return None
                with open(os.path.join(parent, "cgroup.subtree_control")) as fh:
                    enabled = controller in fh.read().split()
                if not enabled:
                    # Only possible where our cgroup has no processes of its own (a delegated
                    # subtree or the root of a container); elsewhere this fails and we fall back.
                    L.write_file(os.path.join(parent, "cgroup.subtree_control"), f"+{controller}")
            if path not in self._made:
                os.mkdir(path, 0o755)
                self._made.append(path)
            if version == 2:
                L.write_file(os.path.join(path, "cgroup.subtree_control"), f"+{controller}")
            knob = {"memory": "memory.limit_in_bytes", "pids": "pids.max"}[controller]
            if version == 2:
                knob = {"memory": "memory.max", "pids": "pids.max"}[controller]
            if not os.path.exists(os.path.join(path, knob)):
                return None
        except OSError:
            return None
        return (path, version)

    @staticmethod
    def _clean_stale(parent: str) -> None:
        """Remove the directories of servers that died without cleaning up."""
        try:
            names = os.listdir(parent)
        except OSError:
            return
        for name in names:
            if not name.startswith(CGROUP_PREFIX):
                continue
            try:
                pid_text, start = name[len(CGROUP_PREFIX) :].split("-", 1)
                pid = int(pid_text)
            except ValueError:
                continue
            if _proc_starttime(pid) == start:
                continue  # that server is alive
            Cgroups._remove_tree(os.path.join(parent, name))

    @staticmethod
    def _remove_tree(path: str) -> None:
        try:
            subs = [e.path for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
        except OSError:
            return
        for sub in [*subs, path]:
            for _ in range(50):
                for pid in Cgroups.members(sub):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                try:
                    os.rmdir(sub)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)

    @staticmethod
    def members(path: str) -> list[int]:
        try:
            with open(os.path.join(path, "cgroup.procs")) as fh:
                return [int(x) for x in fh.read().split()]
        except OSError:
            return []

    def plan(self) -> RunCgroup | None:
        """Names for one exec's fresh, never used cgroups (no system call); None without cgroups."""
        if self.memory is None and self.pids is None:
            return None
        self._count += 1
        run = RunCgroup()
        name = f"run-{self._count}"
        if self.memory is not None:
            base, run.memory_version = self.memory
            run.memory_dir = os.path.join(base, name)
            run.dirs.append(run.memory_dir)
        if self.pids is not None:
            run.pids_dir = os.path.join(self.pids[0], name)
            if run.pids_dir not in run.dirs:
                run.dirs.append(run.pids_dir)
        return run

    def make(self) -> RunCgroup | None:
        """Plan and create one exec's cgroups here, with their cgroup.procs opened (weak mode)."""
        run = self.plan()
        if run is None:
            return None
        try:
            for path in run.dirs:
                os.mkdir(path, 0o755)
                run.procs_fds.append(os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC))
        except OSError as exc:
            self.remove(run)
            raise _launch_error("cgroup", exc) from None
        return run

    def take_doomed(self) -> list[str]:
        """Empty cgroups to remove, for a worker to rmdir during its preparation.

        mkdir, rmdir and joining a cgroup all take the kernel's cgroup_mutex, and a join
        holds it through an RCU grace period: done by the server, any of them could stall
        every box for milliseconds. Workers do them instead, off everyone's critical path.
        """
        self._doomed += [p for p in self._handed if os.path.isdir(p)]  # not removed last time
        self._handed, self._doomed = self._doomed, []
        return list(self._handed)

    def give_back(self, paths: list[str]) -> None:
        """Paths a worker never got to remove."""
        self._doomed += paths

    @staticmethod
    def oom_killed(run: RunCgroup) -> bool:
        if run.memory_dir is None:
            return False
        knob = "memory.oom_control" if run.memory_version == 1 else "memory.events"
        try:
            with open(os.path.join(run.memory_dir, knob)) as fh:
                for line in fh:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and int(value) > 0:
                        return True
        except (OSError, ValueError):
            pass
        return False

    def remove(self, run: RunCgroup, *, defer: bool = False) -> None:
        """Remove a finished exec's cgroups now, or (defer) through the next worker."""
        run.close_fds()
        if defer:
            self._doomed += run.dirs
            run.dirs = []
            return
        for path in run.dirs:
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                self._retry.append(path)  # the kernel may take a moment to let go of the last task
        run.dirs = []

    def retry(self) -> bool:
        """Retry removals that failed; True while some remain."""
        left = []
        for path in self._retry:
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                left.append(path)
        self._retry = left
        return bool(left)

    def shutdown(self) -> None:
        self._retry += self._doomed + self._handed
        self._doomed, self._handed = [], []
        for _ in range(100):
            if not self.retry():
                break
            time.sleep(0.01)
        for path in reversed(self._made):
            self._remove_tree(path)


# ---------------------------------------------------------------------------
# root templates


def _mkdirs(root: str, path: str) -> str:
    """Create ``path`` (absolute, inside the sandbox) under ``root`` with mode 0755 dirs."""
    current = root
    for part in path.strip("/").split("/"):
        current = os.path.join(current, part)
        if os.path.islink(current):
            raise OSError(errno.ELOOP, f"{current} is a symlink in the new root")
        if not os.path.isdir(current):
            os.mkdir(current, 0o755)
    return current


def _mount_point_for(source: str, target: str) -> None:
    """Make an empty directory or file at ``target`` to bind ``source`` over."""
    if os.path.isdir(source):
        if not os.path.isdir(target):
            os.mkdir(target, 0o755)
    elif not os.path.exists(target):
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))


def _within(path: str, root: str) -> bool:
    return root in ("/", path) or path.startswith(root + "/")


class Templates:
    """Read-only root trees, one per (readonly_paths, hidden_paths), built once and reused.

    Each run's mount namespace starts as a copy of the server's, so it already
    holds the template; the run only adds /proc, /work and /out on top (in its own
    namespace) and pivots into it. That keeps per-run mount work to a handful of
    calls. The template mount is read-only and owned by the initial user
    namespace, so code in the run cannot remount it.
    """

    def __init__(self, base: str) -> None:
        self.base = base
        self._cache: collections.OrderedDict[TemplateKey, str] = collections.OrderedDict()
        self._count = 0
        self.empty_dir = os.path.join(base, "empty-dir")
        self.empty_file = os.path.join(base, "empty-file")

    def setup(self) -> None:
        os.mkdir(self.empty_dir, 0o555)
        os.close(os.open(self.empty_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444))

    def get(self, readonly: tuple[str, ...], hidden: tuple[str, ...]) -> str:
        key = (readonly, hidden)
        path = self._cache.get(key)
        if path is not None:
            self._cache.move_to_end(key)
            return path
        for ro in readonly:  # checked once per template, not per exec
            if os.path.realpath(ro) != ro:
                raise RequestError("value", f"readonly path {ro} must be canonical (no symlinks)")
            if not os.path.exists(ro):
                raise RequestError("value", f"readonly path {ro} does not exist")
        self._count += 1
        path = os.path.join(self.base, f"root-{self._count}")
        os.mkdir(path, 0o755)
        try:
            self._build(path, readonly, hidden)
        except OSError as exc:
            self._drop(path)
            raise _launch_error("root", exc) from None
        self._cache[key] = path
        while len(self._cache) > TEMPLATE_CACHE:
            _, old = self._cache.popitem(last=False)
            self._drop(old)  # runs using it keep their own copy of the mount
        return path

    @staticmethod
    def _drop(path: str) -> None:
        with contextlib.suppress(OSError):
            L.umount(path)
        with contextlib.suppress(OSError):
            os.rmdir(path)

    def _build(self, root: str, readonly: tuple[str, ...], hidden: tuple[str, ...]) -> None:
        L.mount("tmpfs", root, "tmpfs", L.MS_NOSUID | L.MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
        for name in ("usr", "etc", "proc", "dev", "work", "out"):
            os.mkdir(os.path.join(root, name), 0o755)
        L.bind_readonly("/usr", os.path.join(root, "usr"))
        # /bin, /lib, ... as the host has them: symlinks into /usr on merged-/usr systems.
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = "/" + name
            if os.path.islink(host):
                os.symlink(os.readlink(host), os.path.join(root, name))
            elif os.path.isdir(host):
                os.mkdir(os.path.join(root, name), 0o755)
                L.bind_readonly(host, os.path.join(root, name))
        etc = os.path.join(root, "etc")
        for name in ETC_ENTRIES:
            host = os.path.join("/etc", name)
            target = os.path.join(etc, name)
            if os.path.islink(host):
                os.symlink(os.readlink(host), target)
            elif os.path.isdir(host) or os.path.isfile(host):
                _mount_point_for(host, target)
                L.bind_readonly(host, target)
        for name, text in (("passwd", PASSWD), ("group", GROUP), ("hosts", HOSTS), ("hostname", "sandbox\n")):
            with open(os.path.join(etc, name), "w") as fh:
                fh.write(text)
        for name in ETC_HIDDEN:
            target = os.path.join(etc, name)
            if os.path.isdir(target) and not os.path.islink(target):
                L.bind_readonly(self.empty_dir, target, recursive=False)
        dev = os.path.join(root, "dev")
        for name in DEVICES:
            host = os.path.join("/dev", name)
            if os.path.exists(host):
                _mount_point_for(host, os.path.join(dev, name))
                # Not read-only: writing /dev/null must work. Device nodes come from the
                # host's /dev mount, which is not nodev.
                L.mount(host, os.path.join(dev, name), None, L.MS_BIND)
        for name, target in (
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ):
            os.symlink(target, os.path.join(dev, name))
        bound = ["/usr"]
        for path in sorted(readonly):
            if any(_within(path, b) for b in bound):
                continue  # already visible through a bound parent
            target = _mkdirs(root, os.path.dirname(path)) if os.path.dirname(path) != "/" else root
            target = os.path.join(target, os.path.basename(path))
            _mount_point_for(path, target)
            L.bind_readonly(path, target)
            bound.append(path)
        for path in hidden:
            real = os.path.realpath(path)
            if not os.path.lexists(real):
                continue
            if not any(_within(real, b) for b in bound):
                raise OSError(errno.EINVAL, f"hidden path {path} is not inside /usr or a readonly path")
            target = root + real
            source = self.empty_dir if os.path.isdir(real) else self.empty_file
            L.bind_readonly(source, target, recursive=False)
        L.mount(None, root, None, L.MS_REMOUNT | L.MS_BIND | L.MS_RDONLY | L.MS_NOSUID | L.MS_NODEV)

    def shutdown(self) -> None:
        for path in self._cache.values():
            self._drop(path)
        self._cache.clear()


# ---------------------------------------------------------------------------
# requests


def _validate_relpath(path: object) -> tuple[bool, list[str]]:
    """Split a box path into (in_out, segments); ``../out/x`` names /out, the rest /work."""
    if not isinstance(path, str):
        raise RequestError("value", "path must be a string")
    in_out = path.startswith("../out/")
    rel = path[len("../out/") :] if in_out else path
    if "\0" in path:
        raise RequestError("value", f"path {path!r} contains NUL")
    if rel.startswith("/") or not rel:
        raise RequestError("value", f"path {path!r} must be relative to /work (or ../out/...)")
    parts = rel.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise RequestError("value", f"path {path!r} has an empty, '.' or '..' segment")
    return in_out, parts


class ExecSpec:
    """The server's validated copy of the client's ExecSpec."""

    def __init__(self, raw: object, has_stdin: bool) -> None:
        if not isinstance(raw, dict):
            raise RequestError("value", "spec must be an object")
        argv = raw.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and "\0" not in a for a in argv):
            raise RequestError("value", "argv must be a non-empty list of strings without NUL")
        if not argv[0].startswith("/"):
            raise RequestError("value", f"argv[0] must be an absolute path, got {argv[0]!r}")
        env = raw.get("env")
        if not isinstance(env, dict):
            raise RequestError("value", "env must be an object")
        for k, v in env.items():
            if not isinstance(v, str) or not k or "=" in k or "\0" in k or "\0" in v:
                raise RequestError("value", f"invalid environment entry {k!r}")
        timeout = raw.get("timeout")
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
            raise RequestError("value", "timeout must be a positive number of seconds")
        if not math.isfinite(timeout):
            raise RequestError("value", "timeout must be finite")
        memory = raw.get("memory_bytes")
        if memory is not None and (not isinstance(memory, int) or isinstance(memory, bool) or memory < 1 << 20):
            raise RequestError("value", "memory_bytes must be None or at least 1 MiB")
        procs = raw.get("max_processes")
        if not isinstance(procs, int) or isinstance(procs, bool) or procs < 1:
            raise RequestError("value", "max_processes must be a positive integer")
        readonly = self._paths(raw.get("readonly_paths", []), "readonly_paths")
        for path in readonly:
            if path in ("/", "/etc") or any(_within(path, f) for f in FORBIDDEN_READONLY):
                raise RequestError("value", f"readonly path {path} is not allowed")
            if _within(MOUNT_BASE, path) or _within(path, MOUNT_BASE):
                # A recursive bind of an ancestor would carry every box's mount along.
                raise RequestError("value", f"readonly path {path} would expose the launcher's boxes")
        self.argv: list[str] = argv
        self.env: dict[str, str] = env
        self.timeout = float(timeout)
        self.memory_bytes: int | None = memory
        self.max_processes: int = procs
        self.readonly = tuple(sorted(set(readonly)))
        self.hidden = tuple(sorted(set(self._paths(raw.get("hidden_paths", []), "hidden_paths"))))
        self.has_stdin = has_stdin

    @staticmethod
    def _paths(value: object, what: str) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
            raise RequestError("value", f"{what} must be a list of strings")
        for p in value:
            if "\0" in p or not p.startswith("/") or os.path.normpath(p) != p:
                raise RequestError("value", f"{what}: {p!r} must be an absolute, normalized path")
        return list(value)


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
            "stdin": self.stdin is not None,
            "disk_bytes": self.disk_bytes,
            "memory_rlimit": self.memory_rlimit,
            "nproc_rlimit": self.nproc_rlimit,
            "memory_dir": self.memory_dir,
            "memory_version": self.memory_version,
            "pids_dir": self.pids_dir,
            "memory_bytes": self.memory_bytes,
            "max_processes": self.max_processes,
        }

    @classmethod
    def from_job(cls, job: dict[str, Any], fds: list[int], report_fd: int) -> ChildContext:
        ctx = cls()
        for key in ("template", "box_dir", "uid", "gid", "drop_uid", "argv", "env", "disk_bytes", "max_processes"):
            setattr(ctx, key, job[key])
        for key in ("memory_rlimit", "nproc_rlimit", "memory_dir", "memory_version", "pids_dir", "memory_bytes"):
            setattr(ctx, key, job[key])
        ctx.stdout, ctx.stderr = fds[0], fds[1]
        rest = fds[2:]
        if job["stdin"]:
            ctx.stdin, rest = rest[0], rest[1:]
        ctx.cgroup_fds = rest
        ctx.report_fd = report_fd
        return ctx


def _report(fd: int, stage: str, exc: BaseException) -> None:
    """Tell the server where and why setup failed (from B or C, before execve)."""
    err = exc.errno if isinstance(exc, OSError) else None
    message = f"{type(exc).__name__}: {exc}"[:REPORT_LIMIT]
    with contextlib.suppress(OSError):
        os.write(fd, P.encode({"op": "error", "stage": stage, "errno": err, "message": message}))


def _worker_main(
    sock: socket.socket,
    server_pidfd: int,
    cgroup: RunCgroup | None,
    limits: Limits,
    doomed: list[str],
    bound: dict[str, Any] | None,
) -> NoReturn:
    """B: pid 1 of a fresh pid namespace. Prepares, forks C (which takes the job), reaps, reports."""
    gc.disable()  # a collection here could run finalizers of the server's objects
    report_fd = sock.fileno()
    stage = "worker"
    try:
        L.prctl(L.PR_SET_PDEATHSIG, signal.SIGKILL)
        if select.select([server_pidfd], [], [], 0)[0]:
            os._exit(1)  # the server died before PDEATHSIG was armed
        # Other runs' pipes, box channels, the bootstrap socket: none of it is ours.
        _close_all_except({0, 1, 2, report_fd})
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
            L.write_file("/proc/self/oom_score_adj", "-1000")
        if cgroup is not None:
            for path in cgroup.dirs:
                os.mkdir(path, 0o755)
                L.write_file(os.path.join(path, "cgroup.procs"), "0")  # "0": the writer; its children follow
            if limits is not None:  # the last exec's limits: likely this one's too, then C skips this
                _configure_cgroup(cgroup.memory_dir, cgroup.memory_version, cgroup.pids_dir, *limits)
        stage = "namespaces"
        L.unshare(L.CLONE_NEWNET | L.CLONE_NEWIPC | L.CLONE_NEWUTS | L.CLONE_NEWCGROUP)
        socket.sethostname("sandbox")
        L.loopback_up()
        stage = "fork"
        child = os.fork()
        if child == 0:
            _code_main(report_fd, bound)
        stage = "reap"
        status = None
        while status is None:
            pid, st = os.waitpid(-1, 0)
            if pid == child:
                status = st
        # C is gone: end the run now. Kill whatever it left (background jobs, double forks,
        # setsid) and reap until we have no child; a pending SIGKILL makes fork fail, so
        # nothing new can appear. Only then report: the report means "all of it is dead".
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            while True:
                os.waitpid(-1, 0)
        os.write(report_fd, P.encode({"op": "status", "status": status}))
        os._exit(0)
    except BaseException as exc:  # noqa: BLE001 - whatever it is, report it and exit
        _report(report_fd, stage, exc)
        os._exit(126)


def _code_main(report_fd: int, bound: dict[str, Any] | None) -> NoReturn:
    """C in a spare: do what does not depend on the job, wait for the job, then run it.

    A spare bound to a box (``bound``: the box and root of the exec it expects) also
    pivots into that root ahead of time. It stays root until the job comes, so nothing
    runs as the box's user between execs.
    """
    gc.disable()
    stage = ["prepare"]
    try:
        _code_prepare()
        rooted = bound is not None
        if bound is not None:
            _code_enter_root(ChildContext.from_job(bound, [-1, -1], report_fd), stage)
        stage[0] = "job"
        sock = socket.socket(fileno=os.dup(report_fd))
        with contextlib.suppress(OSError):  # tell the server we are ready; only a hint
            sock.send(P.encode({"op": "ready"}))
        decoder = P.Decoder()
        frames: list[P.Frame] = []
        while not frames:
            data, fds = P.receive(sock)
            if not data and not fds:
                os._exit(0)  # the server dropped this spare
            decoder.feed(data, fds)
            frames = decoder.frames()
        ctx = ChildContext.from_job(frames[0].header, frames[0].fds, report_fd)
        if not rooted:
            if not frames[0].header.get("limits_set"):
                stage[0] = "cgroup limits"
                _configure_cgroup(ctx.memory_dir, ctx.memory_version, ctx.pids_dir, ctx.memory_bytes, ctx.max_processes)
            _code_enter_root(ctx, stage)
        _code_enter_user(ctx, stage)
        _code_launch(ctx, stage)
    except BaseException as exc:  # noqa: BLE001 - whatever it is, report it and exit
        _report(report_fd, stage[0], exc)
    os._exit(127)


def _child_c(ctx: ChildContext) -> NoReturn:
    """C forked directly by the server (weak mode): join the cgroups, prepare, run."""
    gc.disable()
    stage = ["cgroup"]
    try:
        for fd in ctx.cgroup_fds:
            os.write(fd, b"0")
        stage[0] = "prepare"
        _code_prepare()
        _code_enter_root(ctx, stage)
        _code_enter_user(ctx, stage)
        _code_launch(ctx, stage)
    except BaseException as exc:  # noqa: BLE001 - whatever it is, report it and exit
        _report(ctx.report_fd, stage[0], exc)
    os._exit(127)


def _code_prepare() -> None:
    """C's setup that does not depend on the job."""
    # Raising is always allowed: in the run's cgroup the code is the OOM victim rather than
    # B, and on the host it goes before the app.
    L.write_file("/proc/self/oom_score_adj", str(CODE_OOM_SCORE_ADJ))
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


def _code_enter_root(ctx: ChildContext, stage: list[str]) -> None:
    """Into the sandbox's root (namespace mode; nothing to do when weak), still as root."""
    if ctx.namespaces:
        stage[0] = "mounts"
        # Now, not when the spare was forked: the copy must hold the current boxes and roots.
        L.unshare(L.CLONE_NEWNS)
        root = ctx.template
        # hidepid=2: processes the code cannot ptrace are invisible. That is B, pid 1, which
        # stays in the server's mount namespace: its mountinfo and cmdline are not the code's business.
        L.mount("proc", root + "/proc", "proc", L.MS_NOSUID | L.MS_NODEV | L.MS_NOEXEC, "hidepid=2")
        for name in ("work", "out"):
            L.mount(os.path.join(ctx.box_dir, name), os.path.join(root, name), None, L.MS_BIND)
        stage[0] = "pivot_root"
        os.chdir(root)
        L.pivot_root(".", ".")  # stacks the old root under the new one; detach it next
        L.umount(".")
        os.chdir("/")


def _code_enter_user(ctx: ChildContext, stage: list[str]) -> None:
    """Become the box's user: credentials, user namespace, keyring, no privileges, /work."""
    if not ctx.namespaces and ctx.drop_uid:
        # Weak mode as root: drop the bounding set while we still may (below we lose CAP_SETPCAP).
        stage[0] = "capabilities"
        L.drop_bounding_set()
    stage[0] = "credentials"
    if ctx.drop_uid:
        os.setgroups([])
        os.setresgid(ctx.gid, ctx.gid, ctx.gid)
        os.setresuid(ctx.uid, ctx.uid, ctx.uid)
    if ctx.namespaces:
        stage[0] = "user namespace"
        # Changing uid made /proc/self root-owned; we must be able to write our own maps.
        L.prctl(L.PR_SET_DUMPABLE, 1)
        L.unshare(L.CLONE_NEWUSER)
        # An unprivileged process may map exactly its own uid and gid (after denying
        # setgroups), so no help from B is needed.
        L.write_file("/proc/self/setgroups", "deny")
        L.write_file("/proc/self/uid_map", f"{INSIDE_ID} {ctx.uid} 1")
        L.write_file("/proc/self/gid_map", f"{INSIDE_ID} {ctx.gid} 1")
        # No nested user namespaces: without one the code can never hold a capability (to
        # mount, to make network namespaces, ...). The limit lives in this user namespace and
        # changing it needs CAP_SYS_RESOURCE here, which execve takes away.
        L.write_file("/proc/sys/user/max_user_namespaces", "0")
    stage[0] = "keyring"
    L.join_new_session_keyring()
    stage[0] = "capabilities"
    if ctx.namespaces:
        # In the new user namespace we hold every capability of that namespace and a full
        # bounding set: empty the bounding set. execve as uid 1000 then clears the rest.
        L.drop_bounding_set()
    L.prctl(L.PR_SET_NO_NEW_PRIVS, 1)
    stage[0] = "chdir"
    os.chdir("/work" if ctx.namespaces else os.path.join(ctx.box_dir, "work"))


def _code_launch(ctx: ChildContext, stage: list[str]) -> NoReturn:
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
    _close_all_except({0, 1, 2, ctx.report_fd})  # the report socket is close-on-exec
    stage[0] = "execve"
    os.execve(ctx.argv[0], ctx.argv, ctx.env)


# ---------------------------------------------------------------------------
# server objects


class Worker:
    """A forked process the server waits on: B in namespace mode, C itself when weak."""

    def __init__(self, pid: int, pidfd: int, sock: socket.socket) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.sock = sock
        self.decoder = P.Decoder()
        self.run: Run | None = None
        self.cgroup: RunCgroup | None = None  # B sits in it; removed once B is reaped
        self.limits: Limits = None  # the limits B wrote ahead (a guess: the last exec's)
        self.ready = False  # C said it waits for its job
        self.discarded = False  # an unused spare we killed on purpose
        self.bound: tuple[Box, TemplateKey] | None = None  # a hot spare's box and root
        self.error: dict[str, Any] | None = None  # what it reported before dying
        self.reaped = False
        self.status: int | None = None  # the worker's own wait status
        self.sock_open = True


class Run:
    """One exec: its worker, stdin pipe, cgroups, deadline and what the worker reported."""

    def __init__(self, rid: int, box: Box, spec: ExecSpec) -> None:
        self.rid = rid
        self.box = box
        self.spec = spec
        self.worker: Worker | None = None
        self.started = 0.0
        self.deadline = 0.0
        self.timed_out = False
        self.killed = False
        self.code_status: int | None = None
        self.error: dict[str, Any] | None = None
        self.stdin_w: int | None = None
        self.stdin_data = memoryview(b"")
        self.cgroup: RunCgroup | None = None
        self.done = False


class Box:
    """One box: its tmpfs (or private directory in weak mode), host uid and channel."""

    def __init__(self, slot: int, uid: int, gid: int, sock: socket.socket) -> None:
        self.slot = slot
        self.uid = uid
        self.gid = gid
        self.sock = sock
        self.decoder = P.Decoder()
        self.outq: collections.deque[memoryview] = collections.deque()
        self.writing = False
        self.path = ""
        self.work_fd = -1
        self.out_fd = -1
        self.disk_bytes = 0
        self.runs: dict[int, Run] = {}
        self.destroyed = False
        self.closing = False
        self.close_id: int | None = None
        self.channel_open = True


class _AsBox:
    """File operations as the box's user: permissions are checked as for the code itself."""

    def __init__(self, active: bool, box: Box) -> None:
        self.active = active
        self.box = box

    def __enter__(self) -> None:
        if self.active:
            L.setfsids(self.box.uid, self.box.gid)

    def __exit__(self, *exc: object) -> None:
        if self.active:
            L.setfsids(0, 0)


class Server:
    """The event loop: bootstrap socket, box channels, workers, stdin pipes, deadlines."""

    def __init__(self, boot: socket.socket, parent: int, force_weak: bool) -> None:
        self.boot = boot
        self.parent = parent
        self.force_weak = force_weak
        self.root = os.geteuid() == 0
        self.isolation = "weak"
        self.sel = selectors.DefaultSelector()
        self.boot_decoder = P.Decoder()
        self.boxes: dict[int, Box] = {}
        self.workers: dict[int, Worker] = {}
        self.spares: collections.deque[Worker] = collections.deque()
        self.hot: Worker | None = None
        self.hot_want: tuple[Box, TemplateKey, Limits, str] | None = None  # box, key, limits, template
        self.spare_not_before = 0.0  # after a spare failed, wait a moment before the next one
        self.last_start = 0.0
        self.last_limits: Limits = None
        self.deadlines: list[tuple[float, int, Run]] = []
        self.base = MOUNT_BASE
        self.mounted_base = False
        self.own_pidns = -1
        self.self_pidfd = -1
        self.parent_pidfd = -1
        self.uid_base = UID_BASE + (os.getpid() % 4_000_000) * SLOTS_PER_SERVER
        self.cgroups = Cgroups("")
        self.templates = Templates(MOUNT_BASE)
        self.stopping = False

    # -- setup ---------------------------------------------------------------

    def setup(self) -> None:
        """Namespaces (or weak mode), cgroups, and the descriptors the loop watches."""
        if os.getppid() != self.parent:
            raise RuntimeError("the app exited before the launcher server started")
        # The app's exit is seen through a pidfd (and bootstrap EOF), not PR_SET_PDEATHSIG:
        # PDEATHSIG fires when the *thread* that started us exits, and apps start us from
        # any thread.
        self.parent_pidfd = os.pidfd_open(self.parent)
        if not self.force_weak:
            try:
                if not self.root:
                    self._enter_own_namespaces()
                self._setup_namespaces()
                self.isolation = "namespace"
            except OSError as exc:
                print(f"mainsdk-local launcher: namespaces unavailable, weak isolation: {exc}", file=sys.stderr)
                self.isolation = "weak"
        self.self_pidfd = os.pidfd_open(os.getpid())
        host_pid = _host_pid()
        self.cgroups.tag = f"{CGROUP_PREFIX}{host_pid}-{_proc_starttime('self') or '0'}"
        if self.isolation == "weak":
            # Orphans of a weak run are re-parented to us so we can reap what we kill.
            L.prctl(L.PR_SET_CHILD_SUBREAPER, 1)
            self.base = self._weak_base()
        if self.root or self.isolation == "namespace":
            self.cgroups.setup()
        if not self.root:
            # One uid for every box: ours (0 in our user namespace when we have one).
            self.uid_base = 0 if self.isolation == "namespace" else os.geteuid()
        self.sel.register(self.boot, selectors.EVENT_READ, self._on_boot)
        self.sel.register(self.parent_pidfd, selectors.EVENT_READ, self._on_parent_exit)

    def _enter_own_namespaces(self) -> None:
        """Not root: become root of our own user namespace, and pid 1 of a pid namespace it owns.

        A run's pid namespace is made by unsharing one for our next child and going back
        with setns(2) afterwards, which needs CAP_SYS_ADMIN over the user namespace owning
        our own pid namespace: so that must be ours. The process the app started stays
        outside as a shim that only mirrors our exit, so the app's Popen sees us.
        """
        uid, gid = os.geteuid(), os.getegid()
        L.unshare(L.CLONE_NEWUSER | L.CLONE_NEWNS | L.CLONE_NEWPID)
        L.write_file("/proc/self/setgroups", "deny")
        L.write_file("/proc/self/uid_map", f"0 {uid} 1")
        L.write_file("/proc/self/gid_map", f"0 {gid} 1")
        pid = os.fork()
        if pid != 0:
            gc.disable()
            _close_all_except({2})
            with contextlib.suppress(BaseException):
                while True:
                    _, status = os.waitpid(pid, 0)
                    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
            os._exit(1)
        # We are pid 1 of the new pid namespace. If the shim is killed (the app's Launcher
        # gives up waiting), we go too, and our workers with us.
        L.prctl(L.PR_SET_PDEATHSIG, signal.SIGKILL)

    def _setup_namespaces(self) -> None:
        if self.root:
            L.unshare(L.CLONE_NEWNS)
        # Private: box and root mounts stay in our namespace, host mounts do not leak in.
        L.mount(None, "/", None, L.MS_REC | L.MS_PRIVATE)
        with contextlib.suppress(FileExistsError):
            os.mkdir(MOUNT_BASE, 0o700)
        if not stat.S_ISDIR(os.lstat(MOUNT_BASE).st_mode):
            raise OSError(errno.ENOTDIR, f"{MOUNT_BASE} is not a directory")
        # Every server mounts its own tmpfs here in its own namespace; the host sees an
        # empty directory and there is nothing to clean after a crash.
        L.mount("tmpfs", MOUNT_BASE, "tmpfs", L.MS_NOSUID | L.MS_NODEV, "size=1m,mode=0711")
        self.mounted_base = True
        self.templates.setup()
        self.own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self._probe()

    def _probe(self) -> None:
        """Fork a throwaway child through the namespace steps a run takes."""
        r, w = os.pipe2(os.O_CLOEXEC)
        pid = self._fork_in_new_pidns()
        if pid == 0:
            gc.disable()
            try:
                L.unshare(L.CLONE_NEWNS | L.CLONE_NEWNET | L.CLONE_NEWIPC | L.CLONE_NEWUTS | L.CLONE_NEWCGROUP)
                L.mount("proc", self.templates.empty_dir, "proc", L.MS_NOSUID | L.MS_NODEV | L.MS_NOEXEC)
                L.loopback_up()
                uid = self.uid_base if self.root else os.geteuid()
                if self.root:
                    os.setresgid(uid, uid, uid)
                    os.setresuid(uid, uid, uid)
                    L.prctl(L.PR_SET_DUMPABLE, 1)
                L.unshare(L.CLONE_NEWUSER)
                L.write_file("/proc/self/setgroups", "deny")
                L.write_file("/proc/self/uid_map", f"{INSIDE_ID} {uid} 1")
                os._exit(0)
            except BaseException as exc:  # noqa: BLE001 - report anything, never return into the server
                _report(w, "probe", exc)
                os._exit(1)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        msg = os.read(r, REPORT_LIMIT * 2)
        os.close(r)
        if status != 0:
            raise OSError(errno.EPERM, f"namespace probe failed: {msg[4:].decode(errors='replace')}")

    def _weak_base(self) -> str:
        """A private directory for weak boxes; removes those of servers that died."""
        import shutil
        import tempfile

        tmp = tempfile.gettempdir()
        prefix = "mainsdk-local-weak-"
        for name in os.listdir(tmp):
            if not name.startswith(prefix):
                continue
            with contextlib.suppress(ValueError):
                pid_text, start = name[len(prefix) :].split("-", 1)
                if _proc_starttime(int(pid_text)) != start and os.stat(os.path.join(tmp, name)).st_uid == os.geteuid():
                    shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
        base = os.path.join(tmp, f"{prefix}{_host_pid()}-{_proc_starttime('self')}")
        os.mkdir(base, 0o711)  # box users must traverse it, not list it
        return base

    def _fork_in_new_pidns(self) -> int:
        L.unshare(L.CLONE_NEWPID)
        try:
            pid = os.fork()
        except BaseException:
            L.setns(self.own_pidns, L.CLONE_NEWPID)
            raise
        if pid != 0:
            # Back to our own pid namespace for children, so the next fork can unshare again.
            L.setns(self.own_pidns, L.CLONE_NEWPID)
        return pid

    # -- loop ----------------------------------------------------------------

    def hello(self) -> None:
        """Tell the client what isolation it gets."""
        self.boot.sendall(
            P.encode(
                {
                    "op": "hello",
                    "isolation": self.isolation,
                    "memory": self.cgroups.memory_mode,
                    "pids": "cgroup" if self.cgroups.pids else "rlimit",
                    "pid": _host_pid(),
                }
            )
        )

    def _spare_wanted(self) -> tuple[float, str] | None:
        """(seconds until, "hot" or "generic") for the next spare to prepare; None when none.

        A spare that an exec took is replaced at once: that exec is already on its way, so
        forking now delays nobody, and a caller running execs back to back finds the next
        one ready. Replacing a hot spare for a different box waits until the latest exec is
        SPARE_DELAY old, so boxes used in turn do not churn spares.
        """
        if self.stopping or not self.boxes or self.isolation != "namespace":
            return None
        now = time.monotonic()
        wait = max(0.0, self.spare_not_before - now)
        want = self.hot_want
        if want is not None and not want[0].closing:
            hot = self.hot
            if hot is None:
                return (wait, "hot")
            if hot.bound != want[:2] or hot.limits != want[2]:
                return (max(wait, self.last_start + SPARE_DELAY - now), "hot")
        if len(self.spares) < SPARES:
            return (wait, "generic")
        return None

    def _idle_work_pending(self) -> bool:
        wanted = self._spare_wanted()
        return wanted is not None and wanted[0] == 0.0

    def _idle_work(self) -> None:
        """Prepare the next exec's worker (namespaces, cgroups; for a hot spare, its box)."""
        wanted = self._spare_wanted()
        if wanted is None:
            return
        try:
            if wanted[1] == "generic":
                self.spares.append(self._spawn_worker(self.last_limits))
                return
            assert self.hot_want is not None
            box, key, limits, template = self.hot_want
            if self.hot is not None:
                self._discard(self.hot)
            bound = ChildContext()
            bound.template, bound.box_dir, bound.uid, bound.gid = template, box.path, box.uid, box.gid
            bound.drop_uid, bound.disk_bytes = self.root, box.disk_bytes
            self.hot = self._spawn_worker(limits, bound)
            self.hot.bound = (box, key)
        except (OSError, RequestError) as exc:
            print(f"mainsdk-local launcher: spare worker: {exc}", file=sys.stderr)
            self.spare_not_before = time.monotonic() + 1.0

    def _discard(self, worker: Worker) -> None:
        """Drop an unused spare: it exits when its socket closes, or is killed."""
        if worker is self.hot:
            self.hot = None
        if worker in self.spares:
            self.spares.remove(worker)
        worker.discarded = True
        self._kill_worker(worker)

    def _take_worker(self, box: Box, key: TemplateKey, limits: Limits) -> Worker:
        """The worker for an exec: the hot spare if it was made for exactly this, else a generic one.

        Ready spares first: one still preparing may be waiting out a cgroup join (an RCU
        grace period) that a ready one is past.
        """
        hot = self.hot
        fits = hot is not None and hot.bound == (box, key) and hot.limits == limits and not hot.reaped
        generic = next((w for w in self.spares if w.ready), None) or (self.spares[0] if self.spares else None)
        choice: Worker | None
        if fits and hot is not None and (hot.ready or generic is None or not generic.ready):
            choice, self.hot = hot, None
        elif generic is not None:
            choice = generic
            self.spares.remove(generic)
        else:
            choice = self._spawn_worker(limits)  # with this exec's limits: C need not write them
        return choice

    def loop(self) -> None:
        """Serve until the app closes the bootstrap socket or exits."""
        while not self.stopping:
            timeout: float | None = None
            while self.deadlines and self.deadlines[0][2].done:
                heapq.heappop(self.deadlines)
            if self.deadlines:
                timeout = max(0.0, self.deadlines[0][0] - time.monotonic())
            if self.cgroups.retry():
                timeout = 0.05 if timeout is None else min(timeout, 0.05)
            if self.isolation == "weak" and self.workers:
                timeout = 0.2 if timeout is None else min(timeout, 0.2)
            wanted = self._spare_wanted()
            if wanted is not None and wanted[0] > 0:
                timeout = wanted[0] if timeout is None else min(timeout, wanted[0])
            idle = self._idle_work_pending()
            events = self.sel.select(0 if idle else timeout)
            for key, mask in events:
                callback: Callable[[int], None] = key.data
                callback(mask)
            if self._idle_work_pending():  # after the events: requests first, one spare per turn
                self._idle_work()
            now = time.monotonic()
            while self.deadlines and (self.deadlines[0][2].done or self.deadlines[0][0] <= now):
                _, _, run = heapq.heappop(self.deadlines)
                if not run.done:
                    run.timed_out = True
                    self._kill(run)
            if self.isolation == "weak":
                self._reap_orphans()

    def _on_parent_exit(self, mask: int) -> None:
        self.stopping = True

    def _on_boot(self, mask: int) -> None:
        try:
            data, fds = P.receive(self.boot)
        except BlockingIOError:
            return
        except (OSError, P.ProtocolError):
            self.stopping = True
            return
        if not data and not fds:
            self.stopping = True  # the app closed the Launcher or died
            return
        self.boot_decoder.feed(data, fds)
        try:
            frames = self.boot_decoder.frames()
        except P.ProtocolError:
            self.stopping = True
            return
        for frame in frames:
            if frame.header.get("op") == "box" and len(frame.fds) == 1:
                sock = socket.socket(fileno=frame.fds.pop())
                self._open_box(sock, frame.header.get("disk_bytes"))
            frame.close_fds()

    def shutdown(self) -> None:
        """Kill every run and worker, wait for them, remove boxes, roots and cgroups."""
        for worker in self.workers.values():
            if not worker.reaped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, signal.SIGKILL)
        for worker in list(self.workers.values()):
            if not worker.reaped:
                with contextlib.suppress(ChildProcessError):
                    _, worker.status = os.waitpid(worker.pid, 0)
                worker.reaped = True
            self._worker_gone(worker, reply=False)
        for box in list(self.boxes.values()):
            self._close_channel(box)
            self._destroy_box(box)
        self.templates.shutdown()
        self.cgroups.shutdown()
        if self.mounted_base:
            with contextlib.suppress(OSError):
                L.umount(MOUNT_BASE)
        if self.isolation == "weak" and self.base != MOUNT_BASE:
            with contextlib.suppress(OSError):
                os.rmdir(self.base)

    # -- boxes ---------------------------------------------------------------

    def _open_box(self, sock: socket.socket, disk_bytes: object) -> None:
        sock.setblocking(False)
        slot = next((s for s in range(SLOTS_PER_SERVER) if s not in self.boxes), None)
        if slot is None:
            with contextlib.suppress(OSError):
                sock.send(P.encode({"id": 0, "ok": False, "kind": "launcher", "error": "too many open boxes"}))
            sock.close()
            return
        uid = self.uid_base + slot if self.root else self.uid_base
        gid = uid if self.root else (0 if self.isolation == "namespace" else os.getegid())
        box = Box(slot, uid, gid, sock)
        self.boxes[slot] = box
        self.sel.register(sock, selectors.EVENT_READ, lambda mask, b=box: self._on_channel(b, mask))
        try:
            if not isinstance(disk_bytes, int) or isinstance(disk_bytes, bool) or disk_bytes < 4096:
                raise RequestError("value", "disk_bytes must be an integer of at least 4096")
            box.disk_bytes = disk_bytes
            self._make_box_fs(box)
        except RequestError as exc:
            self._reply_error(box, 0, exc)
            box.closing = True
            self._destroy_box(box)
            return
        self._send(box, {"id": 0, "ok": True, "uid": box.uid, "isolation": self.isolation})

    def _make_box_fs(self, box: Box) -> None:
        path = os.path.join(self.base, f"box-{box.slot}")
        try:
            os.mkdir(path, 0o711)
            box.path = path
            if self.isolation == "namespace":
                L.mount("tmpfs", path, "tmpfs", L.MS_NOSUID | L.MS_NODEV, f"size={box.disk_bytes},mode=0755")
            for name in ("work", "out"):
                sub = os.path.join(path, name)
                os.mkdir(sub, 0o755)
                os.chown(sub, box.uid, box.gid)
            box.work_fd = os.open(os.path.join(path, "work"), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            box.out_fd = os.open(os.path.join(path, "out"), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise _launch_error("box", exc) from None

    def _destroy_box(self, box: Box) -> None:
        """Last step of a box: every run is dead; unmount and free the slot."""
        _close(box.work_fd)
        _close(box.out_fd)
        box.work_fd = box.out_fd = -1
        if box.path:
            if self.isolation == "namespace":
                with contextlib.suppress(OSError):
                    L.umount(box.path)
                with contextlib.suppress(OSError):
                    os.rmdir(box.path)
            else:
                self._remove_weak_dir(box)
            box.path = ""
        box.decoder.close()
        box.destroyed = True
        if self.boxes.get(box.slot) is box:
            del self.boxes[box.slot]
        if not box.outq:
            self._close_channel(box)

    def _remove_weak_dir(self, box: Box) -> None:
        import shutil

        # The code owns what is inside work/ and out/: delete that as the box's user, so
        # nothing it planted can make us delete elsewhere (rmtree does not follow symlinks
        # either). work/, out/ and the box directory are ours: root removes them.
        for name in ("work", "out"):
            path = os.path.join(box.path, name)
            with self._as_box(box):
                shutil.rmtree(path, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.rmdir(path)
        with contextlib.suppress(OSError):
            os.rmdir(box.path)

    def _on_channel(self, box: Box, mask: int) -> None:
        if mask & selectors.EVENT_WRITE:
            self._flush(box)
        if not (mask & selectors.EVENT_READ) or not box.channel_open:
            return
        try:
            data, fds = P.receive(box.sock)
        except BlockingIOError:
            return
        except (OSError, P.ProtocolError):
            data, fds = b"", []
        if not data and not fds:
            self._close_channel(box)
            self._begin_close(box)
            return
        box.decoder.feed(data, fds)
        try:
            frames = box.decoder.frames()
        except P.ProtocolError as exc:
            print(f"mainsdk-local launcher: protocol error on box {box.slot}: {exc}", file=sys.stderr)
            self._close_channel(box)
            self._begin_close(box)
            return
        for frame in frames:
            try:
                self._handle(box, frame)
            except RequestError as exc:
                self._reply_error(box, frame.header.get("id"), exc)
            except Exception as exc:  # noqa: BLE001 - a bug in one request must not take the server down
                traceback.print_exc()
                self._reply_error(box, frame.header.get("id"), RequestError("launcher", f"internal error: {exc!r}"))
            finally:
                frame.close_fds()

    def _handle(self, box: Box, frame: P.Frame) -> None:
        h = frame.header
        op = h.get("op")
        rid = h.get("id")
        if not isinstance(rid, int):
            raise RequestError("launcher", "request without an id")
        if box.closing and op != "close":
            raise RequestError("launcher", "box is closing")
        if op == "write":
            self._write_file(box, h.get("path"), frame.payload)
            self._send(box, {"id": rid, "ok": True})
        elif op == "read":
            data = self._read_file(box, h.get("path"))
            self._send(box, {"id": rid, "ok": True}, data)
        elif op == "collect":
            header, payload = self._collect(box, h.get("max_bytes"))
            self._send(box, dict(header, id=rid, ok=True), payload)
        elif op == "exec":
            if rid in box.runs:
                raise RequestError("launcher", f"exec id {rid} already running")
            if len(frame.fds) != 2:
                raise RequestError("launcher", "exec needs stdout and stderr descriptors")
            spec = ExecSpec(h.get("spec"), bool(h.get("stdin")))
            fds, frame.fds = frame.fds, []
            self._start_run(box, rid, spec, fds, frame.payload)  # owns (and closes) fds
        elif op == "kill":
            run = box.runs.get(rid)
            if run is not None and not run.done:
                run.killed = True
                self._kill(run)
        elif op == "close":
            box.close_id = rid
            self._begin_close(box)
        else:
            raise RequestError("launcher", f"unknown op {op!r}")

    def _begin_close(self, box: Box) -> None:
        box.closing = True
        if self.hot is not None and self.hot.bound is not None and self.hot.bound[0] is box:
            self._discard(self.hot)  # it holds this box's files in its mount namespace
        if self.hot_want is not None and self.hot_want[0] is box:
            self.hot_want = None
        for run in list(box.runs.values()):
            run.killed = True
            self._kill(run)
        self._maybe_finish_close(box)

    def _maybe_finish_close(self, box: Box) -> None:
        if not box.closing or box.runs or box.destroyed:
            return
        if box.close_id is not None and box.channel_open:
            # The client closes its end on this reply; we close ours once it is sent.
            self._send(box, {"id": box.close_id, "ok": True})
        self._destroy_box(box)

    # -- channel output ------------------------------------------------------

    def _send(self, box: Box, header: dict[str, Any], payload: bytes = b"") -> None:
        if not box.channel_open:
            return
        box.outq.append(memoryview(P.encode(header, payload)))
        self._flush(box)

    def _reply_error(self, box: Box, rid: object, exc: RequestError) -> None:
        self._send(box, {"id": rid, "ok": False, "kind": exc.kind, "error": str(exc), "errno": exc.errno})

    def _flush(self, box: Box) -> None:
        while box.outq and box.channel_open:
            chunk = box.outq[0]
            try:
                n = box.sock.send(chunk)
            except BlockingIOError:
                break
            except OSError:
                self._close_channel(box)
                self._begin_close(box)
                return
            if n == len(chunk):
                box.outq.popleft()
            else:
                box.outq[0] = chunk[n:]
        if not box.channel_open:
            return
        if not box.outq and box.destroyed:
            self._close_channel(box)
            return
        if bool(box.outq) != box.writing:
            box.writing = bool(box.outq)
            want = selectors.EVENT_READ | (selectors.EVENT_WRITE if box.outq else 0)
            self.sel.modify(box.sock, want, lambda mask, b=box: self._on_channel(b, mask))

    def _close_channel(self, box: Box) -> None:
        if not box.channel_open:
            return
        box.channel_open = False
        box.outq.clear()
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(box.sock)
        box.sock.close()

    # -- files ---------------------------------------------------------------

    def _as_box(self, box: Box) -> _AsBox:
        return _AsBox(self.root and box.uid != 0, box)

    def _open_parent(self, box: Box, path: object, create: bool) -> tuple[int, str]:
        in_out, parts = _validate_relpath(path)
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=box.out_fd if in_out else box.work_fd)
        try:
            for part in parts[:-1]:
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                # O_NOFOLLOW: a symlink planted by the code must never lead us out of the box.
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        return fd, parts[-1]

    def _write_file(self, box: Box, path: object, data: bytes) -> None:
        try:
            with self._as_box(box):
                dfd, name = self._open_parent(box, path, create=True)
                try:
                    # Replace: unlink first, then O_EXCL, so we never write through an entry
                    # (a symlink, a FIFO, a hard link) the code may have put there.
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=dfd)
                    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                    fd = os.open(name, flags, 0o644, dir_fd=dfd)
                    try:
                        view = memoryview(data)
                        while view:
                            view = view[os.write(fd, view) :]
                    finally:
                        os.close(fd)
                finally:
                    os.close(dfd)
        except OSError as exc:
            raise RequestError("os", f"write {path}: {exc.strerror or exc}", exc.errno) from None

    def _read_file(self, box: Box, path: object) -> bytes:
        try:
            with self._as_box(box):
                dfd, name = self._open_parent(box, path, create=False)
                try:
                    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
                finally:
                    os.close(dfd)
                try:
                    if not stat.S_ISREG(os.fstat(fd).st_mode):
                        raise RequestError("os", f"read {path}: not a regular file", errno.EINVAL)
                    return _read_all(fd, box.disk_bytes + 1)
                finally:
                    os.close(fd)
        except OSError as exc:
            raise RequestError("os", f"read {path}: {exc.strerror or exc}", exc.errno) from None

    def _collect(self, box: Box, max_bytes: object) -> tuple[dict[str, Any], bytes]:
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0:
            raise RequestError("value", "max_bytes must be a non-negative integer")
        files: list[list[Any]] = []
        skipped: list[list[str]] = []
        chunks: list[bytes] = []
        total = 0
        truncated = False
        pending = [""]
        with self._as_box(box):
            while pending and not truncated:
                prefix = pending.pop()
                try:
                    dfd = self._open_dir(box.out_fd, prefix)
                except OSError as exc:
                    skipped.append([prefix.rstrip("/"), f"unreadable directory: {exc.strerror}"])
                    continue
                subdirs: list[str] = []
                try:
                    for name in sorted(os.listdir(dfd)):
                        rel = prefix + name
                        try:
                            rel.encode()
                        except UnicodeEncodeError:
                            skipped.append([rel.encode(errors="replace").decode(), "name is not UTF-8"])
                            continue
                        try:
                            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                        except OSError as exc:
                            skipped.append([rel, f"unreadable: {exc.strerror}"])
                            continue
                        kind = _kind(st.st_mode)
                        if kind == "dir":
                            subdirs.append(rel + "/")
                            continue
                        if kind != "file":
                            skipped.append([rel, kind])
                            continue
                        data = self._read_out_file(dfd, name, rel, max_bytes - total, skipped)
                        if data is None:
                            continue
                        if total + len(data) > max_bytes:
                            truncated = True
                            break
                        total += len(data)
                        files.append([rel, len(data)])
                        chunks.append(data)
                finally:
                    os.close(dfd)
                pending.extend(reversed(subdirs))
        return {"files": files, "truncated": truncated, "skipped": skipped}, b"".join(chunks)

    @staticmethod
    def _read_out_file(dfd: int, name: str, rel: str, budget: int, skipped: list[list[str]]) -> bytes | None:
        """Read one regular file, or None (and a reason in ``skipped``); over budget gives budget+1 bytes."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as exc:
            skipped.append([rel, "symlink" if exc.errno == errno.ELOOP else f"unreadable: {exc.strerror}"])
            return None
        try:
            fst = os.fstat(fd)
            if not stat.S_ISREG(fst.st_mode):  # swapped after our lstat
                skipped.append([rel, _kind(fst.st_mode)])
                return None
            if fst.st_size > budget:
                return b"\0" * (budget + 1) if budget < 1 << 16 else _read_all(fd, budget + 1)
            return _read_all(fd, budget + 1)
        finally:
            os.close(fd)

    @staticmethod
    def _open_dir(base_fd: int, prefix: str) -> int:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=base_fd)
        for part in [p for p in prefix.split("/") if p]:
            try:
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            finally:
                os.close(fd)
            fd = nfd
        return fd

    # -- workers and runs ----------------------------------------------------

    def _spawn_worker(self, limits: Limits, bound: ChildContext | None = None) -> Worker:
        """Fork B into a new pid namespace and fresh cgroups; it prepares itself and waits for a job.

        B writes ``limits`` ahead; a ``bound`` C also enters that box's sandbox ahead.
        """
        cgroup = self.cgroups.plan()
        doomed = self.cgroups.take_doomed()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = self._fork_in_new_pidns()
            if pid == 0:
                ours.close()
                _worker_main(theirs, self.self_pidfd, cgroup, limits, doomed, bound.job() if bound else None)
        except BaseException:
            ours.close()
            self.cgroups.give_back(doomed)
            raise
        finally:
            theirs.close()
        worker = self._adopt(pid, ours)
        worker.cgroup = cgroup
        worker.limits = limits
        return worker

    def _adopt(self, pid: int, sock: socket.socket) -> Worker:
        worker = Worker(pid, os.pidfd_open(pid), sock)
        sock.setblocking(False)
        self.workers[pid] = worker
        self.sel.register(worker.pidfd, selectors.EVENT_READ, lambda mask: self._on_worker_exit(worker))
        self.sel.register(sock, selectors.EVENT_READ, lambda mask: self._on_worker_sock(worker))
        return worker

    def _start_run(self, box: Box, rid: int, spec: ExecSpec, fds: list[int], stdin: bytes) -> None:
        ctx = ChildContext()
        ctx.namespaces = self.isolation == "namespace"
        ctx.box_dir = box.path
        ctx.uid, ctx.gid = box.uid, box.gid
        ctx.drop_uid = self.root
        ctx.argv, ctx.env = spec.argv, spec.env
        ctx.stdout, ctx.stderr = fds
        ctx.disk_bytes = box.disk_bytes
        run = Run(rid, box, spec)
        stdin_r: int | None = None
        weak_cgroup: RunCgroup | None = None
        key = (spec.readonly, spec.hidden)
        # In namespace mode B, the namespace's init, is in the pids cgroup too.
        has_cgroups = self.cgroups.memory is not None or self.cgroups.pids is not None
        limits: Limits = (spec.memory_bytes, spec.max_processes + 1) if has_cgroups else None
        try:
            if spec.has_stdin:
                stdin_r, run.stdin_w = os.pipe2(os.O_CLOEXEC)
                ctx.stdin = stdin_r
                os.set_blocking(run.stdin_w, False)
                run.stdin_data = memoryview(stdin)
            if ctx.namespaces:
                ctx.template = self.templates.get(spec.readonly, spec.hidden)
                self.hot_want = (box, key, limits, ctx.template)
                self.last_limits = limits
                for attempt in range(2):
                    # A spare may have died since it was made: then once more with a new worker.
                    worker = self._take_worker(box, key, limits) if attempt == 0 else self._spawn_worker(limits)
                    self._set_limits(ctx, run, worker.cgroup, spec)
                    run.started = time.monotonic()
                    try:
                        self._send_job(worker, ctx)
                    except OSError:
                        if attempt == 1:
                            raise RequestError("launcher", self._worker_failure(worker)) from None
                        self._discard(worker)
                        continue
                    run.worker, worker.run = worker, run
                    break
            else:
                weak_cgroup = self.cgroups.make()
                ctx.cgroup_fds = weak_cgroup.procs_fds if weak_cgroup is not None else []
                self._set_limits(ctx, run, weak_cgroup, spec)
                if weak_cgroup is not None:
                    try:
                        _configure_cgroup(
                            weak_cgroup.memory_dir,
                            weak_cgroup.memory_version,
                            weak_cgroup.pids_dir,
                            spec.memory_bytes,
                            spec.max_processes,
                        )
                    except OSError as exc:
                        raise _launch_error("cgroup limits", exc) from None
                run.started = time.monotonic()
                run.worker = worker = self._fork_weak(ctx)
                worker.run, worker.cgroup = run, weak_cgroup
                weak_cgroup = None  # the worker's now: removed when it is reaped
            self.last_start = run.started
        except BaseException as exc:
            if weak_cgroup is not None:
                self.cgroups.remove(weak_cgroup)
            self._close_stdin(run)
            if isinstance(exc, OSError):
                raise _launch_error("start", exc) from None
            raise
        finally:
            # Our copies of the child's ends must go, or the code's EOFs never come.
            for fd in [*fds, stdin_r]:
                _close(fd)
            if run.cgroup is not None:
                run.cgroup.close_fds()
        run.deadline = run.started + spec.timeout
        box.runs[rid] = run
        heapq.heappush(self.deadlines, (run.deadline, id(run), run))
        if run.stdin_w is not None:
            self._feed_stdin(run)

    @staticmethod
    def _set_limits(ctx: ChildContext, run: Run, cgroup: RunCgroup | None, spec: ExecSpec) -> None:
        """Where the exec's limits go: its cgroups, or rlimits for what has no cgroup."""
        run.cgroup = cgroup
        ctx.memory_dir = cgroup.memory_dir if cgroup else None
        ctx.memory_version = cgroup.memory_version if cgroup else 0
        ctx.pids_dir = cgroup.pids_dir if cgroup else None
        ctx.memory_bytes = spec.memory_bytes
        ctx.max_processes = spec.max_processes + (1 if ctx.namespaces else 0)
        ctx.memory_rlimit = spec.memory_bytes if ctx.memory_dir is None else None
        ctx.nproc_rlimit = spec.max_processes if ctx.pids_dir is None else None

    def _worker_failure(self, worker: Worker) -> str:
        """Why a worker stopped taking jobs: wait for it and read its report."""
        self._kill_worker(worker)
        if not worker.reaped:
            with contextlib.suppress(ChildProcessError):
                _, worker.status = os.waitpid(worker.pid, 0)
            worker.reaped = True
        self._read_worker(worker)
        if worker.error is not None:
            return f"exec setup failed at {_describe(worker.error)}"
        return f"the worker exited before taking the job (status {worker.status})"

    @staticmethod
    def _send_job(worker: Worker, ctx: ChildContext) -> None:
        fds = [ctx.stdout, ctx.stderr, *([ctx.stdin] if ctx.stdin is not None else [])]
        limits_set = worker.limits == (ctx.memory_bytes, ctx.max_processes)
        frame = P.encode(dict(ctx.job(), fds=len(fds), limits_set=limits_set))
        worker.sock.setblocking(True)  # the worker reads at once; a large argv may need a moment
        try:
            sent = socket.send_fds(worker.sock, [frame], fds)
            if sent < len(frame):
                worker.sock.sendall(frame[sent:])
        finally:
            worker.sock.setblocking(False)

    def _fork_weak(self, ctx: ChildContext) -> Worker:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            ctx.report_fd = theirs.fileno()
            pid = os.fork()
            if pid == 0:
                _child_c(ctx)
        finally:
            theirs.close()
        return self._adopt(pid, ours)

    def _feed_stdin(self, run: Run) -> None:
        fd = run.stdin_w
        if fd is None:
            return
        try:
            while run.stdin_data:
                run.stdin_data = run.stdin_data[os.write(fd, run.stdin_data[: 1 << 16]) :]
        except BlockingIOError:
            try:
                self.sel.get_key(fd)
            except KeyError:
                self.sel.register(fd, selectors.EVENT_WRITE, lambda mask: self._feed_stdin(run))
            return
        except OSError:
            pass  # the code closed its stdin: fine
        self._close_stdin(run)

    def _close_stdin(self, run: Run) -> None:
        if run.stdin_w is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(run.stdin_w)
        _close(run.stdin_w)
        run.stdin_w = None
        run.stdin_data = memoryview(b"")

    def _kill(self, run: Run) -> None:
        if run.done or run.worker is None:
            return
        self._kill_worker(run.worker)
        if self.isolation == "weak":
            self._sweep_weak(run, wait=False)

    @staticmethod
    def _kill_worker(worker: Worker) -> None:
        if not worker.reaped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGKILL)  # B: pid 1 of the run; its death takes the tree

    def _on_worker_sock(self, worker: Worker) -> None:
        self._read_worker(worker)
        run = worker.run
        if run is not None and not run.done and run.code_status is not None and self.isolation == "namespace":
            self._finish_run(run)  # B reported after killing and reaping the whole tree

    def _read_worker(self, worker: Worker) -> None:
        """Read what B or C reported: setup errors, and C's wait status."""
        while worker.sock_open:
            try:
                data, fds = P.receive(worker.sock)
            except BlockingIOError:
                return
            except (OSError, P.ProtocolError):
                data, fds = b"", []
            if not data and not fds:
                worker.sock_open = False
                with contextlib.suppress(KeyError, ValueError):
                    self.sel.unregister(worker.sock)
                worker.sock.close()
                worker.decoder.close()
                return
            for fd in fds:
                _close(fd)
            worker.decoder.feed(data, [])
            try:
                frames = worker.decoder.frames()
            except P.ProtocolError:
                frames = []
            run = worker.run
            for frame in frames:
                if frame.header.get("op") == "ready":
                    worker.ready = True
                if frame.header.get("op") == "error" and worker.error is None:
                    worker.error = frame.header
                if run is None:
                    continue
                if frame.header.get("op") == "error" and run.error is None:
                    run.error = frame.header
                elif frame.header.get("op") == "status" and isinstance(frame.header.get("status"), int):
                    run.code_status = frame.header["status"]

    def _on_worker_exit(self, worker: Worker) -> None:
        """The worker's pidfd is readable: it has exited (after its pid namespace, if B)."""
        if not worker.reaped:
            try:
                pid, status = os.waitpid(worker.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = worker.pid, -1
            if pid == 0:
                return
            worker.reaped = True
            worker.status = status if status >= 0 else None
        self._worker_gone(worker, reply=True)

    def _worker_gone(self, worker: Worker, *, reply: bool) -> None:
        if worker.sock_open:
            self._read_worker(worker)
        if worker.sock_open:
            worker.sock_open = False
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(worker.sock)
            worker.sock.close()
            worker.decoder.close()
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(worker.pidfd)
        _close(worker.pidfd)
        self.workers.pop(worker.pid, None)
        if worker is self.hot:
            self.hot = None
        if worker in self.spares:
            self.spares.remove(worker)
        if worker.run is None and not worker.discarded and not self.stopping:
            self.spare_not_before = time.monotonic() + 1.0  # a spare died unused: do not spin
            if worker.error is not None:
                print(f"mainsdk-local launcher: spare worker failed: {_describe(worker.error)}", file=sys.stderr)
        run = worker.run
        if run is not None and not run.done:
            if self.isolation == "weak":
                run.code_status = worker.status
            self._finish_run(run, reply=reply)
        if worker.cgroup is not None:
            # Empty now: the worker and all it forked are reaped. In namespace mode the next
            # worker removes it (see Cgroups.take_doomed).
            self.cgroups.remove(worker.cgroup, defer=self.isolation == "namespace" and not self.stopping)
            worker.cgroup = None

    def _reap_orphans(self) -> None:
        """Weak mode: we are the subreaper of what runs leave behind; keep our workers' statuses."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            worker = self.workers.get(pid)
            if worker is not None and not worker.reaped:
                worker.reaped = True
                worker.status = status  # its pidfd callback finishes the run

    def _sweep_weak(self, run: Run, *, wait: bool) -> None:
        """Weak mode: kill what the code left behind (same cgroup, else same uid or session)."""
        end = time.monotonic() + (WEAK_SWEEP_SECONDS if wait else 0)
        session = run.worker.pid if run.worker is not None else 0
        while True:
            if run.cgroup is not None and run.cgroup.pids_dir is not None:
                pids = Cgroups.members(run.cgroup.pids_dir)
            elif self.root:
                pids = _pids_of_uid(run.box.uid)
            else:
                pids = _pids_of_session(session)
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            self._reap_orphans()
            if not pids or time.monotonic() > end:
                return
            time.sleep(0.002)

    def _finish_run(self, run: Run, *, reply: bool = True) -> None:
        if run.done:
            return
        run.done = True
        ended = time.monotonic()
        if self.isolation == "weak":
            self._sweep_weak(run, wait=True)
        run.box.runs.pop(run.rid, None)
        self._close_stdin(run)
        oom = run.cgroup is not None and Cgroups.oom_killed(run.cgroup)
        if reply and not (run.killed and run.box.closing):
            error = run.error
            if error is not None and not (run.killed or run.timed_out):
                msg = f"exec setup failed at {_describe(error)}"
                self._send(run.box, {"id": run.rid, "ok": False, "kind": "launcher", "error": msg})
            else:
                self._send(run.box, self._result(run, oom, ended))
        self._maybe_finish_close(run.box)

    def _result(self, run: Run, oom: bool, ended: float) -> dict[str, Any]:
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
        elif (
            run.spec.memory_bytes is not None
            and self.cgroups.memory is None
            and not run.killed
            and sig in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS)
        ):
            stop = "memory"  # best effort under RLIMIT_AS: no kernel record of why it died
        return {
            "id": run.rid,
            "ok": True,
            "exit_code": exit_code,
            "signal": sig,
            "stop": stop,
            "duration": ended - run.started,
            "killed": run.killed,
        }


def _describe(error: dict[str, Any]) -> str:
    return f"{error.get('stage')}: {error.get('message')}"


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "other"


def _read_all(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while total < limit:
        chunk = os.read(fd, min(1 << 20, limit - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _pids_of_uid(uid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{name}").st_uid == uid:
                    out.append(int(name))
    return out


def _pids_of_session(sid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if os.getsid(int(name)) == sid:
                    out.append(int(name))
    return out


def main(argv: list[str]) -> int:
    """Entry point: ``_server.py --fd N --parent PID [--weak]``."""
    fd = parent = -1
    weak = False
    args = iter(argv)
    for arg in args:
        if arg == "--fd":
            fd = int(next(args))
        elif arg == "--parent":
            parent = int(next(args))
        elif arg == "--weak":
            weak = True
    os.set_inheritable(fd, False)
    boot = socket.socket(fileno=fd)
    server = Server(boot, parent, weak)
    try:
        server.setup()
    except Exception as exc:  # noqa: BLE001 - tell the client why, whatever it is
        with contextlib.suppress(OSError):
            boot.sendall(P.encode({"op": "fatal", "error": f"{type(exc).__name__}: {exc}"}))
        server.shutdown()
        return 1
    server.hello()
    boot.setblocking(False)
    try:
        server.loop()
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
