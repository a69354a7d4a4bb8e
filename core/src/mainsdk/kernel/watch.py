"""How the supervisor sees, in ``/proc``, that the executor's waiter is back at its own wait for a request.

The waiter is the one thread of the executor that reads requests on R: the main thread of the Python and bash
executors, a worker thread of node's own (its main thread runs the cells' event loop, and no cell's code ever
runs on the worker). Before any cell runs, the supervisor finds it blocked in read(R) in
``/proc/<executor>/task/<tid>/syscall`` and keeps its whole signature: the syscall, R, and for Python and bash
the stack and instruction pointers. Code a cell left that reads R on that thread (a signal handler, a bash
trap) runs nested in the executor's own frames, so it is never at the stack pointer measured here; a rewritten
loop is the cell owning its interpreter, as the package docstring says. The waiter's own ``rchar``
(``/proc/<executor>/task/<tid>/io``) must have grown since a request was written before that cell can be over,
so a thread that took the request instead ends nothing. Where the box refuses these files to a parent (Yama's
ptrace_scope 2 or 3) the supervisor falls back to its probe (see the supervisor).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

TASKS_PATH = "/proc/{}/task"  # the executor's threads: one of them (its waiter) is watched
WARM_UP = 32  # probes the waiter takes before its wait is measured (Python's call sites specialize after a few)
IDLE_WAIT = 2.0  # how long a request waits for the waiter to be back at its wait before it is not sent
NODE = ("javascript", "typescript")

Signature = tuple[int, ...]


def signature(raw: bytes) -> Signature | None:
    """What a ``syscall`` file says its thread is blocked in: (syscall number, its first argument, the stack
    pointer, the instruction pointer), or None while it runs (or a field is not a number)."""
    fields = raw.split()
    try:
        return int(fields[0]), int(fields[1], 16), int(fields[7], 16), int(fields[8], 16)
    except (ValueError, IndexError):
        return None


class Watch:
    """The executor's waiter, as ``/proc`` shows it: found once it said it is ready, then read at each look."""

    def __init__(self, pid: int, req_fd: int, language: str) -> None:
        self.pid, self.req_fd, self.language = pid, req_fd, language
        self.syscall: int | None = None  # the waiter's syscall file
        self.io: int | None = None  # its io file (None: no I/O accounting here, the signature alone)
        self.main: int | None = None  # node's main thread's syscall file (its waiter is another thread)
        self.idle: Signature = ()
        self.taken_from: int | None = None  # the waiter's rchar when the running cell's request was written

    def find(self) -> bool:
        """Whether the waiter was found blocked in read(R) (then kept); an OSError when /proc refuses the
        supervisor its child's threads (the probe watch then)."""
        tasks = TASKS_PATH.format(self.pid)
        for tid in sorted(os.listdir(tasks), key=int):
            try:
                fd = os.open(f"{tasks}/{tid}/syscall", os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # a thread that just ended
            state = signature(os.pread(fd, 256, 0))
            if state is None or state[1] != self.req_fd:
                os.close(fd)
                continue
            self.syscall, self.idle = fd, state
            try:
                self.io = os.open(f"{tasks}/{tid}/io", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self.io = None
            if self.language in NODE:
                self.main = os.open(f"{tasks}/{self.pid}/syscall", os.O_RDONLY | os.O_CLOEXEC)
            return True
        return False

    def warm_up(self, probe: Callable[[], None], taken: Callable[[], bool], pump: Callable[[float], None]) -> bool:
        """Let the waiter take WARM_UP probes, then measure its wait: Python's specializing interpreter rewrites
        the call into read after a few runs (a shallower C stack from then on), so the wait kept is the one every
        later cell ends in. Node's waiter runs no cell's code, but its JIT moves its stack pointer: there the
        thread, the syscall and R are the signature. False when the waiter never came back."""
        if self.language in NODE:
            self.idle = self.idle[:2]
            return True
        for _ in range(WARM_UP):
            probe()
            end = time.monotonic() + 30.0
            while not (taken() and self._state()[:2] == self.idle[:2]):
                if time.monotonic() > end:
                    return False
                pump(0.0002)
        self.idle = self._state()
        return True

    def _state(self) -> Signature:
        assert self.syscall is not None
        return signature(os.pread(self.syscall, 256, 0)) or ()

    def waiting(self) -> bool:
        """Whether the waiter is blocked in read(R) exactly where it was measured (an OSError: unreadable)."""
        return self._state()[: len(self.idle)] == self.idle

    def ready(self) -> bool:
        """Whether a request may go: the waiter at its wait and, in node, the main thread's event loop idle in a
        system call (its wait for events), not a callback a cell left busy there or sitting in read(R) (where it
        would take the request): a request then would never run."""
        if not self.waiting():
            return False
        if self.main is None:
            return True
        state = signature(os.pread(self.main, 256, 0))
        return state is not None and state[:2] != self.idle[:2]

    def read_bytes(self) -> int | None:
        """How many bytes the waiter has read so far (``rchar``), or None without I/O accounting."""
        if self.io is None:
            return None
        try:
            first = os.pread(self.io, 256, 0).split(b"\n", 1)[0]
            return int(first.split()[1]) if first.startswith(b"rchar:") else None
        except (OSError, ValueError, IndexError):
            return None

    def sent(self) -> None:
        """A request is about to be written: what the waiter has read so far is noted."""
        self.taken_from = self.read_bytes()

    def took_request(self) -> bool:
        """Whether the waiter has read since the request was written (it, not another thread, took it)."""
        if self.taken_from is None:
            return True
        now = self.read_bytes()
        return now is not None and now > self.taken_from
