"""Runs in the server: forking or taking a worker, handing it the job, feeding stdin, reaping, reporting.

The server's event loop (``server.py``) owns the boxes' channels and decides when; its ``Executor`` owns the
workers (B+C pairs, see ``stages.py``), the spares prepared ahead (``spares.py``) and the runs on them: what
is forked, what the job carries, and what the client is told when a run ends. What it needs of the server
it is given: the selector its workers are watched on, the cgroups and root templates, the warm pool a run
may take an entry of, and three callbacks (``send`` a frame to a box's client, ``finish_close`` a box whose
runs are over, ``collect_after`` a one-shot box's run).
"""

from __future__ import annotations

import contextlib
import heapq
import os
import selectors
import socket
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from . import cgroups, common, landlock, node_proxy, protocol, rootfs, runs, server_setup, stages, stdin_feed, weak
from .pool import WarmPool
from .runs import Channel, ExecRequest, Run, ServerBox, Worker, describe_failure, set_limits
from .spares import FAILED_SPARE_PAUSE, Spares


class Send(Protocol):
    """``Server._send``: queue a frame to a box's client; ``fds`` (closed once sent) go with its first byte."""

    def __call__(
        self, ch: Channel, header: dict[str, Any], payload: bytes = b"", fds: list[int] | None = None
    ) -> None: ...


class Executor:
    """The workers and runs of one server (``server.Server`` has one).

    ``root``: the server runs as root (C switches to the box's uid). ``stopping()``: the server is
    shutting down (nothing is deferred to a next worker then). ``configure`` sets what the server's setup
    found (isolation, its pid namespace and pidfd, where runs find the Node preload, Landlock) before the
    first run.
    """

    def __init__(
        self,
        selector: selectors.BaseSelector,
        cgroup_tree: cgroups.Cgroups,
        templates: rootfs.Templates,
        pool: WarmPool,
        *,
        root: bool,
        send: Send,
        finish_close: Callable[[ServerBox], None],
        collect_after: Callable[[Run], None],
        stopping: Callable[[], bool],
    ) -> None:
        self.sel = selector
        self.cgroups = cgroup_tree
        self.templates = templates
        self.pool = pool
        self.root = root
        self._send = send
        self._maybe_finish_close = finish_close
        self._collect_after = collect_after
        self._stopping = stopping
        self.isolation = "weak"
        self.own_pidns = -1
        self.self_pidfd = -1
        self.node_preload = node_proxy.IN_ROOT
        self.landlock_abi = 0
        self.workers: dict[int, Worker] = {}
        self.deadlines: list[tuple[float, int, Run]] = []
        self.spares = Spares(self.spawn_worker, drop_uid=root)

    def configure(
        self, *, isolation: str, own_pidns: int, self_pidfd: int, node_preload: str, landlock_abi: int
    ) -> None:
        """What the server's setup found: ``isolation`` ("namespace" or "weak"), the server's own pid namespace
        and pidfd (B's parent check), where a run finds the Node proxy preload, the kernel's Landlock ABI (weak)."""
        self.isolation = isolation
        self.own_pidns = own_pidns
        self.self_pidfd = self_pidfd
        self.node_preload = node_preload
        self.landlock_abi = landlock_abi

    # -- the loop's questions --------------------------------------------------

    def next_deadline(self) -> float | None:
        """The earliest deadline of a run still going (monotonic), or None."""
        while self.deadlines and self.deadlines[0][2].done:
            heapq.heappop(self.deadlines)
        return self.deadlines[0][0] if self.deadlines else None

    def expire_deadlines(self, now: float) -> None:
        """Kill every run whose deadline is past (``now``, monotonic); B keeps each deadline itself first."""
        while self.deadlines and (self.deadlines[0][2].done or self.deadlines[0][0] <= now):
            _, _, run = heapq.heappop(self.deadlines)
            if not run.done:
                run.timed_out = True
                self.kill(run)

    def shutdown(self) -> None:
        """Kill every worker and wait for it; its run, if any, ends without a reply."""
        for worker in self.workers.values():
            worker.kill()
        for worker in list(self.workers.values()):
            if not worker.reaped:
                with contextlib.suppress(ChildProcessError):
                    _, worker.status = os.waitpid(worker.pid, 0)
                worker.reaped = True
            self._worker_gone(worker, reply=False)

    # -- workers and runs ------------------------------------------------------

    def spawn_worker(
        self,
        limits: cgroups.Limits,
        bound: stages.ChildContext | None = None,
        *,
        child: Callable[[int, int], NoReturn] | None = None,
        keep: frozenset[int] = frozenset(),
    ) -> Worker:
        """Fork B into a new pid namespace and fresh cgroups; it prepares itself and waits for a job.

        B writes ``limits`` ahead; a ``bound`` C also enters that box's sandbox ahead; ``child``
        and ``keep``: what C runs instead and the descriptors it needs (see ``stages.worker_main``).
        """
        cgroup = self.cgroups.plan(bound.box_memory if bound is not None else None, one_shot=child is not None)
        doomed = self.cgroups.take_doomed()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = server_setup.fork_in_new_pidns(self.own_pidns)
            if pid == 0:
                ours.close()
                stages.worker_main(
                    theirs, self.self_pidfd, cgroup, limits, doomed, bound.job() if bound else None, child, keep
                )
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

    def start_run(
        self, box: ServerBox, rid: int, spec: ExecRequest, fds: list[int], stdin: bytes, channel: Channel | None = None
    ) -> None:
        ctx = stages.ChildContext()
        ctx.namespaces = self.isolation == "namespace"
        # HOME and TMPDIR in the box's own tmp/ (its /tmp; in weak mode a folder of the box's private directory)
        # unless the app's env names them: before any pool key is made from the environment.
        spec.env = common.box_environment(spec.env, "/tmp" if ctx.namespaces else os.path.join(box.path, "tmp"))
        ctx.box_dir = box.path
        ctx.uid, ctx.gid = box.uid, box.gid
        ctx.drop_uid = self.root
        ctx.argv, ctx.env = spec.argv, spec.env
        ctx.timeout = spec.timeout
        ctx.stdout, ctx.stderr = fds[0], fds[1]
        ctx.disk_bytes = box.disk_bytes
        run = Run(rid, box, spec, channel)
        box.execs += 1
        stdin_r: int | None = None
        weak_cgroup: cgroups.RunCgroup | None = None
        key = (spec.readonly, spec.hidden, spec.overlays)
        # In namespace mode B, the namespace's init, is in the pids cgroup too.
        has_cgroups = self.cgroups.memory is not None or self.cgroups.pids is not None
        limits: cgroups.Limits = (spec.memory_bytes, spec.max_processes + 1) if has_cgroups else None
        try:
            if len(fds) == 3:
                ctx.stdin = fds[2]  # a live stdin: the client's pipe, which the client feeds
            elif spec.has_stdin:
                stdin_r, run.stdin_w = os.pipe2(os.O_CLOEXEC)
                ctx.stdin = stdin_r
                os.set_blocking(run.stdin_w, False)
                run.stdin_data = memoryview(stdin)
            if ctx.namespaces:
                ctx.template = self.templates.get(spec.readonly, spec.hidden, spec.overlays)
                if box.session:
                    self.spares.hot_want = (box, key, limits, ctx.template)
                self.spares.last_limits = limits
                self._start_warm(box, run, ctx, spec, key, has_cgroups)
                for attempt in range(0 if run.warm else 2):
                    # A spare may have died since it was made: then once more with a new worker.
                    worker = self.spares.take(box, key, limits) if attempt == 0 else self.spawn_worker(limits)
                    worker.cgroup = self._box_cgroup(box, worker.cgroup, made=worker.ready)
                    set_limits(ctx, run, worker.cgroup, spec)
                    run.started = time.monotonic()
                    try:
                        self._send_job(worker, ctx)
                    except OSError:
                        if attempt == 1:
                            raise common.RequestError("launcher", self._worker_failure(worker)) from None
                        self.spares.discard(worker)
                        continue
                    run.worker, worker.run = worker, run
                    self._hand_listener(run)
                    break
            else:
                if self.landlock_abi:
                    ctx.landlock = landlock.weak_rules(
                        box.path, list(spec.readonly), self.node_preload, spec.proxy_port
                    )
                weak_cgroup = self.cgroups.make(box.memory_cgroup)
                weak_cgroup = self._box_cgroup(box, weak_cgroup, made=True)
                ctx.cgroup_fds = weak_cgroup.procs_fds if weak_cgroup is not None else []
                set_limits(ctx, run, weak_cgroup, spec)
                if weak_cgroup is not None:
                    try:
                        cgroups.configure_cgroup(
                            weak_cgroup.memory_dir,
                            weak_cgroup.memory_version,
                            weak_cgroup.pids_dir,
                            spec.memory_bytes,
                            spec.max_processes,
                        )
                    except OSError as exc:
                        raise common.launch_error("cgroup limits", exc) from None
                run.started = time.monotonic()
                run.worker = worker = self._fork_weak(ctx)
                worker.run, worker.cgroup = run, weak_cgroup
                weak_cgroup = None  # the worker's now: removed when it is reaped
            self.spares.last_start = run.started
        except BaseException as exc:
            if weak_cgroup is not None:
                self.cgroups.remove(weak_cgroup)
            stdin_feed.close(self.sel, run)
            if isinstance(exc, OSError):
                raise common.launch_error("start", exc) from None
            raise
        finally:
            # Our copies of the child's ends must go, or the code's EOFs never come.
            for fd in [*fds, stdin_r]:
                common.close_fd(fd)
            if run.cgroup is not None:
                run.cgroup.close_fds()
        run.deadline = run.started + spec.timeout
        box.runs[rid] = run
        heapq.heappush(self.deadlines, (run.deadline, id(run), run))
        if run.stdin_w is not None:
            stdin_feed.feed(self.sel, run)

    def _start_warm(
        self,
        box: ServerBox,
        run: Run,
        ctx: stages.ChildContext,
        spec: ExecRequest,
        root: tuple[Any, ...],
        has_cgroups: bool,
    ) -> None:
        """Hand the run to a ready warm pool entry if one fits (``WarmPool.hand_over``); else it runs cold."""
        entry = self.pool.hand_over(box, run, ctx, spec, root, has_cgroups)
        if entry is None or entry.worker is None:
            return
        worker = entry.worker
        if entry.output:
            # The run's output is on the entry's own pipes: their read ends go to the app, before the reply.
            self._send(run.channel, {"id": run.rid, "op": "output", "fds": 2}, fds=self.pool.take_output(entry))
        run.warm, run.warm_kind = True, entry.kind.name
        run.worker, worker.run = worker, run
        self._hand_listener(run)

    def _box_cgroup(self, box: ServerBox, cgroup: cgroups.RunCgroup | None, *, made: bool) -> cgroups.RunCgroup | None:
        """A session box's exec: its memory cgroup beneath the box's.

        The box's is its first exec's box-level cgroup when that one is ``made`` already (a ready spare:
        no join on the critical path); otherwise the server makes the box's, and C moves beneath it.
        """
        if cgroup is None or cgroup.memory_dir is None or not box.session or box.memory_limit is None:
            return cgroup
        if box.memory_cgroup is None:
            try:
                if made:
                    box.memory_cgroup = self.cgroups.adopt(cgroup, box.memory_limit)
                if box.memory_cgroup is None:
                    box.memory_cgroup = self.cgroups.make_box(box.memory_limit)
            except OSError as exc:
                raise common.launch_error("box cgroup", exc) from None
        if os.path.dirname(cgroup.memory_dir) != box.memory_cgroup:
            # Made before its box was known (a generic spare, the box's first one taken): C moves itself.
            return self.cgroups.rehome(cgroup, box.memory_cgroup)
        return cgroup

    def _hand_listener(self, run: Run) -> None:
        """Give the run's proxy listener to the client if the exec has hosts; otherwise close it."""
        worker = run.worker
        if worker is None or worker.listener is None:
            return  # not arrived yet: _read_worker calls again when it does
        fd, worker.listener = worker.listener, None
        if run.spec.proxy and not run.done:
            self._send(run.channel, {"id": run.rid, "op": "listener", "fds": 1}, fds=[fd])
        else:
            common.close_fd(fd)

    def _worker_failure(self, worker: Worker) -> str:
        """Why a worker stopped taking jobs: wait for it and read its report."""
        worker.kill()
        if not worker.reaped:
            with contextlib.suppress(ChildProcessError):
                _, worker.status = os.waitpid(worker.pid, 0)
            worker.reaped = True
        self._read_worker(worker)
        if worker.error is not None:
            return f"exec setup failed at {describe_failure(worker.error)}"
        return f"the worker exited before taking the job (status {worker.status})"

    @staticmethod
    def _send_job(worker: Worker, ctx: stages.ChildContext) -> None:
        fds = [ctx.stdout, ctx.stderr, *([ctx.stdin] if ctx.stdin is not None else [])]
        limits_set = worker.limits == (ctx.memory_bytes, ctx.max_processes) and not ctx.joins
        frame = protocol.encode(dict(ctx.job(), fds=len(fds), limits_set=limits_set))
        worker.sock.setblocking(True)  # the worker reads at once; a large argv may need a moment
        try:
            sent = socket.send_fds(worker.sock, [frame], fds)
            if sent < len(frame):
                worker.sock.sendall(frame[sent:])
        finally:
            worker.sock.setblocking(False)

    def _fork_weak(self, ctx: stages.ChildContext) -> Worker:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            ctx.report_fd = theirs.fileno()
            pid = os.fork()
            if pid == 0:
                stages.weak_child_main(ctx)
        finally:
            theirs.close()
        return self._adopt(pid, ours)

    def kill(self, run: Run) -> None:
        """Kill the run's worker (a timeout, a kill or its box closing); its report or exit ends the run."""
        if run.done or run.worker is None:
            return
        run.worker.kill()
        if self.isolation == "weak":
            weak.sweep(run, self.workers, root=self.root, wait=False)

    def _on_worker_sock(self, worker: Worker) -> None:
        self._read_worker(worker)
        run = worker.run
        if run is not None and not run.done and run.code_status is not None and self.isolation == "namespace":
            self._finish_run(run)  # B reported after killing and reaping the whole tree

    def _read_worker(self, worker: Worker) -> None:
        """Read what B or C reported: setup errors, and C's wait status."""
        while worker.sock_open:
            try:
                data, fds = protocol.receive(worker.sock)
            except BlockingIOError:
                return
            except (OSError, protocol.ProtocolError):
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
            except protocol.ProtocolError:
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
        common.close_fd(worker.pidfd)
        common.close_fd(worker.listener)
        worker.listener = None
        self.workers.pop(worker.pid, None)
        self.spares.forget(worker)
        self.pool.gone(worker)
        if worker.run is None and not worker.discarded and not self._stopping():
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
            self.cgroups.remove(worker.cgroup, defer=self.isolation == "namespace" and not self._stopping())
            worker.cgroup = None

    def _finish_run(self, run: Run, *, reply: bool = True) -> None:
        if run.done:
            return
        run.done = True
        ended = time.monotonic()
        if self.isolation == "weak":
            weak.sweep(run, self.workers, root=self.root, wait=True)
        run.box.runs.pop(run.rid, None)
        if run.pool_key is not None:
            self.pool.finished(run.pool_key)
        stdin_feed.close(self.sel, run)
        oom = run.cgroup is not None and cgroups.Cgroups.oom_killed(run.cgroup)
        if reply and not (run.killed and run.box.closing):
            error = run.error
            if error is not None and not (run.killed or run.timed_out):
                msg = f"exec setup failed at {describe_failure(error)}"
                # Before C's execve, or in B before it forked C, the code did not run; past that, who knows.
                ran = False if error.get("ran") is False else None
                # The stage and errno too: the driver tells a program the box may not execute (EACCES at execve, a
                # mistake no retry fixes) from a launcher that failed.
                failed = {"id": run.rid, "ok": False, "kind": "launcher", "error": msg, "ran": ran}
                self._send(run.channel, {**failed, "stage": error.get("stage"), "errno": error.get("errno")})
            else:
                self._send(run.channel, runs.result(run, oom, ended))
                self._collect_after(run)  # a one-shot box's /out, with no request to wait for
        self._maybe_finish_close(run.box)
