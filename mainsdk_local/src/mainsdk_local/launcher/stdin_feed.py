"""A run's stdin fed from its exec's payload as the pipe takes it, never blocking the loop: apart from the
executor, which only starts and ends the feeding."""

from __future__ import annotations

import contextlib
import os
import selectors

from . import common
from .runs import Run


def feed(sel: selectors.BaseSelector, run: Run) -> None:
    """Write what the pipe takes of the run's stdin; wait for it to be writable, or close it once all is in."""
    fd = run.stdin_w
    if fd is None:
        return
    try:
        while run.stdin_data:
            run.stdin_data = run.stdin_data[os.write(fd, run.stdin_data[: 1 << 16]) :]
    except BlockingIOError:
        try:
            sel.get_key(fd)
        except KeyError:
            sel.register(fd, selectors.EVENT_WRITE, lambda mask: feed(sel, run))
        return
    except OSError:
        pass  # the code closed its stdin: fine
    close(sel, run)


def close(sel: selectors.BaseSelector, run: Run) -> None:
    """Close the run's stdin pipe (all fed, or the run ended) and drop what was left to feed."""
    if run.stdin_w is None:
        return
    with contextlib.suppress(KeyError, ValueError):
        sel.unregister(run.stdin_w)
    common.close_fd(run.stdin_w)
    run.stdin_w = None
    run.stdin_data = memoryview(b"")
