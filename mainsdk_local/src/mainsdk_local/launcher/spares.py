"""Spare workers: B+C pairs prepared before an exec asks, so the namespace work is off its critical path.

There is one generic spare (namespaces and fresh cgroups made, C waiting for any
job), and one "hot" spare bound to the box, root and limits of the last exec in a
session's box, whose C has also entered that box's root already; it stays root
until its job comes, so nothing runs as the box's user between execs. A one-shot
run's box gets no hot spare: it runs one exec and closes, so one would be thrown
away unused. The server prepares spares only when no run has just started (see
``Server._spare_wanted``).
"""

from __future__ import annotations

import collections
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import common, stages

if TYPE_CHECKING:
    from . import cgroups, rootfs
    from .runs import ServerBox, Worker

# Generic spares kept ready, besides the hot one.
SPARES = 1
# A spare that replaces one nobody took waits until the latest exec is this old, so its
# preparation does not compete with a short run for the CPUs.
SPARE_DELAY = 0.03
# After a spare failed or died unused, wait this long before preparing the next.
FAILED_SPARE_PAUSE = 1.0

Spawn = Callable[["cgroups.Limits", "stages.ChildContext | None"], "Worker"]


class Spares:
    """The spare workers of a server, and what the next one should be.

    ``spawn(limits, bound)`` forks a worker (B writes ``limits`` ahead; a ``bound``
    C enters that box's root ahead; the executor's ``spawn_worker``). ``drop_uid``: the
    server is root, so C switches to the box's uid.
    """

    def __init__(self, spawn: Spawn, *, drop_uid: bool) -> None:
        self._spawn = spawn
        self._drop_uid = drop_uid
        self.generic: collections.deque[Worker] = collections.deque()
        self.hot: Worker | None = None
        self.hot_want: tuple[ServerBox, rootfs.TemplateKey, cgroups.Limits, str] | None = (
            None  # box, key, limits, template
        )
        self.not_before = 0.0  # after a spare failed, wait a moment before the next one
        self.last_start = 0.0
        self.last_limits: cgroups.Limits = None

    def wanted(self) -> tuple[float, str] | None:
        """(seconds until, "hot" or "generic") for the next spare to prepare; None when none.

        A spare that an exec took is replaced at once: that exec is already on its way, so
        forking now delays nobody, and a caller running execs back to back finds the next
        one ready. Replacing a hot spare for a different box waits until the latest exec is
        SPARE_DELAY old, so boxes used in turn do not churn spares.
        """
        now = time.monotonic()
        wait = max(0.0, self.not_before - now)
        want = self.hot_want
        if want is not None and not want[0].closing:
            hot = self.hot
            if hot is None:
                return (wait, "hot")
            if hot.bound != want[:2] or hot.limits != want[2]:
                return (max(wait, self.last_start + SPARE_DELAY - now), "hot")
        if len(self.generic) < SPARES:
            return (wait, "generic")
        return None

    def prepare(self, kind: str) -> None:
        """Prepare the next exec's worker (namespaces, cgroups; for a hot spare, its box)."""
        try:
            if kind == "generic":
                self.generic.append(self._spawn(self.last_limits, None))
                return
            assert self.hot_want is not None
            box, key, limits, template = self.hot_want
            if self.hot is not None:
                self.discard(self.hot)
            bound = stages.ChildContext()
            bound.template, bound.box_dir, bound.uid, bound.gid = template, box.path, box.uid, box.gid
            bound.drop_uid, bound.disk_bytes = self._drop_uid, box.disk_bytes
            bound.box_memory = box.memory_cgroup  # its cgroups go beneath the box's, made ahead
            self.hot = self._spawn(limits, bound)
            self.hot.bound = (box, key)
        except (OSError, common.RequestError) as exc:
            print(f"mainsdk-local launcher: spare worker: {exc}", file=sys.stderr)
            self.not_before = time.monotonic() + FAILED_SPARE_PAUSE

    def discard(self, worker: Worker) -> None:
        """Drop an unused spare: it exits when its socket closes, or is killed."""
        self.forget(worker)
        worker.discarded = True
        worker.kill()

    def forget(self, worker: Worker) -> None:
        """``worker`` is no spare any more (taken, discarded or dead)."""
        if worker is self.hot:
            self.hot = None
        if worker in self.generic:
            self.generic.remove(worker)

    def take(self, box: ServerBox, key: rootfs.TemplateKey, limits: cgroups.Limits) -> Worker:
        """The worker for an exec: the hot spare if it was made for exactly this, else a generic one.

        Ready spares first: one still preparing may be waiting out a cgroup join (an RCU
        grace period) that a ready one is past.
        """
        hot = self.hot
        fits = hot is not None and hot.bound == (box, key) and hot.limits == limits and not hot.reaped
        generic = next((w for w in self.generic if w.ready), None) or (self.generic[0] if self.generic else None)
        choice: Worker | None
        if fits and hot is not None and (hot.ready or generic is None or not generic.ready):
            choice, self.hot = hot, None
        elif generic is not None:
            choice = generic
            self.generic.remove(generic)
        else:
            choice = self._spawn(limits, None)  # with this exec's limits: C need not write them
        return choice

    def box_closing(self, box: ServerBox) -> None:
        """``box`` is closing: drop the hot spare bound to it (it holds the box's files in its mounts)."""
        if self.hot is not None and self.hot.bound is not None and self.hot.bound[0] is box:
            self.discard(self.hot)
        if self.hot_want is not None and self.hot_want[0] is box:
            self.hot_want = None
