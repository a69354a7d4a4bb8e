"""The launcher server: the only process of the local driver that forks.

Started once per ``Launcher`` as ``python -I -S launcher/__main__.py --fd N --parent PID``,
single-threaded and standard-library only. Forking a small single-threaded
process is safe (the app may have threads, where fork + Python code is not) and
cheap; every run still execs a fresh interpreter in fresh namespaces, so
nothing of this process's memory reaches the code.

Per exec (namespace mode)::

    server --unshare(NEWPID)+fork--> B, pid 1 of a new pid namespace: makes and joins the
        exec's fresh cgroups, unshares net/ipc/uts/cgroup namespaces, brings lo up, sets the
        hostname, listens on 127.0.0.1:PROXY_PORT there and sends that listener to the server
        (which passes it to the app for an exec with hosts, and closes it otherwise), then
    B --fork--> C: new session, default signals, OOM score, rlimits; waits for the job.
        With the job, C writes the cgroup limits, unshares a mount namespace (a copy of
        the server's, so it holds the current boxes and roots), mounts /proc, /work and
        /out over a read-only root template and pivots into it, drops to the box's host
        uid, enters a new user namespace where that uid is 1000, gets a new session
        keyring, empties its capability bounding set, sets no_new_privs, execve.

B+C pairs are prepared ahead of time ("spares"), so that work is off the exec's
critical path: a generic one, and, for a session's box (not a one-shot run's), a
"hot" one whose C has also pivoted into the root of the box the last exec used (it
stays root until its job comes). Spares are prepared after a fresh run reports, so
they do not compete with its start, and also for a while after the last box closed
(``SPARE_LINGER``: one-shot runs keep no box open between them).

A one-shot run is one exchange: its box request, files and exec arrive unanswered, the
exec carrying ``then`` (collect /out, then close): the server replies to each, sends the
result when B reports, collects /out and sends it unasked, and closes the box. A failed
open or file makes the exec refuse to run. A closed box's files (umount, rmdir) are
removed on a later turn of the loop, after the replies and any request already waiting.

This module is the event loop. Forking, feeding and reporting runs is in ``execs.py``; the
stages B and C are in ``stages.py``; the rest of a run's pieces each have their module:
``cgroups`` (limits), ``rootfs`` (root templates), ``boxes`` (box folders and file transfer),
``runs`` (what the server keeps of a box and its execs), ``spares`` (workers prepared ahead),
``server_setup`` and ``weak``.

B reaps everything until C exits, then SIGKILLs whatever is left in its pid
namespace, reaps until it has no child, and only then reports C's wait status:
the report means the whole tree is gone. Killing B (timeout, cancel, close) has
the same effect through the kernel: the death of a pid namespace's init kills
the namespace, and B's exit is seen only after all of it is gone.
"""

from __future__ import annotations

import collections
import contextlib
import os
import selectors
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from . import (
    boxes,
    cgroups,
    checkpoints,
    common,
    landlock,
    linux,
    node_proxy,
    protocol,
    rootfs,
    seccomp,
    server_setup,
    sockets,
    weak,
)
from .execs import Executor
from .pool import WarmPool
from .pool_kinds import KINDS
from .runs import Channel, ExecRequest, Run, ServerBox
from .shared import SharedState
from .spares import FAILED_SPARE_PAUSE

# A spare is prepared only once every run started this long ago (or earlier) or has reported; see _spare_wanted.
SPARE_QUIET = 0.25
# How long after its last box closed the server still keeps a spare ready: one-shot runs leave no box open
# between them, and without a spare each would fork and set up its worker (cgroups, namespaces) itself.
SPARE_LINGER = 60.0
# Longest stretch the loop gives one /out collection before it looks at everything else again.
COLLECT_SLICE = 0.005
# The socket bound of a box whose opener names none (the driver names one from the memory limit).
DEFAULT_MAX_SOCKETS = 4096
MAX_DISK = (1 << 63) - 1  # a box's disk size in bytes: what RLIMIT_FSIZE (a C long) can hold
_HELLO_TIMEOUT = 5.0  # a shared server's answer on a client's new socket: a small frame, sent at once


class Server:
    """The event loop: bootstrap socket, box channels, deadlines, /out collection.

    It has an ``Executor`` (``execs.py``: the workers, spares and runs) and a ``WarmPool`` (``pool.py``: the
    entries made ahead); each is given what it needs of the server, and the server calls their public methods.
    """

    def __init__(
        self,
        boot: socket.socket | None,
        parent: int,
        force_weak: bool,
        pool: int = 0,
        pool_idle: float | None = None,
        shared: SharedState | None = None,
    ) -> None:
        # The clients' bootstrap sockets: a private server's one (its app's), a shared server's accepted ones.
        self.boots: dict[socket.socket, protocol.Decoder] = {} if boot is None else {boot: protocol.Decoder()}
        self.parent = parent
        self.shared = shared or SharedState()
        self.force_weak = force_weak
        self.root = os.geteuid() == 0
        self.isolation = "weak"
        self.sel = selectors.DefaultSelector()
        self.boxes: dict[int, ServerBox] = {}
        # Unfinished /out collections by (channel, request id).
        self.collecting: dict[tuple[Channel, int], tuple[Channel, int, boxes.OutCollector]] = {}
        # Closed boxes whose files are still to be removed: done between requests, never before one (loop).
        self.doomed: collections.deque[ServerBox] = collections.deque()
        self.base = common.MOUNT_BASE
        self.mounted_base = False
        self.own_pidns = -1
        self.self_pidfd = -1
        self.parent_pidfd = -1
        self.uid_base = common.UID_BASE + (os.getpid() % 4_000_000) * common.SLOTS_PER_SERVER
        self.cgroups = cgroups.Cgroups("")
        self.sockets: sockets.SocketBound | None = None  # the per-box socket bound, where this machine has it
        self.sockets_why = ""  # why not, where it has not
        self.templates = rootfs.Templates(common.MOUNT_BASE)
        self.checkpoints = checkpoints.Checkpoints("")
        self.checkpoints_why = "the launcher runs weak or not as root"  # "" once filesystem checkpoints work
        self.node_preload = node_proxy.IN_ROOT  # where a run finds the Node proxy preload (weak mode: on the host)
        self.landlock_abi = 0  # weak mode: the kernel's Landlock ABI, 0 when it has none
        self.stopping = False
        self.last_box_closed = -SPARE_LINGER  # monotonic time the last box was destroyed (see _spare_wanted)
        self.pool = WarmPool(
            pool,
            common.MOUNT_BASE,
            KINDS,
            selector=self.sel,
            templates=self.templates,
            boxes=self.boxes,
            root=self.root,
        )
        if pool_idle is not None:
            self.pool.idle_seconds = pool_idle
        self.executor = Executor(
            self.sel,
            self.cgroups,
            self.templates,
            self.pool,
            root=self.root,
            send=self._send,
            finish_close=self._maybe_finish_close,
            collect_after=self._collect_after,
            stopping=lambda: self.stopping,
        )

    # -- setup ---------------------------------------------------------------

    def setup(self) -> None:
        """Namespaces (or weak mode), cgroups, and the descriptors the loop watches."""
        if not self.shared.enabled:
            if os.getppid() != self.parent:
                raise RuntimeError("the app exited before the launcher server started")
            # The app's exit is seen through a pidfd (and bootstrap EOF), not PR_SET_PDEATHSIG:
            # PDEATHSIG fires when the *thread* that started us exits, and apps start us from
            # any thread. A shared server outlives its app: it ends when it holds nothing (shared.py).
            self.parent_pidfd = os.pidfd_open(self.parent)
        if not self.force_weak:
            try:
                if not self.root:
                    server_setup.enter_own_namespaces()
                self._setup_namespaces()
                self.isolation = "namespace"
            except OSError as exc:
                if not server_setup.means_no_namespaces(exc):
                    # A transient failure (a full /tmp, no memory): an error, never a quieter sandbox.
                    raise OSError(exc.errno, f"namespace isolation failed to set up: {exc}") from None
                print(f"mainsdk-local launcher: namespaces unavailable, weak isolation: {exc}", file=sys.stderr)
                self.isolation = "weak"
        self.self_pidfd = os.pidfd_open(os.getpid())
        host_pid = common.host_pid()
        self.cgroups.tag = f"{cgroups.CGROUP_PREFIX}{host_pid}-{common.proc_starttime('self') or '0'}"
        if self.isolation == "weak":
            # Orphans of a weak run are re-parented to us so we can reap what we kill.
            linux.prctl(linux.PR_SET_CHILD_SUBREAPER, 1)
            self.base = weak.weak_base()
            self.node_preload = os.path.join(self.base, "node-proxy.cjs")
            rootfs.write_node_preload(self.node_preload)
            self.landlock_abi = landlock.abi()
        if self.root or self.isolation == "namespace":
            self.cgroups.setup(delegated=not self.root)
        self._setup_socket_bound()
        self.checkpoints.tag = self.cgroups.tag + "-"
        if self.isolation == "namespace" and self.root:
            self.checkpoints_why = checkpoints.probe(self.base, self.uid_base)
        if self.cgroups.memory is None:
            self.checkpoints.freezer_ok = False  # a box's processes are found through its memory cgroup
        if not self.root:
            # One uid for every box: ours (0 in our user namespace when we have one).
            self.uid_base = 0 if self.isolation == "namespace" else os.geteuid()
        if self.isolation != "namespace" or self.cgroups.memory is None or self.cgroups.pids is None:
            self.pool.size = 0  # a warm interpreter's limits are rewritten from outside: it needs cgroups
        self.pool.sockets = self.sockets  # a box that takes an entry's uid takes its socket bound along
        self.executor.configure(
            isolation=self.isolation,
            own_pidns=self.own_pidns,
            self_pidfd=self.self_pidfd,
            node_preload=self.node_preload,
            landlock_abi=self.landlock_abi,
        )
        for boot in self.boots:
            self.sel.register(boot, selectors.EVENT_READ, lambda mask, b=boot: self._on_boot(b, mask))
        if self.shared.listener is not None:
            self.shared.listener.setblocking(False)
            self.sel.register(self.shared.listener, selectors.EVENT_READ, self._on_accept)
        else:
            self.sel.register(self.parent_pidfd, selectors.EVENT_READ, self._on_parent_exit)

    def _setup_socket_bound(self) -> None:
        """Load the per-box socket bound (root, cgroup2, BPF); where this machine cannot, keep why for hello."""
        if not self.root:
            self.sockets_why = "the launcher is not root (loading BPF programs needs it)"
            return
        try:
            with open("/proc/self/uid_map") as fh:
                initial = fh.read().split() == ["0", "0", "4294967295"]
        except OSError:
            initial = False
        if not initial:
            # BPF sees uids as the initial user namespace does: not the boxes' uids as we name them.
            self.sockets_why = "the launcher runs in a user namespace"
            return
        bound: sockets.SocketBound | None = None
        try:
            bound = sockets.SocketBound(self.uid_base, common.SLOTS_PER_SERVER)
            bound.attach(self.cgroups.socket_dir())
        except OSError as exc:
            if bound is not None:
                bound.close()
            if exc.errno not in sockets.UNAVAILABLE:
                raise OSError(exc.errno, f"socket bound setup failed: {exc.strerror}") from None
            self.sockets_why = f"no cgroup2 or BPF here: {exc.strerror}"
            return
        self.sockets = bound

    def _setup_namespaces(self) -> None:
        server_setup.mount_private_base(new_mount_namespace=self.root)
        self.mounted_base = True
        self.templates.setup()
        self.own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        uid = self.uid_base if self.root else os.geteuid()
        server_setup.probe(self.own_pidns, self.templates.empty_dir, uid, drop_uid=self.root)

    # -- loop ----------------------------------------------------------------

    def hello(self, boot: socket.socket) -> None:
        """Tell a client what isolation it gets."""
        boot.sendall(
            protocol.encode(
                {
                    "shared": self.shared.enabled,
                    "op": "hello",
                    "isolation": self.isolation,
                    "memory": self.cgroups.memory_mode,
                    "pids": "cgroup" if self.cgroups.pids else "rlimit",
                    "sockets": "bpf" if self.sockets is not None else "none",
                    "sockets_why": self.sockets_why,
                    "pid": common.host_pid(),
                    "node_preload": self.node_preload,
                    "landlock": self.landlock_abi,
                    "seccomp": seccomp.FILTER is not None,
                    "pool": self.pool.size,
                    "checkpoints": [] if self.checkpoints_why else ["filesystem"],
                    "checkpoints_why": self.checkpoints_why,
                    "pause": self.checkpoints.freezer_ok and self.isolation == "namespace",
                }
            )
        )

    def _spare_wanted(self) -> tuple[float, str] | None:
        """(seconds until, kind) of the next spare or warm interpreter to prepare, in namespace mode.

        Spares while boxes are open or one closed less than SPARE_LINGER ago (one-shot runs keep
        no box open between them); a warm interpreter (kind "pool") whenever the pool has
        room for one of a kind runs asked for. Never while a run that started less than
        SPARE_QUIET ago has not reported: preparing one forks and sets up namespaces, which
        would compete with that run's own start and report for the CPUs. A short run gets its
        replacement after its result is sent. The one exception: each run of a pooled kind that
        reported may warm one interpreter at once (``WarmPool.refills``), so steady concurrency, where
        the loop is never quiet, does not drain the pool.
        """
        if self.stopping or self.isolation != "namespace":
            return None
        # Spares while boxes are open, and for SPARE_LINGER after the last one closed: one-shot runs keep no
        # box open between them, and without a spare each would fork and set up its worker on its own path.
        spares_wanted = bool(self.boxes) or time.monotonic() <= self.last_box_closed + SPARE_LINGER
        spares = self.executor.spares
        wanted = spares.wanted() if spares_wanted else None
        pool = self.pool.size > 0 and self.pool.wanted() is not None
        soon = max(0.0, spares.not_before - time.monotonic())
        if pool and self.pool.refills:
            return (soon, "pool")  # one warm interpreter per run that reported, even while others run (refills)
        # Otherwise a generic spare first when there is none (a run that finds no warm interpreter takes it:
        # without it, that run forks its worker itself), then warm interpreters, then a session's hot spare.
        first_spare = wanted is not None and wanted[1] == "generic" and not spares.generic
        if pool and not first_spare:
            wanted = (soon, "pool")
        if wanted is None:
            return None
        now = time.monotonic()
        runs = (run for box in self.boxes.values() for run in box.runs.values())
        quiet = max((run.started + SPARE_QUIET for run in runs), default=0.0)
        return (max(wanted[0], quiet - now), wanted[1])

    def _idle_work_pending(self) -> bool:
        wanted = self._spare_wanted()
        return wanted is not None and wanted[0] == 0.0

    def _idle_work(self) -> None:
        """Prepare the next exec's worker."""
        wanted = self._spare_wanted()
        if wanted is not None and wanted[1] == "pool":
            self._warm_one()
        elif wanted is not None:
            self.executor.spares.prepare(wanted[1])

    def _warm_one(self) -> None:
        """Start one warm pool entry for the key the pool wants most, in a free slot and with its uid."""
        key = self.pool.wanted()
        slot = self.pool.free_slot()
        if key is None or slot is None:
            return
        uid = self.uid_base + slot if self.root else self.uid_base
        gid = uid if self.root else 0
        self.pool.refills = max(0, self.pool.refills - 1)
        try:
            self.pool.warm(key, slot, uid, gid, self.executor.spawn_worker)
        except (OSError, common.RequestError) as exc:
            print(f"mainsdk-local launcher: pool entry: {exc}", file=sys.stderr)
            self.executor.spares.not_before = time.monotonic() + FAILED_SPARE_PAUSE

    def loop(self) -> None:
        """Serve until the app closes the bootstrap socket or exits."""
        while not self.stopping:
            timeout: float | None = None
            deadline = self.executor.next_deadline()
            if deadline is not None:
                timeout = max(0.0, deadline - time.monotonic())
            if self.cgroups.retry():
                timeout = 0.05 if timeout is None else min(timeout, 0.05)
            if self.isolation == "weak" and self.executor.workers:
                timeout = 0.2 if timeout is None else min(timeout, 0.2)
            expiry = self.pool.next_expiry()
            if expiry is not None:  # wake to drop an interpreter idle too long
                timeout = expiry + 0.01 if timeout is None else min(timeout, expiry + 0.01)
            wanted = self._spare_wanted()
            if wanted is not None and wanted[0] > 0:
                timeout = wanted[0] if timeout is None else min(timeout, wanted[0])
            upkeep = self.shared.next_wake(time.monotonic(), self._holds_nothing())
            if upkeep is not None:  # a kept box or snapshot to expire, or a shared server's own exit
                timeout = upkeep if timeout is None else min(timeout, upkeep)
            idle = self._idle_work_pending() or bool(self.collecting) or bool(self.doomed)
            events = self.sel.select(0 if idle else timeout)
            for key, mask in events:
                callback: Callable[[int], None] = key.data
                callback(mask)
            for ch, rid, collector in list(self.collecting.values()):
                self._collect_slice(ch, rid, collector)
            # After the events (requests first, replies already sent), one piece of idle work per turn.
            if self.doomed:
                self._destroy_box(self.doomed.popleft())  # a closed box's umount and rmdir
            elif self._idle_work_pending():
                self._idle_work()
            self.executor.expire_deadlines(time.monotonic())
            if self.isolation == "weak":
                self.executor.reap_orphans()
            self._shared_turn()

    def _on_parent_exit(self, mask: int) -> None:
        self.stopping = True

    def _on_accept(self, mask: int) -> None:
        """A shared server's new client (its own user's only: ``SharedState.accept``): say hello, then serve it."""
        sock = self.shared.accept()
        if sock is None:
            return
        try:
            sock.settimeout(_HELLO_TIMEOUT)  # a tiny frame into an empty socket buffer: at once, unless hostile
            self.hello(sock)
            sock.setblocking(False)
        except OSError:
            sock.close()
            return
        self.boots[sock] = protocol.Decoder()
        self.sel.register(sock, selectors.EVENT_READ, lambda mask, b=sock: self._on_boot(b, mask))

    def _drop_boot(self, boot: socket.socket) -> None:
        """A client's bootstrap socket ended: a private server stops (its app is gone); a shared one goes on."""
        decoder = self.boots.pop(boot, None)
        if decoder is not None:
            decoder.close()
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(boot)
        boot.close()
        if not self.shared.enabled:
            self.stopping = True  # the app closed the Launcher or died

    def _on_boot(self, boot: socket.socket, mask: int) -> None:
        decoder = self.boots.get(boot)
        if decoder is None:
            return
        try:
            data, fds = protocol.receive(boot)
        except BlockingIOError:
            return
        except (OSError, protocol.ProtocolError):
            data, fds = b"", []
        if not data and not fds:
            self._drop_boot(boot)
            return
        decoder.feed(data, fds)
        try:
            frames = decoder.frames()
        except protocol.ProtocolError:
            self._drop_boot(boot)
            return
        for frame in frames:
            op, header = frame.header.get("op"), frame.header
            if op == "forget":
                if self.shared.may_use(header.get("snapshot"), header.get("tenant")):
                    self.checkpoints.forget(header.get("snapshot"))
                    self.shared.forgotten(header.get("snapshot"))
            elif op == "stop" and self.shared.enabled:
                self.stopping = True  # a shared server's user ends it and everything it keeps (Launcher.stop_shared)
            elif op in ("box", "attach", "find") and len(frame.fds) == 1:
                sock = socket.socket(fileno=frame.fds.pop())
                if op == "box":
                    self._open_box(sock, header)
                elif op == "attach":
                    self._attach(sock, header)
                else:
                    self._find_snapshot(sock, header)
            frame.close_fds()

    def _attach(self, sock: socket.socket, header: dict[str, Any]) -> None:
        """Another process of the user reaches a kept session's box: a channel of its own, if it names the tenant."""
        box = self.shared.find(header.get("session"), header.get("tenant"))
        if box is None:
            # Unknown, closed, another tenant's: the same answer, so an id says nothing of another tenant's box.
            with contextlib.suppress(OSError):
                sock.send(protocol.encode({"id": 0, "ok": False, "kind": "missing", "error": "no such session"}))
            sock.close()
            return
        sock.setblocking(False)
        ch = Channel(sock)
        ch.box = box
        box.channels.append(ch)
        box.last_used = time.monotonic()
        self.sel.register(sock, selectors.EVENT_READ, lambda mask, c=ch: self._on_channel(c, mask))
        reply = {"id": 0, "ok": True, "uid": box.uid, "isolation": self.isolation, "disk_bytes": box.disk_bytes}
        self._send(ch, dict(reply, paused=self.checkpoints.is_paused(box)))

    def _find_snapshot(self, sock: socket.socket, header: dict[str, Any]) -> None:
        """Whether a tenant's snapshot is kept here, and until when: answered on ``sock``, which then closes."""
        snapshot_id = header.get("snapshot")
        found = self.shared.snapshot_of(snapshot_id, header.get("tenant"))
        kept = found is not None and snapshot_id in self.checkpoints.snapshots
        with contextlib.suppress(OSError):
            sock.settimeout(_HELLO_TIMEOUT)
            sock.sendall(protocol.encode(dict(found or {}, id=0, ok=kept)))
        sock.close()

    def _shared_turn(self) -> None:
        """A shared server's upkeep: kept boxes and snapshots past their time go; with nothing held, it exits."""
        if not self.shared.enabled:
            return
        now = time.monotonic()
        for box in self.shared.expired(now):
            self._begin_close(box)
        for snapshot_id in self.shared.expired_snapshots():
            self.checkpoints.forget(snapshot_id)
            self.shared.forgotten(snapshot_id)
        if self.shared.may_exit(now, self._holds_nothing()):
            self.stopping = True

    def _holds_nothing(self) -> bool:
        return not self.boxes and not self.boots and not self.shared.snapshots and not self.doomed

    def shutdown(self) -> None:
        """Kill every run and worker, wait for them, remove boxes, roots and cgroups."""
        self.checkpoints.shutdown()  # thawed first: a frozen process cannot die
        self.executor.shutdown()
        for boot in list(self.boots):
            self.boots.pop(boot).close()
            boot.close()
        self.shared.close()
        for box in list(self.boxes.values()):
            for ch in list(box.channels):
                self._close_channel(ch)
            self._destroy_box(box)
        self.pool.shutdown()
        self.templates.shutdown()
        if self.sockets is not None:
            self.sockets.close()
        self.cgroups.shutdown()
        if self.mounted_base:
            with contextlib.suppress(OSError):
                linux.umount(common.MOUNT_BASE)
        if self.isolation == "weak" and self.base != common.MOUNT_BASE:
            with contextlib.suppress(OSError):
                os.unlink(self.node_preload)
            with contextlib.suppress(OSError):
                os.rmdir(self.base)

    # -- boxes ---------------------------------------------------------------

    def _open_box(self, sock: socket.socket, header: dict[str, Any]) -> None:
        disk_bytes, session, max_files = header.get("disk_bytes"), header.get("session", True), header.get("max_files")
        memory_bytes, max_sockets = header.get("memory_bytes"), header.get("max_sockets")
        sock.setblocking(False)
        slot = next(
            (s for s in range(common.SLOTS_PER_SERVER) if s not in self.boxes and s not in self.pool.held), None
        )
        if slot is None:
            with contextlib.suppress(OSError):
                sock.send(protocol.encode({"id": 0, "ok": False, "kind": "launcher", "error": "too many open boxes"}))
            sock.close()
            return
        uid = self.uid_base + slot if self.root else self.uid_base
        gid = uid if self.root else (0 if self.isolation == "namespace" else os.getegid())
        box = ServerBox(slot, uid, gid, sock, drop_fsids=self.root and uid != 0)
        self.boxes[slot] = box
        self.sel.register(sock, selectors.EVENT_READ, lambda mask, c=box.channel: self._on_channel(c, mask))
        try:
            if not isinstance(disk_bytes, int) or isinstance(disk_bytes, bool) or not 4096 <= disk_bytes <= MAX_DISK:
                # Above MAX_DISK no RLIMIT_FSIZE can hold it: refused here, before anything runs, not by C's setrlimit
                # (the cold path's setup error) or a warm interpreter's (which looked like the code's exit 1).
                raise common.RequestError("value", f"disk_bytes must be an integer from 4096 to {MAX_DISK}")
            box.disk_bytes = disk_bytes
            if not isinstance(session, bool):
                raise common.RequestError("value", "session must be true or false")
            box.session = session
            if max_files is not None and (
                not isinstance(max_files, int) or isinstance(max_files, bool) or max_files < 64
            ):
                raise common.RequestError("value", "max_files must be null or an integer of at least 64")
            box.max_files = max_files
            for name, value in (("memory_bytes", memory_bytes), ("max_sockets", max_sockets)):
                if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                    raise common.RequestError("value", f"{name} must be null or a positive integer")
            boxes.make_box_fs(box, self.base, tmpfs=self.isolation == "namespace")
            self.shared.box_opened(box, header)
            if header.get("snapshot") is not None:
                if self.checkpoints_why:
                    raise common.RequestError("value", f"no snapshots here: {self.checkpoints_why}")
                if not self.shared.may_use(header.get("snapshot"), box.tenant):
                    raise common.RequestError("value", f"no snapshot {header.get('snapshot')!r:.40} in this launcher")
                self.checkpoints.start_from(box, header.get("snapshot"))
            self._box_limits(box, memory_bytes, max_sockets)
        except common.RequestError as exc:
            self._reply_error(box.channel, 0, exc)
            box.closing = True
            self._destroy_box(box)
            return
        self._send(box.channel, {"id": 0, "ok": True, "uid": box.uid, "isolation": self.isolation})

    def _box_limits(self, box: ServerBox, memory_bytes: int | None, max_sockets: int | None) -> None:
        """What the box holds at most, whatever runs in it: sockets; for a session's box, memory too."""
        if box.session:
            box.memory_limit = memory_bytes  # its cgroup is its first exec's box-level one (Executor)
            self.cgroups.wrap = True
        try:
            box.max_sockets = DEFAULT_MAX_SOCKETS if max_sockets is None else max_sockets
            if self.sockets is not None:
                self.sockets.set_bound(box.slot, box.max_sockets, fresh=True)  # a new box: its slot counts from zero
        except OSError as exc:
            raise common.launch_error("box limits", exc) from None

    def _destroy_box(self, box: ServerBox) -> None:
        """Last step of a box: every run is dead; remove its files and free the slot."""
        if box.destroyed:
            return
        self._stop_collecting(box)
        if box.memory_cgroup is not None:
            # After its commands' cgroups: in namespace mode the next worker removes them all, in that order.
            self.cgroups.remove_box(box.memory_cgroup, defer=self.isolation == "namespace" and not self.stopping)
            box.memory_cgroup = None
        self.checkpoints.box_destroyed(box)
        boxes.remove_box_fs(box, tmpfs=self.isolation == "namespace")
        self.pool.box_destroyed(box)
        box.destroyed = True
        self.last_box_closed = time.monotonic()
        if self.boxes.get(box.slot) is box:
            del self.boxes[box.slot]
        self.shared.box_destroyed(box)
        for ch in list(box.channels):
            if not ch.outq:
                self._close_channel(ch)

    def _on_channel(self, ch: Channel, mask: int) -> None:
        if mask & selectors.EVENT_WRITE:
            self._flush(ch)
        box = ch.box
        if not (mask & selectors.EVENT_READ) or not ch.open or box is None:
            return
        try:
            data, fds = protocol.receive(ch.sock)
        except BlockingIOError:
            return
        except (OSError, protocol.ProtocolError):
            data, fds = b"", []
        if not data and not fds:
            self._channel_lost(ch)
            return
        ch.decoder.feed(data, fds)
        try:
            frames = ch.decoder.frames()
        except protocol.ProtocolError as exc:
            print(f"mainsdk-local launcher: protocol error on box {box.slot}: {exc}", file=sys.stderr)
            self._channel_lost(ch)
            return
        box.last_used = time.monotonic()
        for frame in frames:
            try:
                self._handle(box, ch, frame)
            except common.RequestError as exc:
                box.failed = True
                self._reply_error(ch, frame.header.get("id"), exc)
            except Exception as exc:  # noqa: BLE001 - a bug in one request must not take the server down
                box.failed = True
                traceback.print_exc()
                self._reply_error(
                    ch, frame.header.get("id"), common.RequestError("launcher", f"internal error: {exc!r}")
                )
            finally:
                frame.close_fds()

    def _handle(self, box: ServerBox, ch: Channel, frame: protocol.Frame) -> None:
        h = frame.header
        op = h.get("op")
        rid = h.get("id")
        if not isinstance(rid, int):
            raise common.RequestError("launcher", "request without an id")
        if box.closing and op != "close":
            raise common.RequestError("launcher", "box is closing")
        if op in ("write", "read", "collect", "exec") and self.checkpoints.is_paused(box):
            raise common.RequestError("launcher", "the box is paused")
        if op == "write":
            boxes.write_file(box, h.get("path"), frame.payload)
            self._send(ch, {"id": rid, "ok": True})
        elif op == "read":
            data = boxes.read_file(box, h.get("path"))
            self._send(ch, {"id": rid, "ok": True}, data)
        elif op == "collect":
            if (ch, rid) in self.collecting:
                raise common.RequestError("launcher", f"collect id {rid} already running")
            self._collect_slice(ch, rid, boxes.OutCollector(box, h.get("max_bytes")))
        elif op == "exec":
            if rid in box.runs:
                raise common.RequestError("launcher", f"exec id {rid} already running")
            # A live stdin (``"stdin": "live"``): the client's pipe read end comes third, and it feeds the pipe.
            if len(frame.fds) != (3 if h.get("stdin") == "live" else 2):
                raise common.RequestError("launcher", "exec needs stdout and stderr descriptors, and stdin's when live")
            spec = ExecRequest(h.get("spec"), bool(h.get("stdin")))
            then = self._then_collect(box, rid, h.get("then"))
            fds, frame.fds = frame.fds, []
            self.executor.start_run(box, rid, spec, fds, frame.payload, ch)  # owns (and closes) fds
            box.runs[rid].then = then
        elif op == "kill":
            run = box.runs.get(rid)
            if run is not None and not run.done and run.channel is ch:
                run.killed = True
                self.executor.kill(run)
        elif op == "pool":
            self._send(ch, dict(self.pool.stats(), id=rid, ok=True))
        elif op in ("snapshot", "pause", "resume"):
            self._checkpoint(box, ch, rid, op, h)
        elif op == "close":
            if box.doomed:  # closed already (a one-shot box after its /out): its processes are long gone
                self._send(ch, {"id": rid, "ok": True})
                return
            box.close_id, box.close_channel = rid, ch
            self._begin_close(box)
        else:
            raise common.RequestError("launcher", f"unknown op {op!r}")

    def _checkpoint(self, box: ServerBox, ch: Channel, rid: int, op: str, h: dict[str, Any]) -> None:
        """A snapshot of the box's files, or its pause or resume (``checkpoints.py``)."""
        reply: dict[str, Any] = {"id": rid, "ok": True}
        if op == "snapshot":
            if self.checkpoints_why:
                raise common.RequestError("value", f"no snapshots here: {self.checkpoints_why}")
            self._stop_collecting(box)
            self.executor.spares.box_closing(box)  # a hot spare holds the box's folders in its mounts
            self.checkpoints.snapshot(box, h.get("snapshot"))
            reply["expires"] = self.shared.snapshot_made(box, str(h.get("snapshot")))
        elif op == "pause":
            self.checkpoints.pause(box)
        else:
            self.checkpoints.resume(box)
        self._send(ch, reply)

    @staticmethod
    def _then_collect(box: ServerBox, rid: int, then: object) -> tuple[int, int] | None:
        """An exec's ``then`` (a one-shot box): collect /out as (id, max_bytes) after it, then close the box.

        Its open and files were sent ahead without waiting for their answers: if one of them (or any
        request on the box) failed, the exec does not run.
        """
        if then is None:
            return None
        if not isinstance(then, dict):
            raise common.RequestError("value", "then must be an object")
        collect_id, max_bytes = then.get("collect_id"), then.get("max_bytes")
        if not isinstance(collect_id, int) or isinstance(collect_id, bool) or collect_id in (0, rid):
            raise common.RequestError("value", "then.collect_id must be an integer other than 0 and the exec's id")
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0:
            raise common.RequestError("value", "then.max_bytes must be a non-negative integer")
        if box.failed:
            raise common.RequestError(
                "launcher", "an earlier request on this box failed: the one-shot exec does not run"
            )
        return collect_id, max_bytes

    def _collect_after(self, run: Run) -> None:
        """A one-shot box's run has reported: collect its /out at once, unasked, then close the box."""
        if run.then is None or run.box.closing:
            return
        collect_id, max_bytes = run.then
        run.box.close_after = collect_id
        self._collect_slice(run.channel, collect_id, boxes.OutCollector(run.box, max_bytes))

    def _collect_slice(self, ch: Channel, rid: int, collector: boxes.OutCollector) -> None:
        """Collect for one slice (the first one at once: a small /out is done in it); reply when done.

        Never more than COLLECT_SLICE at a time, so a huge or deep /out delays no other
        box's requests; deadlines do not wait for it either (B keeps them, see stages.py).
        """
        box = collector.box
        try:
            with boxes.AsBox(box):
                done = collector.step(time.monotonic() + COLLECT_SLICE)
        except Exception as exc:  # noqa: BLE001 - a bug in one collection must not take the server down
            traceback.print_exc()
            collector.close()
            self.collecting.pop((ch, rid), None)
            self._reply_error(ch, rid, common.RequestError("launcher", f"internal error: {exc!r}"))
            if box.close_after == rid:
                self._begin_close(box)
            return
        if not done:
            self.collecting[(ch, rid)] = (ch, rid, collector)
            return
        self.collecting.pop((ch, rid), None)
        header, payload = collector.reply()
        self._send(ch, dict(header, id=rid, ok=True), payload)
        if box.close_after == rid:
            self._begin_close(box)  # a one-shot box: its exec asked for /out, and that was all

    def _stop_collecting(self, box: ServerBox) -> None:
        """Drop the box's unfinished collections (it is closing): their descriptors must not pin its tmpfs."""
        for key, (_, _, collector) in list(self.collecting.items()):
            if collector.box is box:
                collector.close()
                del self.collecting[key]

    def _begin_close(self, box: ServerBox) -> None:
        self.checkpoints.resume(box)  # a frozen process cannot die
        box.closing = True
        self._stop_collecting(box)
        self.executor.spares.box_closing(box)
        for run in list(box.runs.values()):
            run.killed = True
            self.executor.kill(run)
        self._maybe_finish_close(box)

    def _maybe_finish_close(self, box: ServerBox) -> None:
        if not box.closing or box.runs or box.destroyed or box.doomed:
            return
        if box.close_id is not None and box.close_channel is not None:
            # The client closes its end on this reply; we close ours once it is sent.
            self._send(box.close_channel, {"id": box.close_id, "ok": True})
        # Its files go (umount, rmdir) on a later turn of the loop: after the reply, and after any request
        # already waiting (the next run's start, another box's), never ahead of them.
        self._stop_collecting(box)
        box.doomed = True
        self.doomed.append(box)

    # -- channel output ------------------------------------------------------

    def _send(self, ch: Channel, header: dict[str, Any], payload: bytes = b"", fds: list[int] | None = None) -> None:
        """Queue a frame to a box's client; ``fds`` (ours: closed once sent) go with its first byte."""
        if not ch.open:
            for fd in fds or []:
                common.close_fd(fd)
            return
        ch.outq.append((memoryview(protocol.encode(header, payload)), list(fds or [])))
        self._flush(ch)

    def _reply_error(self, ch: Channel, rid: object, exc: common.RequestError) -> None:
        # A request refused with a RequestError did nothing: for an exec, no code ran.
        self._send(ch, {"id": rid, "ok": False, "kind": exc.kind, "error": str(exc), "errno": exc.errno, "ran": False})

    def _flush(self, ch: Channel) -> None:
        while ch.outq and ch.open:
            chunk, fds = ch.outq[0]
            try:
                n = socket.send_fds(ch.sock, [chunk], fds) if fds else ch.sock.send(chunk)
            except BlockingIOError:
                break
            except OSError:
                self._channel_lost(ch)
                return
            for fd in fds:  # the client holds its own reference now
                common.close_fd(fd)
            if n == len(chunk):
                ch.outq.popleft()
            else:
                ch.outq[0] = (chunk[n:], [])
        if not ch.open:
            return
        if not ch.outq and (ch.box is None or ch.box.destroyed):
            self._close_channel(ch)
            return
        if bool(ch.outq) != ch.writing:
            ch.writing = bool(ch.outq)
            want = selectors.EVENT_READ | (selectors.EVENT_WRITE if ch.outq else 0)
            self.sel.modify(ch.sock, want, lambda mask, c=ch: self._on_channel(c, mask))

    def _channel_lost(self, ch: Channel) -> None:
        """A client's channel ended (EOF, an error): its box closes, unless a shared launcher keeps it.

        A shared launcher's session box outlives the process that held it: what that process ran in it is
        killed (its output had nowhere to go), and its files stay for another process to attach, until its
        idle time passes with no process holding it (``shared.SharedState.expired``).
        """
        box = ch.box
        self._close_channel(ch)
        if box is None:
            return
        if box.session_id is None or box.closing or box.destroyed:
            self._begin_close(box)
            return
        for run in list(box.runs.values()):
            if run.channel is ch:
                run.killed = True
                self.executor.kill(run)
        for key, (_, _, collector) in list(self.collecting.items()):
            if key[0] is ch:
                collector.close()
                del self.collecting[key]

    def _close_channel(self, ch: Channel) -> None:
        if not ch.open:
            return
        ch.open = False
        for _, fds in ch.outq:
            for fd in fds:
                common.close_fd(fd)
        ch.outq.clear()
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(ch.sock)
        ch.sock.close()
        ch.decoder.close()
        if ch.box is not None and ch in ch.box.channels:
            ch.box.channels.remove(ch)


def main(argv: list[str]) -> int:
    """Entry point (see ``__main__.py``): ``--fd N --parent PID [--weak] [--pool N] [--pool-idle SECONDS]``.

    A shared server (``shared.py``) gets ``--listen FD --folder FD --name NAME --idle-exit SECONDS`` instead of
    ``--parent``: the listening socket its starter bound, the per-user folder holding it, their name there, and
    how long it stays with nothing held. ``--fd`` is then its starter's bootstrap socket, one client among others.
    """
    fd = parent = listen = folder = -1
    force_weak = False
    pool = 0
    pool_idle: float | None = None
    name, idle_exit = "", 60.0
    args = iter(argv)
    for arg in args:
        if arg == "--fd":
            fd = int(next(args))
        elif arg == "--parent":
            parent = int(next(args))
        elif arg == "--weak":
            force_weak = True
        elif arg == "--pool":
            pool = int(next(args))
        elif arg == "--pool-idle":
            pool_idle = float(next(args))
        elif arg == "--listen":
            listen = int(next(args))
        elif arg == "--folder":
            folder = int(next(args))
        elif arg == "--name":
            name = next(args)
        elif arg == "--idle-exit":
            idle_exit = float(next(args))
    os.set_inheritable(fd, False)
    boot = socket.socket(fileno=fd)
    shared: SharedState | None = None
    if listen >= 0:
        for held in (listen, folder):
            os.set_inheritable(held, False)
        shared = SharedState(socket.socket(fileno=listen), folder, name, idle_exit)
    server = Server(boot, parent, force_weak, pool, pool_idle, shared)
    try:
        server.setup()
    except Exception as exc:  # noqa: BLE001 - tell the client why, whatever it is
        with contextlib.suppress(OSError):
            boot.sendall(protocol.encode({"op": "fatal", "error": f"{type(exc).__name__}: {exc}"}))
        server.shutdown()
        return 1
    server.hello(boot)
    boot.setblocking(False)
    try:
        server.loop()
    finally:
        server.shutdown()
    return 0
