"""The launcher server: the only process of the local driver that forks.

Started once per ``Launcher`` as ``python -I -S _server.py --fd N --parent PID``,
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
they do not compete with its start.

The stages B and C are in ``_stages.py``; the rest of a run's pieces each have
their module: ``_cgroups`` (limits), ``_rootfs`` (root templates), ``_boxes``
(box folders and file transfer), ``_runs`` (what the server keeps of an exec),
``_spares`` (workers prepared ahead), ``_server_setup`` and ``_weak``.

B reaps everything until C exits, then SIGKILLs whatever is left in its pid
namespace, reaps until it has no child, and only then reports C's wait status:
the report means the whole tree is gone. Killing B (timeout, cancel, close) has
the same effect through the kernel: the death of a pid namespace's init kills
the namespace, and B's exit is seen only after all of it is gone.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import selectors
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mainsdk_local import _boxes as B
    from mainsdk_local import _cgroups as G
    from mainsdk_local import _common as C
    from mainsdk_local import _landlock as LL
    from mainsdk_local import _linux as L
    from mainsdk_local import _node_proxy as N
    from mainsdk_local import _protocol as P
    from mainsdk_local import _rootfs as R
    from mainsdk_local import _seccomp as SC
    from mainsdk_local import _server_setup as SU
    from mainsdk_local import _stages as S
    from mainsdk_local import _weak as W
    from mainsdk_local._boxes import Box
    from mainsdk_local._runs import ExecSpec, Run, Worker, describe_failure
    from mainsdk_local._spares import FAILED_SPARE_PAUSE, Spares
elif __package__:
    from . import _boxes as B
    from . import _cgroups as G
    from . import _common as C
    from . import _landlock as LL
    from . import _linux as L
    from . import _node_proxy as N
    from . import _protocol as P
    from . import _rootfs as R
    from . import _seccomp as SC
    from . import _server_setup as SU
    from . import _stages as S
    from . import _weak as W
    from ._boxes import Box
    from ._runs import ExecSpec, Run, Worker, describe_failure
    from ._spares import FAILED_SPARE_PAUSE, Spares
else:
    # Run as a script with -I: the script's directory is not on sys.path. Append,
    # never prepend, so nothing next to this file can shadow the standard library.
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import _boxes as B
    import _cgroups as G
    import _common as C
    import _landlock as LL
    import _linux as L
    import _node_proxy as N
    import _protocol as P
    import _rootfs as R
    import _seccomp as SC
    import _server_setup as SU
    import _stages as S
    import _weak as W
    from _boxes import Box
    from _runs import ExecSpec, Run, Worker, describe_failure
    from _spares import FAILED_SPARE_PAUSE, Spares

WEAK_SWEEP_SECONDS = 2.0
# A spare is prepared only once every run started this long ago (or earlier) or has reported; see _spare_wanted.
SPARE_QUIET = 0.25
# Longest stretch the loop gives one /out collection before it looks at everything else again.
COLLECT_SLICE = 0.005


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
        self.spares = Spares(self._spawn_worker, self._kill_worker, drop_uid=self.root)
        self.deadlines: list[tuple[float, int, Run]] = []
        self.collecting: dict[tuple[int, int], tuple[Box, int, B.OutCollector]] = {}  # (slot, id): unfinished
        self.base = C.MOUNT_BASE
        self.mounted_base = False
        self.own_pidns = -1
        self.self_pidfd = -1
        self.parent_pidfd = -1
        self.uid_base = C.UID_BASE + (os.getpid() % 4_000_000) * C.SLOTS_PER_SERVER
        self.cgroups = G.Cgroups("")
        self.templates = R.Templates(C.MOUNT_BASE)
        self.node_preload = N.IN_ROOT  # where a run finds the Node proxy preload (weak mode: on the host)
        self.landlock_abi = 0  # weak mode: the kernel's Landlock ABI, 0 when it has none
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
                    SU.enter_own_namespaces()
                self._setup_namespaces()
                self.isolation = "namespace"
            except OSError as exc:
                if not SU.means_no_namespaces(exc):
                    # A transient failure (a full /tmp, no memory): an error, never a quieter sandbox.
                    raise OSError(exc.errno, f"namespace isolation failed to set up: {exc}") from None
                print(f"mainsdk-local launcher: namespaces unavailable, weak isolation: {exc}", file=sys.stderr)
                self.isolation = "weak"
        self.self_pidfd = os.pidfd_open(os.getpid())
        host_pid = C.host_pid()
        self.cgroups.tag = f"{G.CGROUP_PREFIX}{host_pid}-{C.proc_starttime('self') or '0'}"
        if self.isolation == "weak":
            # Orphans of a weak run are re-parented to us so we can reap what we kill.
            L.prctl(L.PR_SET_CHILD_SUBREAPER, 1)
            self.base = W.weak_base()
            self.node_preload = os.path.join(self.base, "node-proxy.cjs")
            R.write_node_preload(self.node_preload)
            self.landlock_abi = LL.abi()
        if self.root or self.isolation == "namespace":
            self.cgroups.setup(delegated=not self.root)
        if not self.root:
            # One uid for every box: ours (0 in our user namespace when we have one).
            self.uid_base = 0 if self.isolation == "namespace" else os.geteuid()
        self.sel.register(self.boot, selectors.EVENT_READ, self._on_boot)
        self.sel.register(self.parent_pidfd, selectors.EVENT_READ, self._on_parent_exit)

    def _setup_namespaces(self) -> None:
        SU.mount_private_base(new_mount_namespace=self.root)
        self.mounted_base = True
        self.templates.setup()
        self.own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        uid = self.uid_base if self.root else os.geteuid()
        SU.probe(self.own_pidns, self.templates.empty_dir, uid, drop_uid=self.root)

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
                    "pid": C.host_pid(),
                    "node_preload": self.node_preload,
                    "landlock": self.landlock_abi,
                    "seccomp": SC.FILTER is not None,
                }
            )
        )

    def _spare_wanted(self) -> tuple[float, str] | None:
        """(seconds until, kind) of the next spare to prepare: only while boxes are open, in namespace mode.

        Never while a run that started less than SPARE_QUIET ago has not reported: preparing a
        spare forks and sets up namespaces, which would compete with that run's own interpreter
        start and report for the CPUs. A short run gets its spare after its result is sent.
        """
        if self.stopping or not self.boxes or self.isolation != "namespace":
            return None
        wanted = self.spares.wanted()
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
        if wanted is not None:
            self.spares.prepare(wanted[1])

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
            idle = self._idle_work_pending() or bool(self.collecting)
            events = self.sel.select(0 if idle else timeout)
            for key, mask in events:
                callback: Callable[[int], None] = key.data
                callback(mask)
            for box, rid, collector in list(self.collecting.values()):
                self._collect_slice(box, rid, collector)
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
                header = frame.header
                self._open_box(sock, header.get("disk_bytes"), header.get("session", True), header.get("max_files"))
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
                L.umount(C.MOUNT_BASE)
        if self.isolation == "weak" and self.base != C.MOUNT_BASE:
            with contextlib.suppress(OSError):
                os.unlink(self.node_preload)
            with contextlib.suppress(OSError):
                os.rmdir(self.base)

    # -- boxes ---------------------------------------------------------------

    def _open_box(self, sock: socket.socket, disk_bytes: object, session: object, max_files: object) -> None:
        sock.setblocking(False)
        slot = next((s for s in range(C.SLOTS_PER_SERVER) if s not in self.boxes), None)
        if slot is None:
            with contextlib.suppress(OSError):
                sock.send(P.encode({"id": 0, "ok": False, "kind": "launcher", "error": "too many open boxes"}))
            sock.close()
            return
        uid = self.uid_base + slot if self.root else self.uid_base
        gid = uid if self.root else (0 if self.isolation == "namespace" else os.getegid())
        box = Box(slot, uid, gid, sock, drop_fsids=self.root and uid != 0)
        self.boxes[slot] = box
        self.sel.register(sock, selectors.EVENT_READ, lambda mask, b=box: self._on_channel(b, mask))
        try:
            if not isinstance(disk_bytes, int) or isinstance(disk_bytes, bool) or disk_bytes < 4096:
                raise C.RequestError("value", "disk_bytes must be an integer of at least 4096")
            box.disk_bytes = disk_bytes
            if not isinstance(session, bool):
                raise C.RequestError("value", "session must be true or false")
            box.session = session
            if max_files is not None and (
                not isinstance(max_files, int) or isinstance(max_files, bool) or max_files < 64
            ):
                raise C.RequestError("value", "max_files must be null or an integer of at least 64")
            box.max_files = max_files
            B.make_box_fs(box, self.base, tmpfs=self.isolation == "namespace")
        except C.RequestError as exc:
            self._reply_error(box, 0, exc)
            box.closing = True
            self._destroy_box(box)
            return
        self._send(box, {"id": 0, "ok": True, "uid": box.uid, "isolation": self.isolation})

    def _destroy_box(self, box: Box) -> None:
        """Last step of a box: every run is dead; remove its files and free the slot."""
        self._stop_collecting(box)
        B.remove_box_fs(box, tmpfs=self.isolation == "namespace")
        box.decoder.close()
        box.destroyed = True
        if self.boxes.get(box.slot) is box:
            del self.boxes[box.slot]
        if not box.outq:
            self._close_channel(box)

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
            except C.RequestError as exc:
                self._reply_error(box, frame.header.get("id"), exc)
            except Exception as exc:  # noqa: BLE001 - a bug in one request must not take the server down
                traceback.print_exc()
                self._reply_error(box, frame.header.get("id"), C.RequestError("launcher", f"internal error: {exc!r}"))
            finally:
                frame.close_fds()

    def _handle(self, box: Box, frame: P.Frame) -> None:
        h = frame.header
        op = h.get("op")
        rid = h.get("id")
        if not isinstance(rid, int):
            raise C.RequestError("launcher", "request without an id")
        if box.closing and op != "close":
            raise C.RequestError("launcher", "box is closing")
        if op == "write":
            B.write_file(box, h.get("path"), frame.payload)
            self._send(box, {"id": rid, "ok": True})
        elif op == "read":
            data = B.read_file(box, h.get("path"))
            self._send(box, {"id": rid, "ok": True}, data)
        elif op == "collect":
            if (box.slot, rid) in self.collecting:
                raise C.RequestError("launcher", f"collect id {rid} already running")
            self._collect_slice(box, rid, B.OutCollector(box, h.get("max_bytes")))
        elif op == "exec":
            if rid in box.runs:
                raise C.RequestError("launcher", f"exec id {rid} already running")
            if len(frame.fds) != 2:
                raise C.RequestError("launcher", "exec needs stdout and stderr descriptors")
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
            raise C.RequestError("launcher", f"unknown op {op!r}")

    def _collect_slice(self, box: Box, rid: int, collector: B.OutCollector) -> None:
        """Collect for one slice (the first one at once: a small /out is done in it); reply when done.

        Never more than COLLECT_SLICE at a time, so a huge or deep /out delays no other
        box's requests; deadlines do not wait for it either (B keeps them, see _stages).
        """
        try:
            with B.AsBox(box):
                done = collector.step(time.monotonic() + COLLECT_SLICE)
        except Exception as exc:  # noqa: BLE001 - a bug in one collection must not take the server down
            traceback.print_exc()
            collector.close()
            self.collecting.pop((box.slot, rid), None)
            self._reply_error(box, rid, C.RequestError("launcher", f"internal error: {exc!r}"))
            return
        if not done:
            self.collecting[(box.slot, rid)] = (box, rid, collector)
            return
        self.collecting.pop((box.slot, rid), None)
        header, payload = collector.reply()
        self._send(box, dict(header, id=rid, ok=True), payload)

    def _stop_collecting(self, box: Box) -> None:
        """Drop the box's unfinished collections (it is closing): their descriptors must not pin its tmpfs."""
        for key, (owner, _, collector) in list(self.collecting.items()):
            if owner is box:
                collector.close()
                del self.collecting[key]

    def _begin_close(self, box: Box) -> None:
        box.closing = True
        self._stop_collecting(box)
        self.spares.box_closing(box)
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

    def _send(self, box: Box, header: dict[str, Any], payload: bytes = b"", fds: list[int] | None = None) -> None:
        """Queue a frame to the client; ``fds`` (ours: closed once sent) go with its first byte."""
        if not box.channel_open:
            for fd in fds or []:
                C.close_fd(fd)
            return
        box.outq.append((memoryview(P.encode(header, payload)), list(fds or [])))
        self._flush(box)

    def _reply_error(self, box: Box, rid: object, exc: C.RequestError) -> None:
        self._send(box, {"id": rid, "ok": False, "kind": exc.kind, "error": str(exc), "errno": exc.errno})

    def _flush(self, box: Box) -> None:
        while box.outq and box.channel_open:
            chunk, fds = box.outq[0]
            try:
                n = socket.send_fds(box.sock, [chunk], fds) if fds else box.sock.send(chunk)
            except BlockingIOError:
                break
            except OSError:
                self._close_channel(box)
                self._begin_close(box)
                return
            for fd in fds:  # the client holds its own reference now
                C.close_fd(fd)
            if n == len(chunk):
                box.outq.popleft()
            else:
                box.outq[0] = (chunk[n:], [])
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
        for _, fds in box.outq:
            for fd in fds:
                C.close_fd(fd)
        box.outq.clear()
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(box.sock)
        box.sock.close()

    # -- workers and runs ----------------------------------------------------

    def _spawn_worker(self, limits: G.Limits, bound: S.ChildContext | None = None) -> Worker:
        """Fork B into a new pid namespace and fresh cgroups; it prepares itself and waits for a job.

        B writes ``limits`` ahead; a ``bound`` C also enters that box's sandbox ahead.
        """
        cgroup = self.cgroups.plan()
        doomed = self.cgroups.take_doomed()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = SU.fork_in_new_pidns(self.own_pidns)
            if pid == 0:
                ours.close()
                S.worker_main(theirs, self.self_pidfd, cgroup, limits, doomed, bound.job() if bound else None)
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
        ctx = S.ChildContext()
        ctx.namespaces = self.isolation == "namespace"
        ctx.box_dir = box.path
        ctx.uid, ctx.gid = box.uid, box.gid
        ctx.drop_uid = self.root
        ctx.argv, ctx.env = spec.argv, spec.env
        ctx.timeout = spec.timeout
        ctx.stdout, ctx.stderr = fds
        ctx.disk_bytes = box.disk_bytes
        run = Run(rid, box, spec)
        stdin_r: int | None = None
        weak_cgroup: G.RunCgroup | None = None
        key = (spec.readonly, spec.hidden, spec.overlays)
        # In namespace mode B, the namespace's init, is in the pids cgroup too.
        has_cgroups = self.cgroups.memory is not None or self.cgroups.pids is not None
        limits: G.Limits = (spec.memory_bytes, spec.max_processes + 1) if has_cgroups else None
        try:
            if spec.has_stdin:
                stdin_r, run.stdin_w = os.pipe2(os.O_CLOEXEC)
                ctx.stdin = stdin_r
                os.set_blocking(run.stdin_w, False)
                run.stdin_data = memoryview(stdin)
            if ctx.namespaces:
                ctx.template = self.templates.get(spec.readonly, spec.hidden, spec.overlays)
                if box.session:
                    self.spares.hot_want = (box, key, limits, ctx.template)
                self.spares.last_limits = limits
                for attempt in range(2):
                    # A spare may have died since it was made: then once more with a new worker.
                    worker = self.spares.take(box, key, limits) if attempt == 0 else self._spawn_worker(limits)
                    self._set_limits(ctx, run, worker.cgroup, spec)
                    run.started = time.monotonic()
                    try:
                        self._send_job(worker, ctx)
                    except OSError:
                        if attempt == 1:
                            raise C.RequestError("launcher", self._worker_failure(worker)) from None
                        self.spares.discard(worker)
                        continue
                    run.worker, worker.run = worker, run
                    self._hand_listener(run)
                    break
            else:
                if self.landlock_abi:
                    ctx.landlock = LL.weak_rules(box.path, list(spec.readonly), self.node_preload, spec.proxy_port)
                weak_cgroup = self.cgroups.make()
                ctx.cgroup_fds = weak_cgroup.procs_fds if weak_cgroup is not None else []
                self._set_limits(ctx, run, weak_cgroup, spec)
                if weak_cgroup is not None:
                    try:
                        G.configure_cgroup(
                            weak_cgroup.memory_dir,
                            weak_cgroup.memory_version,
                            weak_cgroup.pids_dir,
                            spec.memory_bytes,
                            spec.max_processes,
                        )
                    except OSError as exc:
                        raise C.launch_error("cgroup limits", exc) from None
                run.started = time.monotonic()
                run.worker = worker = self._fork_weak(ctx)
                worker.run, worker.cgroup = run, weak_cgroup
                weak_cgroup = None  # the worker's now: removed when it is reaped
            self.spares.last_start = run.started
        except BaseException as exc:
            if weak_cgroup is not None:
                self.cgroups.remove(weak_cgroup)
            self._close_stdin(run)
            if isinstance(exc, OSError):
                raise C.launch_error("start", exc) from None
            raise
        finally:
            # Our copies of the child's ends must go, or the code's EOFs never come.
            for fd in [*fds, stdin_r]:
                C.close_fd(fd)
            if run.cgroup is not None:
                run.cgroup.close_fds()
        run.deadline = run.started + spec.timeout
        box.runs[rid] = run
        heapq.heappush(self.deadlines, (run.deadline, id(run), run))
        if run.stdin_w is not None:
            self._feed_stdin(run)

    @staticmethod
    def _set_limits(ctx: S.ChildContext, run: Run, cgroup: G.RunCgroup | None, spec: ExecSpec) -> None:
        """Where the exec's limits go: its cgroups, or rlimits for what has no cgroup."""
        run.cgroup = cgroup
        ctx.memory_dir = cgroup.memory_dir if cgroup else None
        ctx.memory_version = cgroup.memory_version if cgroup else 0
        ctx.pids_dir = cgroup.pids_dir if cgroup else None
        ctx.memory_bytes = spec.memory_bytes
        if ctx.namespaces and ctx.memory_dir is not None and spec.memory_bytes is not None:
            ctx.memory_bytes = G.session_allowance(spec.memory_bytes, ctx.box_dir)  # the box's files are RAM
        ctx.max_processes = spec.max_processes + (1 if ctx.namespaces else 0)
        ctx.memory_rlimit = spec.memory_bytes if ctx.memory_dir is None else None
        ctx.nproc_rlimit = spec.max_processes if ctx.pids_dir is None else None

    def _hand_listener(self, run: Run) -> None:
        """Give the run's proxy listener to the client if the exec has hosts; otherwise close it."""
        worker = run.worker
        if worker is None or worker.listener is None:
            return  # not arrived yet: _read_worker calls again when it does
        fd, worker.listener = worker.listener, None
        if run.spec.proxy and not run.done:
            self._send(run.box, {"id": run.rid, "op": "listener", "fds": 1}, fds=[fd])
        else:
            C.close_fd(fd)

    def _worker_failure(self, worker: Worker) -> str:
        """Why a worker stopped taking jobs: wait for it and read its report."""
        self._kill_worker(worker)
        if not worker.reaped:
            with contextlib.suppress(ChildProcessError):
                _, worker.status = os.waitpid(worker.pid, 0)
            worker.reaped = True
        self._read_worker(worker)
        if worker.error is not None:
            return f"exec setup failed at {describe_failure(worker.error)}"
        return f"the worker exited before taking the job (status {worker.status})"

    @staticmethod
    def _send_job(worker: Worker, ctx: S.ChildContext) -> None:
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

    def _fork_weak(self, ctx: S.ChildContext) -> Worker:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            ctx.report_fd = theirs.fileno()
            pid = os.fork()
            if pid == 0:
                S.weak_child_main(ctx)
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
        C.close_fd(run.stdin_w)
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
            worker.decoder.feed(data, fds)
            try:
                frames = worker.decoder.frames()
            except P.ProtocolError:
                frames = []
            run = worker.run
            for frame in frames:
                if frame.header.get("op") == "listener" and frame.fds and worker.listener is None:
                    worker.listener = frame.fds.pop()
                    if run is not None:
                        self._hand_listener(run)
                frame.close_fds()
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
                    if frame.header.get("timeout") is True:
                        run.timed_out = True  # B killed the tree at the deadline itself

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
        C.close_fd(worker.pidfd)
        C.close_fd(worker.listener)
        worker.listener = None
        self.workers.pop(worker.pid, None)
        self.spares.forget(worker)
        if worker.run is None and not worker.discarded and not self.stopping:
            self.spares.not_before = time.monotonic() + FAILED_SPARE_PAUSE  # a spare died unused: do not spin
            if worker.error is not None:
                print(f"mainsdk-local launcher: spare worker failed: {describe_failure(worker.error)}", file=sys.stderr)
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
                pids = G.Cgroups.members(run.cgroup.pids_dir)
            elif self.root:
                pids = W.pids_of_uid(run.box.uid)
            else:
                pids = W.pids_of_session(session)
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
        oom = run.cgroup is not None and G.Cgroups.oom_killed(run.cgroup)
        if reply and not (run.killed and run.box.closing):
            error = run.error
            if error is not None and not (run.killed or run.timed_out):
                msg = f"exec setup failed at {describe_failure(error)}"
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
        }


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
