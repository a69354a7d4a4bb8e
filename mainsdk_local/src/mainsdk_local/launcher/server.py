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
(``idle_work.SPARE_LINGER``: one-shot runs keep no box open between them).

A one-shot run is one exchange: its box request, files and exec arrive unanswered, the
exec carrying ``then`` (collect /out, then close): the server replies to each, sends the
result when B reports, collects /out and sends it unasked, and closes the box. A failed
open or file makes the exec refuse to run. A closed box's files (umount, rmdir) are
removed on a later turn of the loop, after the replies and any request already waiting.

This module is the event loop. Forking, feeding and reporting runs is in ``execs.py``; the
stages B and C are in ``stages.py``; the rest of a run's pieces each have their module:
``cgroups`` (limits), ``rootfs`` (root templates), ``boxes`` (box folders and file transfer),
``runs`` (what the server keeps of a box and its execs), ``spares`` (workers prepared ahead),
``server_setup`` and ``weak``. The loop's own parts: ``clients`` (the bootstrap sockets and their
requests), ``channel_out`` (frames to the boxes' clients), ``out_collect`` (/out collections in slices)
and ``idle_work`` (what to prepare when idle).

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
    linux,
    node_proxy,
    protocol,
    rootfs,
    seccomp,
    server_setup,
    sockets,
    weak,
)
from .channel_out import ChannelOutput
from .clients import Clients
from .execs import Executor
from .idle_work import IdleWork
from .out_collect import OutCollections, then_collect
from .pool import WarmPool
from .pool_kinds import KINDS
from .runs import Channel, ExecRequest, ServerBox
from .shared import SharedState

# The socket bound of a box whose opener names none (the driver names one from the memory limit).
DEFAULT_MAX_SOCKETS = 4096


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
        self.parent = parent
        self.shared = shared or SharedState()
        self.force_weak = force_weak
        self.root = os.geteuid() == 0
        self.isolation = "weak"
        self.sel = selectors.DefaultSelector()
        self.boxes: dict[int, ServerBox] = {}
        self.out = ChannelOutput(self.sel, lost=self._channel_lost, on_channel=self._on_channel)
        self.collections = OutCollections(self.out, self._begin_close)  # the unfinished /out collections
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
        # The clients' bootstrap sockets: a private server's one (its app's), a shared server's accepted ones.
        self.clients = Clients(
            boot,
            self.shared,
            self.checkpoints,
            self.out,
            hello=self.hello,
            stop=self.stop,
            open_box=self._open_box,
            isolation=lambda: self.isolation,
            begin_close=self._begin_close,
            holds_nothing=self._holds_nothing,
        )
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
            send=self.out.send,
            finish_close=self._maybe_finish_close,
            collect_after=self.collections.after_run,
            stopping=lambda: self.stopping,
        )
        self.idle = IdleWork(self.executor, self.pool, self.boxes, root=self.root, stopping=lambda: self.stopping)

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
            self.base, self.node_preload, self.landlock_abi = weak.prepare_host()
        if self.root or self.isolation == "namespace":
            self.cgroups.setup(delegated=not self.root)
        # The per-box socket bound (root, cgroup2, BPF); where this machine cannot, why not, for hello.
        self.sockets, self.sockets_why = sockets.for_server(
            self.root, self.uid_base, common.SLOTS_PER_SERVER, self.cgroups.socket_dir
        )
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
        self.idle.configure(namespace=self.isolation == "namespace", uid_base=self.uid_base)
        self.clients.watch()
        if self.shared.listener is None:
            self.sel.register(self.parent_pidfd, selectors.EVENT_READ, lambda mask: self.stop())

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
            wanted = self.idle.wanted()
            if wanted is not None and wanted[0] > 0:
                timeout = wanted[0] if timeout is None else min(timeout, wanted[0])
            upkeep = self.shared.next_wake(time.monotonic(), self._holds_nothing())
            if upkeep is not None:  # a kept box or snapshot to expire, or a shared server's own exit
                timeout = upkeep if timeout is None else min(timeout, upkeep)
            idle = self.idle.pending() or bool(self.collections.pending) or bool(self.doomed)
            events = self.sel.select(0 if idle else timeout)
            for key, mask in events:
                callback: Callable[[int], None] = key.data
                callback(mask)
            self.collections.step_all()
            # After the events (requests first, replies already sent), one piece of idle work per turn.
            if self.doomed:
                self._destroy_box(self.doomed.popleft())  # a closed box's umount and rmdir
            elif self.idle.pending():
                self.idle.do()
            self.executor.expire_deadlines(time.monotonic())
            if self.isolation == "weak":
                weak.reap_orphans(self.executor.workers)
            self.clients.shared_turn()

    def stop(self) -> None:
        """End the loop: the app is gone, or a shared server's user stopped it, or it holds nothing."""
        self.stopping = True

    def _holds_nothing(self) -> bool:
        return not self.boxes and not self.clients.boots and not self.shared.snapshots and not self.doomed

    def shutdown(self) -> None:
        """Kill every run and worker, wait for them, remove boxes, roots and cgroups."""
        self.checkpoints.shutdown()  # thawed first: a frozen process cannot die
        self.executor.shutdown()
        self.clients.close_all()
        self.shared.close()
        for box in list(self.boxes.values()):
            for ch in list(box.channels):
                self.out.close(ch)
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
            memory_bytes, max_sockets = boxes.take_settings(box, header)
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
            self.out.reply_error(box.channel, 0, exc)
            box.closing = True
            self._destroy_box(box)
            return
        self.out.send(box.channel, {"id": 0, "ok": True, "uid": box.uid, "isolation": self.isolation})

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
        self.collections.stop_box(box)
        if box.memory_cgroup is not None:
            # After its commands' cgroups: in namespace mode the next worker removes them all, in that order.
            self.cgroups.remove_box(box.memory_cgroup, defer=self.isolation == "namespace" and not self.stopping)
            box.memory_cgroup = None
        self.checkpoints.box_destroyed(box)
        boxes.remove_box_fs(box, tmpfs=self.isolation == "namespace")
        self.pool.box_destroyed(box)
        box.destroyed = True
        self.idle.last_box_closed = time.monotonic()
        if self.boxes.get(box.slot) is box:
            del self.boxes[box.slot]
        self.shared.box_destroyed(box)
        for ch in list(box.channels):
            if not ch.outq:
                self.out.close(ch)

    def _on_channel(self, ch: Channel, mask: int) -> None:
        if mask & selectors.EVENT_WRITE:
            self.out.flush(ch)
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
                self.out.reply_error(ch, frame.header.get("id"), exc)
            except Exception as exc:  # noqa: BLE001 - a bug in one request must not take the server down
                box.failed = True
                traceback.print_exc()
                self.out.reply_error(
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
            self.out.send(ch, {"id": rid, "ok": True})
        elif op == "read":
            data = boxes.read_file(box, h.get("path"))
            self.out.send(ch, {"id": rid, "ok": True}, data)
        elif op == "collect":
            self.collections.start(ch, rid, boxes.OutCollector(box, h.get("max_bytes")))
        elif op == "exec":
            if rid in box.runs:
                raise common.RequestError("launcher", f"exec id {rid} already running")
            # A live stdin (``"stdin": "live"``): the client's pipe read end comes third, and it feeds the pipe.
            if len(frame.fds) != (3 if h.get("stdin") == "live" else 2):
                raise common.RequestError("launcher", "exec needs stdout and stderr descriptors, and stdin's when live")
            spec = ExecRequest(h.get("spec"), bool(h.get("stdin")))
            then = then_collect(box, rid, h.get("then"))
            fds, frame.fds = frame.fds, []
            self.executor.start_run(box, rid, spec, fds, frame.payload, ch)  # owns (and closes) fds
            box.runs[rid].then = then
        elif op == "kill":
            run = box.runs.get(rid)
            if run is not None and not run.done and run.channel is ch:
                run.killed = True
                self.executor.kill(run)
        elif op == "pool":
            self.out.send(ch, dict(self.pool.stats(), id=rid, ok=True))
        elif op in ("snapshot", "pause", "resume"):
            self._checkpoint(box, ch, rid, op, h)
        elif op == "close":
            if box.doomed:  # closed already (a one-shot box after its /out): its processes are long gone
                self.out.send(ch, {"id": rid, "ok": True})
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
            self.collections.stop_box(box)
            self.executor.spares.box_closing(box)  # a hot spare holds the box's folders in its mounts
            self.checkpoints.snapshot(box, h.get("snapshot"))
            reply["expires"] = self.shared.snapshot_made(box, str(h.get("snapshot")))
        elif op == "pause":
            self.checkpoints.pause(box)
        else:
            self.checkpoints.resume(box)
        self.out.send(ch, reply)

    def _begin_close(self, box: ServerBox) -> None:
        self.checkpoints.resume(box)  # a frozen process cannot die
        box.closing = True
        self.collections.stop_box(box)
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
            self.out.send(box.close_channel, {"id": box.close_id, "ok": True})
        # Its files go (umount, rmdir) on a later turn of the loop: after the reply, and after any request
        # already waiting (the next run's start, another box's), never ahead of them.
        self.collections.stop_box(box)
        box.doomed = True
        self.doomed.append(box)

    def _channel_lost(self, ch: Channel) -> None:
        """A client's channel ended (EOF, an error): its box closes, unless a shared launcher keeps it.

        A shared launcher's session box outlives the process that held it: what that process ran in it is
        killed (its output had nowhere to go), and its files stay for another process to attach, until its
        idle time passes with no process holding it (``shared.SharedState.expired``).
        """
        box = ch.box
        self.out.close(ch)
        if box is None:
            return
        if box.session_id is None or box.closing or box.destroyed:
            self._begin_close(box)
            return
        for run in list(box.runs.values()):
            if run.channel is ch:
                run.killed = True
                self.executor.kill(run)
        self.collections.stop_channel(ch)


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
