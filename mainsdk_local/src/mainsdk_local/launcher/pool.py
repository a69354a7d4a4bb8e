"""The warm pool: boxes made ahead, each in its own fresh worker, waiting for one run.

A pool entry is a worker like any other (B, pid 1 of a fresh pid namespace with fresh
cgroups; C in its own mount, net, ipc, uts and user namespaces, root pivoted, uid dropped,
seccomp), made before any run asked for it, on a *pool folder* instead of a run's box. What C
does once it is in that box, and what it is told at hand-off, is the entry's *kind*
(``Kind``): the kind "python" (``pool_python.py``) has exec'd an interpreter that waits for
the code. Each entry is its own worker, never a fork of a shared zygote, and serves one run:
its box is destroyed with that run. The kinds a server offers, in order of preference, are
``pool_kinds.KINDS``.

The server has one ``WarmPool``: it keeps the entries and the demand for each key, whatever the
kind (sizing, demand, idle shrinking and slot accounting are shared by all kinds), warms a new
entry when the server's loop is idle (``warm``, with the executor's ``spawn_worker``), and hands a
run over to a ready one (``hand_over``, called by the executor as a run starts).

How a run takes one (``WarmPool.hand_off``, the same for every kind):

- Its ``/work``, ``/out`` and ``/tmp`` are mount points of a pool folder made *shared* in the server's
  mount namespace (C's copies are slaves of it). The server binds the run's box folders over
  them; the mounts propagate into C's namespace, and C changes into ``/work`` again. So
  whatever C did before the hand-off never saw the run's (or a session's) files: it was in an
  empty box.
- The box's files take the entry's uid (each entry has a box slot of its own); only a
  one-shot run's box before its first exec qualifies (its files were written by the app, not
  by code), with a bounded number of entries.
- The cgroup limits are written by the server; the kind's job carries the rest (rlimits, the
  run's descriptors, the deadline B starts counting from: the time limit counts from hand-off).
- The job goes on a control socket only C holds, and C closes it before any code runs.

What falls back to the cold path (never a different-looking run): an exec no kind takes (see
each kind), a session's box or a box that already ran something, a box with more than
``MAX_REHOMED_ENTRIES`` files, and no ready entry.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import os
import selectors
import socket
import struct
import sys
import termios
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from . import cgroups, common, linux, stages
from .boxes import make_tmp
from .runs import set_limits

if TYPE_CHECKING:
    from . import rootfs
    from .runs import ExecRequest, Run, ServerBox, SpawnWorker, Worker
    from .sockets import SocketBound

# A one-shot box's files are given to the pooled interpreter's uid one by one: past this many, run cold.
MAX_REHOMED_ENTRIES = 256
# The server keeps each key it has seen for a while: a key whose third part (a program, its flags, start-up
# variables: LANG, LC_*, LD_*, ...) is longer than this runs cold and is never kept, and at most MAX_KINDS keys
# are kept (the least recently asked goes), so runs with ever new, large start-up variables cannot grow the
# server without bound (100 runs with a new 100 KB LD_PRELOAD each grew it by 11 MB before).
MAX_KIND_BYTES = 4096
MAX_KINDS = 64
# An idle entry nobody took for this long is dropped, and so is a key nobody asked for (the default).
IDLE_SECONDS = 60.0
# Demand is the most runs of a key in flight at once over this window.
DEMAND_WINDOW = 10.0

# (kind name, root, what else the kind's C depends on): entries of one key are interchangeable.
PoolKey = tuple[str, tuple[Any, ...], tuple[Any, ...]]


class Kind:
    """One kind of pool entry: which execs it takes, what its C does in the box, what hand-off sends.

    A subclass sets ``name`` and the four methods. C reports on its control socket (the
    descriptor ``start`` gets) ``b"R"`` once it waits for its job, or ``b"D"`` when this key can
    never serve a run looking like the cold path's (the key is then marked broken: its execs run
    cold); anything else, or EOF, drops the entry.
    """

    name = ""
    own_output = False
    """C's stdout and stderr are pipes made at warm time, not the run's (node cannot ``dup2``): the server keeps
    their read ends on the entry, checks at hand-off that nothing was written on them (else the key is broken:
    it runs cold), and sends them to the app in an ``output`` frame before the run's reply. ``configure`` finds
    their write ends in ``ctx.stdout`` and ``ctx.stderr``, for C."""

    def key(self, spec: ExecRequest, root: tuple[Any, ...]) -> tuple[PoolKey, Any] | None:
        """``(key, plan)`` for an exec this kind can take (``plan``: what ``job`` needs of it); None otherwise.

        The key's first two items are ``self.name`` and ``root``; the third holds everything else C's setup
        depends on (a program, its flags, start-up variables), so that entries of one key are interchangeable.
        """
        raise NotImplementedError

    def configure(self, ctx: stages.ChildContext, key: PoolKey) -> None:
        """Fill in what C needs beyond the root, the pool folder and the uid (set already), before the fork."""

    def start(
        self, ctx: stages.ChildContext, control_fd: int, report_fd: int, timeout_w: int, stage: list[str]
    ) -> NoReturn:
        """C, once in the pool folder's box as the code's C would be (``warm_main``): wait for the job.

        ``control_fd``: the control socket; ``report_fd``: B's report socket (close-on-exec, above 9);
        ``timeout_w``: the pipe on which C tells B the run's timeout at hand-off, as the cold path's C does.
        """
        raise NotImplementedError

    def job(self, ctx: stages.ChildContext, plan: Any) -> tuple[bytes, list[int]]:
        """The bytes and descriptors sent on the control socket at hand-off, from the run's ``ctx``."""
        raise NotImplementedError

    def feed(self, entry: Entry, data: bytes) -> str:
        """What C said on its control socket (``data``; empty: EOF): "ready", "dirty", "gone" or "wait" (more to come).

        ``entry.said`` keeps what a kind's own messages left unparsed between calls.
        """
        if data == b"R" and not entry.ready:
            return "ready"
        return "dirty" if data == b"D" else "gone"

    def stats(self, idle: list[Entry]) -> dict[str, int]:
        """The kind's own figures about its idle entries ``idle``, for ``WarmPool.stats`` (prefixed with its name)."""
        return {}

    def fits(self, entry: Entry, spec: ExecRequest, plan: Any) -> bool:
        """Whether ``entry`` may serve this exec (its key matches already). An entry given something of earlier
        runs ahead (``entry.ahead``, from ``ctx.ahead``) holds it in its memory: it may serve only a run that
        brings exactly that itself, or the run could read another run's data."""
        return not entry.ahead


class Entry:
    """One pool entry: its kind, worker, control socket, pool folder and box slot."""

    def __init__(self, kind: Kind, key: PoolKey, slot: int, uid: int, gid: int, folder: str) -> None:
        self.kind = kind
        self.key = key
        self.slot = slot
        self.uid = uid
        self.gid = gid
        self.folder = folder  # shared mount; work/, out/ and tmp/ in it are the entry's /work, /out and /tmp
        self.worker: Worker | None = None
        self.control: socket.socket | None = None  # the server's end; C holds the other
        self.ready = False  # C said it waits for its job
        self.taken = False
        self.given = False  # a box took its uid (and holds its slot until destroyed)
        self.born = time.monotonic()
        self.bound: list[str] = []  # box folders bound over work/, out/ and tmp/ at hand-off
        self.output: list[int] = []  # an own_output kind's: the read ends of C's stdout and stderr (the server's)
        self.said = b""  # what C said on its control socket that its kind has not parsed yet
        self.ahead = b""  # what its C was given of earlier runs before any run (``ChildContext.ahead``)


class WarmPool:
    """The warm pool of a server: its entries, of every kind, keyed by kind, root and what else the kind's C
    depends on; the demand for each key; and the server's side of it (an entry warmed, a run handed over).

    ``size`` caps the idle entries kept at once, all kinds together (0: no pool). ``kinds``: the
    kinds offered, most preferred first. ``selector``: the server's, on which entries' control sockets are
    watched; ``templates``: its root templates; ``boxes``: its open boxes by slot (an entry takes a free slot,
    from the top); ``root``: the server runs as root (C switches to the entry's uid). ``sockets``, the
    per-box socket bound where this machine has one, is set by the server's setup.
    """

    def __init__(
        self,
        size: int,
        base: str,
        kinds: tuple[Kind, ...],
        *,
        selector: selectors.BaseSelector,
        templates: rootfs.Templates,
        boxes: Mapping[int, ServerBox],
        root: bool,
    ) -> None:
        self.size = size
        self.kinds = kinds
        self.by_name = {kind.name: kind for kind in kinds}
        self.idle_seconds = IDLE_SECONDS
        self.base = base
        self.sel = selector
        self.templates = templates
        self.boxes = boxes
        self.root = root
        self.sockets: SocketBound | None = None
        self.entries: list[Entry] = []
        self.dead: list[Entry] = []  # reaped entries whose folders are still to be unmounted and removed
        self.held: set[int] = set()  # slots of entries, and of boxes that took one (until they close)
        # key: [last seen, in flight, peak, peak time, last miss, rate, rate time] (rate: runs, halved each window)
        self.demand: dict[PoolKey, list[float]] = {}
        # Keys whose C said it can never serve a run (b"D"): always cold. The MAX_KINDS latest are kept.
        self.broken: dict[PoolKey, None] = {}
        # Refills owed to runs that reported: each report of a run of a pooled kind may warm one entry at
        # once, even while other runs go on (under steady concurrency the loop is never quiet, and the pool
        # would drain); anything more waits for a quiet moment, as spares do. At most ``size`` are owed.
        self.refills = 0
        self.hits = 0
        self.kind_hits: dict[str, int] = {}
        self.misses = 0
        self._count = 0

    def keys(self, spec: ExecRequest, root: tuple[Any, ...]) -> list[tuple[PoolKey, Any]]:
        """``(key, plan)`` of each kind that can take ``spec``, most preferred first, broken keys left out."""
        found = (kind.key(spec, root) for kind in self.kinds)
        return [
            item
            for item in found
            if item is not None and item[0] not in self.broken and len(repr(item[0][2])) <= MAX_KIND_BYTES
        ]

    # -- demand --------------------------------------------------------------

    def asked(self, key: PoolKey) -> None:
        """A run of ``key`` starts (warm or cold): its demand counts."""
        now = time.monotonic()
        if key not in self.demand and len(self.demand) >= MAX_KINDS:
            # Forget the least recently asked key with no run in flight (a key in flight is one run at least).
            resting = [(seen[0], k) for k, seen in self.demand.items() if seen[1] <= 0]
            if resting:
                del self.demand[min(resting, key=lambda item: item[0])[1]]
        seen = self.demand.setdefault(key, [now, 0.0, 0.0, now, -DEMAND_WINDOW, 0.0, now])
        seen[0] = now
        seen[1] += 1
        seen[5], seen[6] = self.rate(key, now) + 1, now
        if seen[1] >= seen[2] or now - seen[3] > DEMAND_WINDOW:
            seen[2], seen[3] = seen[1], now

    def rate(self, key: PoolKey, now: float) -> float:
        """How many runs of ``key`` were asked for lately: each counts 1, halved every DEMAND_WINDOW since."""
        seen = self.demand.get(key)
        return seen[5] * 0.5 ** ((now - seen[6]) / DEMAND_WINDOW) if seen is not None else 0.0

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

    def wanted(self) -> PoolKey | None:
        """The key of the next interpreter to warm, or None. Drops idle ones first."""
        self.remove_dead()  # called as the loop turns, never while a turn's replies are still to go out
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
                # until those idle out (a kind used once must not keep the kind in use cold for a minute); and
                # only from a kind that keeps another idle entry, or one asked for half as often lately: more
                # kinds in turn than the pool holds would otherwise evict each other's last entry before any is
                # taken (8 kinds in turn, pool 4: no warm run, twice the launcher's CPU of no pool at all).
                asked = {e.key: self.demand.get(e.key, [-IDLE_SECONDS])[0] for e in idle}
                held = {k: sum(1 for e in idle if e.key == k) for k in asked}
                rate = self.rate(key, now)
                older = [
                    e for e in idle if asked[e.key] < seen[0] and (held[e.key] > 1 or 2 * self.rate(e.key, now) <= rate)
                ]
                if not older:
                    return None
                victim = min(older, key=lambda e: (asked[e.key], e.born))
                self.discard(victim)
                idle.remove(victim)
            return key if self.free_slot() is not None else None
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
        found = {
            "capacity": self.size,
            "ready": ready,
            "warming": warming,
            "hits": self.hits,
            "misses": self.misses,
            "kinds": len(self.demand) + len(self.broken),  # keys the server keeps (at most MAX_KINDS each)
        }
        for kind in self.kinds:  # and per kind: "<kind>_ready", "<kind>_warming", "<kind>_hits"
            mine = [e for e in idle if e.kind is kind]
            found[f"{kind.name}_ready"] = sum(1 for e in mine if e.ready)
            found[f"{kind.name}_warming"] = sum(1 for e in mine if not e.ready)
            found[f"{kind.name}_hits"] = self.kind_hits.get(kind.name, 0)
            found.update({f"{kind.name}_{name}": value for name, value in kind.stats(mine).items()})
        return found

    # -- entries -------------------------------------------------------------

    def warm(self, key: PoolKey, slot: int, uid: int, gid: int, spawn_worker: SpawnWorker) -> Entry:
        """Start warming an entry for ``key`` in box slot ``slot`` (uid ``uid``), forked by ``spawn_worker``."""
        self._count += 1
        folder = os.path.join(self.base, f"pool-{self._count}")
        entry = Entry(self.by_name[key[0]], key, slot, uid, gid, folder)
        os.mkdir(folder, 0o711)
        try:
            linux.mount(folder, folder, None, linux.MS_BIND)
            linux.mount(None, folder, None, linux.MS_SHARED)
            for name in ("work", "out"):
                os.mkdir(os.path.join(folder, name), 0o755)
            # A /tmp and HOME like a box's, as the cold path's C would find them (empty), until the run's box is
            # bound over it at hand-off.
            make_tmp(folder, uid, gid, tmpfs=True)
        except OSError:
            self._remove_folder(entry)
            raise
        self.held.add(slot)
        try:
            entry.worker = self._spawn_entry(entry, spawn_worker)
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
            data = entry.control.recv(1 << 16)
        except BlockingIOError:
            return "wait"
        except OSError:
            data = b""
        state = entry.kind.feed(entry, data)
        if state == "ready":
            entry.ready = True
        if state == "dirty":
            self.mark_broken(entry.key)
        return state

    def mark_broken(self, key: PoolKey) -> None:
        """``key`` can never serve a run looking like the cold path's: its execs run cold."""
        self.broken[key] = None
        while len(self.broken) > MAX_KINDS:
            del self.broken[next(iter(self.broken))]  # the oldest: tried once more if it comes back

    def take(self, key: PoolKey, fits: Callable[[Entry], bool] = lambda entry: True) -> Entry | None:
        """A ready entry for ``key`` that ``fits`` the run (it leaves the pool), or None."""
        for entry in self.entries:
            if entry.key == key and entry.ready and not entry.taken and fits(entry):
                worker = entry.worker
                if worker is None or worker.reaped or not worker.sock_open:
                    continue
                entry.taken = True
                return entry
        return None

    def hand_off(self, entry: Entry, box: ServerBox, ctx: stages.ChildContext, plan: Any, has_cgroups: bool) -> None:
        """Give ``entry`` the run: box, limits, job. OSError: it cannot (then run cold)."""
        if box.uid != entry.uid:
            rehome(box, entry.uid, entry.gid)
            box.uid, box.gid = entry.uid, entry.gid
            box.pool_slot, entry.given = entry.slot, True  # the box holds the slot (its uid) until destroyed
        for name in common.BOX_FOLDERS:
            target = os.path.join(entry.folder, name)
            linux.mount(os.path.join(box.path, name), target, None, linux.MS_BIND)
            entry.bound.append(target)
        if has_cgroups:
            cgroups.configure_cgroup(
                ctx.memory_dir, ctx.memory_version, ctx.pids_dir, ctx.memory_bytes, ctx.max_processes
            )
        if entry.kind.own_output and (len(entry.output) != 2 or any(unread(fd) for fd in entry.output)):
            self.mark_broken(entry.key)  # it printed while starting: no cold run shows that
            raise OSError(errno.EPROTO, f"a pool entry of kind {entry.kind.name} printed before its run; it runs cold")
        frame, fds = entry.kind.job(ctx, plan)
        if entry.control is None:
            raise OSError(errno.EPIPE, "the pool entry's control socket is closed")
        control, entry.control = entry.control, None
        self._unwatch(control)
        try:
            control.setblocking(True)
            sent = socket.send_fds(control, [frame], fds)
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
            entry.worker.kill()

    def gone(self, worker: Worker) -> Entry | None:
        """``worker`` was reaped: if it was an entry's, unmount and remove its folder."""
        entry = next((e for e in self.entries if e.worker is worker), None)
        if entry is None:
            return None
        self.entries.remove(entry)
        self._close_control(entry)
        for fd in self.take_output(entry):
            common.close_fd(fd)
        if not entry.given:
            self.held.discard(entry.slot)  # no box holds its uid
        # Its unmounts (four, of shared mounts) wait for the pool's next idle pass: B's exit often comes in the
        # same loop turn as its report, and done here they came before the run's result and /out went out.
        self.dead.append(entry)
        return entry

    def remove_dead(self) -> None:
        """Unmount and remove the folders of entries whose workers were reaped (see ``gone``)."""
        while self.dead:
            self._remove_folder(self.dead.pop())

    def box_destroyed(self, box: ServerBox) -> None:
        if box.pool_slot is not None:
            self.held.discard(box.pool_slot)
            box.pool_slot = None

    def shutdown(self) -> None:
        self.remove_dead()
        for entry in list(self.entries):
            if entry.control is not None:
                entry.control.close()
                entry.control = None
            for fd in self.take_output(entry):
                common.close_fd(fd)
            self._remove_folder(entry)
        self.entries.clear()

    @staticmethod
    def take_output(entry: Entry) -> list[int]:
        """An own_output entry's read ends (the caller closes them, or sends them to the app)."""
        fds, entry.output = entry.output, []
        return fds

    def _close_control(self, entry: Entry) -> None:
        if entry.control is not None:
            self._unwatch(entry.control)
            entry.control.close()
            entry.control = None

    @staticmethod
    def _remove_folder(entry: Entry) -> None:
        for target in [*entry.bound, entry.folder]:
            with contextlib.suppress(OSError):
                linux.umount(target)
        entry.bound = []
        for name in ("work", "out", f"tmp/{common.HOME_IN_TMP}", "tmp", ""):
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(entry.folder, name) if name else entry.folder)

    def free_slot(self) -> int | None:
        """A box slot for a pool entry (its uid), from the top: boxes take theirs from the bottom."""
        return next(
            (s for s in range(common.SLOTS_PER_SERVER - 1, -1, -1) if s not in self.boxes and s not in self.held),
            None,
        )

    def _spawn_entry(self, entry: Entry, spawn_worker: SpawnWorker) -> Worker:
        """Fork a worker whose C enters a box on ``entry``'s pool folder and runs its kind (see ``warm_main``)."""
        kind, root = entry.kind, entry.key[1]
        ctx = stages.ChildContext()
        ctx.template = self.templates.get(*root)
        ctx.box_dir = entry.folder
        ctx.uid, ctx.gid = entry.uid, entry.gid
        ctx.drop_uid = self.root
        output: list[int] = []  # own_output: stdout's and stderr's read ends, then their write ends
        if kind.own_output:
            out_r, out_w = os.pipe2(os.O_CLOEXEC)
            try:
                err_r, err_w = os.pipe2(os.O_CLOEXEC)
            except OSError:
                common.close_fd(out_r)
                common.close_fd(out_w)
                raise
            output = [out_r, err_r, out_w, err_w]
            ctx.stdout, ctx.stderr = out_w, err_w
        kind.configure(ctx, entry.key)
        entry.ahead = ctx.ahead
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fd = theirs.fileno()
        try:
            # No limits while it warms (B writes none: the fresh cgroups' own, unlimited), never the last run's:
            # those may be too tight for the entry's own start (a node under pids.max 2 cannot make its threads,
            # and the pool warmed, lost and rewarmed it without end, 40% of a CPU, until another run came). Only
            # the server's own program runs in it before hand-off, and hand-off writes the run's limits.
            worker = spawn_worker(
                None,
                child=lambda report_fd, timeout_w: warm_main(ctx, kind, fd, report_fd, timeout_w),
                keep=frozenset({fd, *output[2:]}),
            )
        except BaseException:
            ours.close()
            for end in output[:2]:
                common.close_fd(end)
            raise
        finally:
            theirs.close()
            for end in output[2:]:
                common.close_fd(end)  # C holds the only write ends: EOF once it and whatever it started are gone
        ours.setblocking(False)
        entry.control = ours
        entry.output = output[:2]
        self.sel.register(ours, selectors.EVENT_READ, lambda mask: self._on_control_readable(entry))
        return worker

    def _on_control_readable(self, entry: Entry) -> None:
        state = self.on_control(entry)
        if state == "dirty":
            print(
                f"mainsdk-local launcher: a pool entry of kind {entry.kind.name} cannot be made for this key; "
                "it runs cold",
                file=sys.stderr,
            )
        if state in ("dirty", "gone"):
            self.discard(entry)

    def _unwatch(self, sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(sock)

    def hand_over(
        self,
        box: ServerBox,
        run: Run,
        ctx: stages.ChildContext,
        spec: ExecRequest,
        root: tuple[Any, ...],
        has_cgroups: bool,
    ) -> Entry | None:
        """Hand the exec, the first of a one-shot box, to a ready pool entry if one fits; None: it runs cold.

        The kinds that can take it are tried in order of preference; the demand counts for the first. The
        entry returned has the run's job; the caller makes its worker the run's (the executor).
        """
        spec.disk_bytes = box.disk_bytes  # what the cold path's C sets as RLIMIT_FSIZE: part of some kinds' keys
        found = self.keys(spec, root) if self.size and not box.session and box.execs == 1 else []
        if not found:
            return None
        preferred = found[0][0]
        self.asked(preferred)
        run.pool_key = preferred
        entry: Entry | None = None
        plan: Any = None
        for key, plan in found:

            def fits(e: Entry, plan: Any = plan) -> bool:
                return e.kind.fits(e, spec, plan)

            if (entry := self.take(key, fits)) is not None:
                break
        if entry is None:
            # Ready entries of these keys that do not fit hold an earlier run's text (``Kind.fits``) this run has not:
            # that streak ended, so they go, and the refills hold nothing of anyone's.
            for key, plan in found:
                for e in [e for e in self.entries if e.key == key and e.ready and not e.taken]:
                    if not e.kind.fits(e, spec, plan):
                        self.discard(e)
        if entry is None or entry.worker is None:
            self.misses += 1
            self.missed(preferred)
            return None
        set_limits(ctx, run, entry.worker.cgroup, spec)
        run.started = time.monotonic()
        try:
            if self.sockets is not None and box.uid != entry.uid:
                self.sockets.set_bound(
                    entry.slot, box.max_sockets, fresh=True
                )  # the bound follows the box to its new uid
            self.hand_off(entry, box, ctx, plan, has_cgroups)
        except OSError as exc:
            if exc.errno:  # errno 0: too many files in the box to give to the entry's uid, an expected cold run
                print(f"mainsdk-local launcher: warm hand-off failed, running cold: {exc}", file=sys.stderr)
            self.discard(entry)
            self.misses += 1
            ctx.uid, ctx.gid = box.uid, box.gid  # the box may have taken the interpreter's uid before it failed
            return None
        except BaseException:
            self.discard(entry)  # taken and never handed a run: it must not wait forever
            raise
        self.hits += 1
        self.kind_hits[entry.kind.name] = self.kind_hits.get(entry.kind.name, 0) + 1
        return entry


def unread(fd: int) -> int:
    """How many bytes wait in the pipe ``fd`` (FIONREAD)."""
    return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])


def rehome(box: ServerBox, uid: int, gid: int) -> None:
    """Give ``box``'s work/, out/ and tmp/ and everything in them to ``uid``; OSError past MAX_REHOMED_ENTRIES.

    Only for a box no code has run in: what is there the app wrote. Links are changed, never followed.
    """
    todo = [os.path.join(box.path, name) for name in common.BOX_FOLDERS]
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


def warm_main(ctx: stages.ChildContext, kind: Kind, control_fd: int, report_fd: int, timeout_w: int) -> NoReturn:
    """C of a pool entry (after B forked it): enter the pool folder's box as the code's C would, then the kind's part.

    ``ctx`` holds the root, the pool folder (as ``box_dir``), uid and gid and what the kind set in
    ``Kind.configure``; nothing of any run.
    """
    gc.disable()
    stage = ["prepare"]
    try:
        report_fd = fcntl.fcntl(report_fd, fcntl.F_DUPFD_CLOEXEC, 10)  # out of the low numbers a kind may use
        stages.code_prepare()
        stages.code_enter_root(ctx, stage)
        stage[0] = "pool mounts"
        for name in common.BOX_FOLDERS:
            linux.mount(
                None, "/" + name, None, linux.MS_SLAVE
            )  # receive the run's box from the server; send nothing back
        stages.code_enter_user(ctx, stage)
        kind.start(ctx, control_fd, report_fd, timeout_w, stage)
    except BaseException as exc:  # noqa: BLE001 - whatever it is, report it and exit
        stages.report_failure(report_fd, stage[0], exc)
    os._exit(127)
