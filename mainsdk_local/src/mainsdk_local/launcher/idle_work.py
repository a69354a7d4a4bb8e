"""What the server prepares when its loop is idle (spare workers, warm interpreters) and when: apart from the loop,
a policy of its own."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from . import common
from .execs import Executor
from .pool import WarmPool
from .runs import ServerBox
from .spares import FAILED_SPARE_PAUSE

# A spare is prepared only once every run started this long ago (or earlier) or has reported; see IdleWork.wanted.
SPARE_QUIET = 0.25
# How long after its last box closed the server still keeps a spare ready: one-shot runs leave no box open
# between them, and without a spare each would fork and set up its worker (cgroups, namespaces) itself.
SPARE_LINGER = 60.0


class IdleWork:
    """The next spare or warm interpreter to prepare (``Server`` has one), in namespace mode only.

    ``boxes``: the server's open boxes by slot; ``stopping()``: the server is shutting down. ``configure`` sets what
    the server's setup found (namespace mode, the first box uid); ``last_box_closed`` is when the last box went.
    """

    def __init__(
        self,
        executor: Executor,
        pool: WarmPool,
        boxes: dict[int, ServerBox],
        *,
        root: bool,
        stopping: Callable[[], bool],
    ) -> None:
        self.executor = executor
        self.pool = pool
        self.boxes = boxes
        self.root = root
        self.stopping = stopping
        self.namespace = False
        self.uid_base = 0
        self.last_box_closed = -SPARE_LINGER  # monotonic time the last box was destroyed (see wanted)

    def configure(self, *, namespace: bool, uid_base: int) -> None:
        """What the server's setup found: whether it runs in namespace mode, and its first box uid."""
        self.namespace = namespace
        self.uid_base = uid_base

    def wanted(self) -> tuple[float, str] | None:
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
        if self.stopping() or not self.namespace:
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

    def pending(self) -> bool:
        """Whether some work is due now."""
        wanted = self.wanted()
        return wanted is not None and wanted[0] == 0.0

    def do(self) -> None:
        """Prepare the next exec's worker."""
        wanted = self.wanted()
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
