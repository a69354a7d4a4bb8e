"""A started E2B box as the driver tracks it, and the turn each of its requests waits for."""

from __future__ import annotations

import asyncio
import math

import attrs
from e2b import AsyncSandbox


@attrs.define
class E2BBox:
    """A started box: the E2B sandbox, and what the driver tracks of it."""

    id: str
    sandbox: AsyncSandbox = attrs.field(repr=False)
    sandbox_id: str
    expires: float  # monotonic time E2B will kill it at unless told otherwise
    lifetime: int  # seconds E2B keeps it after a refresh
    # Monotonic time of the plan's cap: E2B ends the sandbox then, whatever it is told (``lifetime.Lifetimes``).
    cap_at: float = math.inf
    archive_limit: int | None = None  # a run: its command archives out/ up to this many bytes; None in a session
    archive_pid: int | None = None  # the pid (start event) of the command whose archive ``collect`` reads
    stdin_files: int = 0
    stopped: bool = False
    python: str | None = None  # the interpreter of the box's packages (``packages.ENV_PYTHON``), when it has some
    kernel_site: str | None = None  # the folder of the cell kernel's packages, once installed (``KERNEL``)
    # The box has egress headers: E2B's proxy ends TLS for their hosts, so every command trusts E2B_CA_BUNDLE.
    egress: bool = False
    # A session's requests go one at a time, in an order set by core's calls, never by network timing: core
    # starts the cell kernel's exec as a task and writes the first cell at once, so without this the kernel's
    # input upload and the cell's write race (and a replay, strict about one sandbox's order, sees them
    # swapped). Each hook that sends yields once, then waits for its turn (``_in_turn``, a FIFO lock) until its
    # request is answered (for a command: until envd's start event).
    in_order: asyncio.Lock = attrs.field(factory=asyncio.Lock, repr=False)
    # The most bytes one read of the box's files may bring back (limits.files): its read's deadline grows with it.
    files_limit: int = 0


async def in_turn(box: E2BBox) -> Turn:
    """Wait for this call's turn to send to ``box`` (see ``E2BBox.in_order``); release it with ``with``."""
    await asyncio.sleep(0)  # the same number of steps for every hook: the order is the event loop's, fixed
    await box.in_order.acquire()
    return Turn(box.in_order)


def raise_if_cancelled() -> None:
    """Raise the cancel this task was asked for, should a library below have swallowed it (an HTTP call's)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class Turn:
    """A box's turn to send, held until released (``with`` or ``release``); releasing twice is harmless."""

    def __init__(self, lock: asyncio.Lock) -> None:
        self._lock: asyncio.Lock | None = lock

    def release(self) -> None:
        """Let the box's next request go."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def __enter__(self) -> Turn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
