"""cgroups: a directory per server in each usable hierarchy (memory, pids), and a fresh child per exec.

A run's memory and process limits are written into its own never-used cgroups,
so nothing of an earlier run's accounting (an OOM count, a leftover task) can
touch it. v1 and v2 are both handled; without either, limits fall back to rlimits.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time

from . import common, linux

CGROUP_PREFIX = "mainsdk-local-"

# What making or joining a cgroup answers where this machine gives us none to use: no permission (not root, no
# delegation), a read-only or absent hierarchy, a controller not offered or not enabled (EINVAL, ENOENT), v2's
# rule against processes in a cgroup with controllers (EBUSY). Anything else (no inode or memory left, too many
# cgroups: ENOSPC, ENOMEM, EAGAIN) passes, and is an error: never a quieter per-process limit.
UNUSABLE = frozenset(
    {errno.EPERM, errno.EACCES, errno.EROFS, errno.ENOENT, errno.ENOTDIR, errno.EINVAL, errno.EBUSY, errno.EOPNOTSUPP}
)


class CgroupSetupError(OSError):
    """A cgroup the launcher needs could not be made for a reason that passes (see ``UNUSABLE``)."""


# (memory_bytes, pids.max) of an exec's cgroups.
Limits = tuple[int | None, int] | None


# The least memory limit a command gets when its session's files already fill the box's memory: enough
# for the limit to be written while C sits in its cgroup; the code itself is then stopped with "memory".
SESSION_FLOOR = 4 << 20


def session_allowance(memory_bytes: int, box_fs: str) -> int:
    """The memory limit for a command in a box whose tmpfs ``box_fs`` already holds files.

    The box's /work and /out are a tmpfs: RAM. A page written there is charged to the
    command that wrote it, and stays when that command's cgroup is gone, charged to no
    later command. So a session could hold its memory limit *and* its disk limit in RAM.
    Each command's limit is the memory limit less what the box's files hold now, which
    keeps the box's code and files together within the memory limit (``SESSION_FLOOR``
    aside). Files the app writes with ``write_file`` count too.
    """
    try:
        fs = os.statvfs(box_fs)
    except OSError:
        return memory_bytes
    held = (fs.f_blocks - fs.f_bfree) * fs.f_frsize
    return max(memory_bytes - held, min(memory_bytes, SESSION_FLOOR))


class RunCgroup:
    """The cgroup directories of one exec."""

    def __init__(self) -> None:
        self.dirs: list[str] = []
        self.procs_fds: list[int] = []
        self.memory_dir: str | None = None
        self.memory_version = 0
        self.pids_dir: str | None = None
        self.joins: list[str] = []  # directories C makes and joins itself (its worker was a generic spare)
        self.wrapper: str | None = None  # a box-level memory cgroup around memory_dir (see plan), made first
        self.wrapper_pids = False  # one v2 directory holds memory and pids: the wrapper enables both

    def make_wrapper(self) -> None:
        """Make the box-level memory cgroup that holds this exec's (before the exec's own)."""
        if self.wrapper is None:
            return
        os.mkdir(self.wrapper, 0o755)
        if self.memory_version == 2:  # its children need the controllers
            controllers = "+memory +pids" if self.wrapper_pids else "+memory"
            linux.write_file(os.path.join(self.wrapper, "cgroup.subtree_control"), controllers)

    def removable(self) -> list[str]:
        """Every directory to remove once the exec's worker is reaped, children first."""
        return [*self.dirs, *([self.wrapper] if self.wrapper is not None else [])]

    def close_fds(self) -> None:
        for fd in self.procs_fds:
            common.close_fd(fd)
        self.procs_fds = []


def configure_cgroup(
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
                    linux.write_file(knob, str(memory_bytes))
            except OSError as exc:
                if exc.errno != errno.EINVAL or len(knobs) == 1:
                    raise
                # memory may never exceed memory+swap: raising both, memory+swap goes first.
                for knob in reversed(knobs):
                    linux.write_file(knob, str(memory_bytes))
            # v1 does not charge socket buffers to memory.limit_in_bytes (300 loopback connections held
            # 1.18 GiB under 64 MiB): they have their own counter, live once a limit is written, before the
            # code makes a socket. Past it, sends wait and receives drop, as under global TCP pressure.
            # (Kernel memory proper, the sockets themselves included, is charged to memory on v1 since
            # Linux 5.x; memory.kmem.limit_in_bytes no longer does anything.)
            tcp = os.path.join(memory_dir, "memory.kmem.tcp.limit_in_bytes")
            if os.path.exists(tcp):
                linux.write_file(tcp, str(memory_bytes))
        else:
            # v2 charges socket buffers and kernel memory to memory.max itself.
            linux.write_file(os.path.join(memory_dir, "memory.max"), str(memory_bytes))
            if os.path.exists(os.path.join(memory_dir, "memory.swap.max")):
                linux.write_file(os.path.join(memory_dir, "memory.swap.max"), "0")
    if pids_dir is not None:
        linux.write_file(os.path.join(pids_dir, "pids.max"), str(max_processes))


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
        self.v2: tuple[str, str] | None = None  # (mount, our own cgroup's path) of the cgroup2 hierarchy
        self._joined: str | None = None  # a v2 directory the server itself moved into (socket_dir)
        # Make a box-level memory cgroup around each exec's (see plan): set once a session's box has opened,
        # so an app that only ever makes one-shot runs does exactly the cgroup work it did before.
        self.wrap = False
        self._boxes = 0

    @property
    def memory_mode(self) -> str:
        if self.memory is None:
            return "rlimit"
        return f"cgroup-v{self.memory[1]}"

    def setup(self, *, delegated: bool = False) -> None:
        """Find our own cgroups, clean dead servers' leftovers, make our directories.

        ``delegated``: a server that is not root may also use a delegated v2 subtree above its own
        cgroup. A root server never leaves its own cgroup (it would take its runs out of, say, its
        systemd service).
        """
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
        if v2_mount is not None and own_v2 is not None:
            self.v2 = (v2_mount, own_v2)
        for controller in ("memory", "pids"):
            found: tuple[str, int] | None = None
            if controller in v1_mounts and controller in own_v1:
                found = self._make(v1_mounts[controller] + own_v1[controller].rstrip("/"), 1, controller)
            if found is None and v2_mount is not None and own_v2 is not None:
                found = self._make(v2_mount + own_v2.rstrip("/"), 2, controller)
                if found is None and delegated:
                    found = self._make_delegated(v2_mount, own_v2, controller)
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
                    linux.write_file(os.path.join(parent, "cgroup.subtree_control"), f"+{controller}")
            if path not in self._made:
                os.mkdir(path, 0o755)
                self._made.append(path)
            if version == 2:
                linux.write_file(os.path.join(path, "cgroup.subtree_control"), f"+{controller}")
            knob = {"memory": "memory.limit_in_bytes", "pids": "pids.max"}[controller]
            if version == 2:
                knob = {"memory": "memory.max", "pids": "pids.max"}[controller]
            if not os.path.exists(os.path.join(path, knob)):
                return None
        except OSError as exc:
            if exc.errno in UNUSABLE:
                return None
            where = exc.filename or path
            raise CgroupSetupError(exc.errno, f"cgroup setup failed at {where}: {exc.strerror}") from None
        return (path, version)

    def _make_delegated(self, mount: str, own: str, controller: str) -> tuple[str, int] | None:
        """A v2 ``controller`` in a delegated subtree above our own cgroup, for a server that is not root.

        Our own cgroup holds the app, so it cannot enable controllers for children (no internal
        processes). A delegated subtree (systemd's ``Delegate=yes``, a user's ``user@.service``) has
        an ancestor we own where the controller is already enabled: our directory goes there, and a
        process may move between two cgroups under it because we own their common ancestor. A
        throwaway child proves the move works before any run relies on it.
        """
        parts = own.strip("/").split("/")
        for depth in range(len(parts) - 1, 0, -1):
            ancestor = os.path.join(mount, *parts[:depth])
            try:
                with open(os.path.join(ancestor, "cgroup.subtree_control")) as fh:
                    if controller not in fh.read().split():
                        continue
            except OSError:
                continue
            if not (os.access(ancestor, os.W_OK) and os.access(os.path.join(ancestor, "cgroup.procs"), os.W_OK)):
                continue
            found = self._make(ancestor, 2, controller)
            if found is not None and self._can_join(found[0]):
                return found
            if found is not None:
                self._made.remove(found[0])
                self._remove_tree(found[0])
        return None

    @staticmethod
    def _can_join(path: str) -> bool:
        """Whether a child of ours can join a new cgroup under ``path`` (and the cgroup be removed after)."""
        probe = os.path.join(path, "probe")
        try:
            os.mkdir(probe, 0o755)
        except OSError:
            return False
        pid = os.fork()
        if pid == 0:
            try:
                linux.write_file(os.path.join(probe, "cgroup.procs"), "0")
                os._exit(0)
            except BaseException:  # noqa: BLE001 - a forked probe never returns into the server
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        Cgroups._remove_tree(probe)
        return status == 0 and not os.path.isdir(probe)

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
            if common.proc_starttime(pid) == start:
                continue  # that server is alive
            Cgroups._remove_tree(os.path.join(parent, name))

    @staticmethod
    def _remove_tree(path: str) -> None:
        try:
            subs = [e.path for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
        except OSError:
            return
        for sub in subs:
            Cgroups._remove_tree(sub)  # a session box's directory holds its commands' (two levels at most)
        for sub in [path]:
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

    def make_box(self, memory_bytes: int) -> str:
        """A session box's memory cgroup made here (mkdir and writes, no join), for when ``adopt`` cannot serve.

        Raises ``OSError``.
        """
        assert self.memory is not None
        base, version = self.memory
        self._count += 1
        run = RunCgroup()
        run.memory_version, run.wrapper = version, os.path.join(base, f"box-{self._count}")
        run.wrapper_pids = self.pids is not None and self.pids[0] == base
        run.make_wrapper()
        path = run.wrapper
        try:
            configure_cgroup(path, version, None, memory_bytes, 0)
        except OSError:
            self._remove_tree(path)
            raise
        return path

    @staticmethod
    def adopt(run: RunCgroup, memory_bytes: int) -> str | None:
        """Make the box-level cgroup around ``run``'s its session box's, limited to ``memory_bytes``.

        Every exec's memory cgroup is made inside one of its own (``plan``), ahead with the worker, so a
        session's first exec turns it into the box's with a write, no join; the box's later execs'
        cgroups go beneath it. Background processes, the cell interpreter and commands then share the
        one memory limit (and the box's files, charged to whichever command wrote them, stay charged to
        the box after that command's cgroup is gone). Only once the directory exists: a worker that said
        it is ready, or cgroups made here (weak mode). Returns the box's cgroup (None without one, which
        ``run`` then keeps). Raises ``OSError``.
        """
        if run.wrapper is None:
            return None
        configure_cgroup(run.wrapper, run.memory_version, None, memory_bytes, 0)
        path, run.wrapper = run.wrapper, None
        return path

    def remove_box(self, path: str, *, defer: bool) -> None:
        """Remove a closed box's memory cgroup once its commands' cgroups are gone (``remove``'s way)."""
        if defer:
            self._doomed.append(path)  # after its runs' directories, which are doomed first or retried
        else:
            self._retry.append(path)

    def plan(self, box_memory: str | None = None, *, one_shot: bool = False) -> RunCgroup | None:
        """Names for one exec's fresh, never used cgroups (no system call); None without cgroups.

        ``box_memory``: a session box's memory cgroup, to make the memory cgroup beneath. Without one,
        once sessions are in use (``wrap``) and unless the worker can only serve a ``one_shot`` run,
        the memory cgroup gets a box-level one of its own around it (``wrapper``, unlimited), which a
        session box adopts at its first exec (``adopt``) and a one-shot run's removal takes along.
        """
        if self.memory is None and self.pids is None:
            return None
        self._count += 1
        run = RunCgroup()
        name = f"run-{self._count}"
        if self.memory is not None:
            base, run.memory_version = self.memory
            if box_memory is None and self.wrap and not one_shot:
                run.wrapper = box_memory = os.path.join(base, f"box-{self._count}")
                run.wrapper_pids = self.pids is not None and self.pids[0] == base
            run.memory_dir = os.path.join(box_memory or base, name)
            run.dirs.append(run.memory_dir)
        if self.pids is not None:
            pids_base = self.pids[0]
            if box_memory is not None and self.memory is not None and pids_base == self.memory[0]:
                pids_base = box_memory  # one v2 hierarchy: the same directory holds both
            run.pids_dir = os.path.join(pids_base, name)
            if run.pids_dir not in run.dirs:
                run.dirs.append(run.pids_dir)
        return run

    def rehome(self, worker_cgroup: RunCgroup, box_memory: str) -> RunCgroup:
        """The cgroups of an exec whose worker was made before its box was known (a generic spare).

        C makes and joins a new memory cgroup beneath the box's (``joins``); B stays where it is. The
        result owns the new directory and the worker's, all removed once the worker is reaped.
        """
        assert self.memory is not None
        self._count += 1
        moved = RunCgroup()
        moved.memory_version = self.memory[1]
        moved.memory_dir = os.path.join(box_memory, f"run-{self._count}")
        shared = worker_cgroup.pids_dir is not None and worker_cgroup.pids_dir == worker_cgroup.memory_dir
        moved.pids_dir = moved.memory_dir if shared else worker_cgroup.pids_dir  # one v2 directory holds both
        moved.joins = [moved.memory_dir]
        moved.dirs = [moved.memory_dir, *worker_cgroup.dirs]
        moved.wrapper, worker_cgroup.wrapper = worker_cgroup.wrapper, None
        worker_cgroup.dirs = []
        return moved

    def socket_dir(self) -> str:
        """A cgroup v2 directory holding every run of this server, for the socket bound's programs.

        Where memory or pids use v2, their directory. Otherwise one of ours under our own v2 cgroup,
        which the server itself joins once, so that all it forks is in it without a join per run (a
        join waits for an RCU grace period). Raises ``OSError``.
        """
        for found in (self.memory, self.pids):
            if found is not None and found[1] == 2:
                return found[0]
        if self.v2 is None:
            raise OSError(errno.ENOENT, "no cgroup2 hierarchy is mounted")
        mount, own = self.v2
        parent = mount + own.rstrip("/")
        self._clean_stale(parent)
        path = os.path.join(parent, self.tag)
        os.mkdir(path, 0o755)
        self._made.append(path)
        linux.write_file(os.path.join(path, "cgroup.procs"), "0")
        self._joined = parent
        return path

    def make(self, box_memory: str | None = None) -> RunCgroup | None:
        """Plan and create one exec's cgroups here, with their cgroup.procs opened (weak mode)."""
        run = self.plan(box_memory)
        if run is None:
            return None
        try:
            run.make_wrapper()
            for path in run.dirs:
                os.mkdir(path, 0o755)
                run.procs_fds.append(os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC))
        except OSError as exc:
            self.remove(run)
            raise common.launch_error("cgroup", exc) from None
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
        paths = run.removable()
        run.dirs, run.wrapper = [], None
        if defer:
            self._doomed += paths
            return
        for path in paths:
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
        if self._joined is not None:
            # Out of our own directory first: removing it kills what is still in it.
            with contextlib.suppress(OSError):
                linux.write_file(os.path.join(self._joined, "cgroup.procs"), "0")
            self._joined = None
        for path in reversed(self._made):
            self._remove_tree(path)
