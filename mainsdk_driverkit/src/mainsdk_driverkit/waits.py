"""Long waits said as they happen: what is being built or fetched, why, and how long it took (INFO).

A package set's first build (a minute), the cell kernel's packages, the TypeScript set npm installs: each is said
when it starts and when it ends, on the ``mainsdk`` logger, so an app that logs INFO (and the ``mainsdk`` command,
which shows a progress display on a terminal) is never left with silence. The records carry ``mainsdk_wait``
(``"start"`` or ``"end"``) and ``mainsdk_wait_id`` for a display to pair them; the text says it all without them.
Core never waits so: only drivers (and the kit's own installers) say it, so it is the kit's.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Iterator

log = logging.getLogger("mainsdk")
_ids = itertools.count(1)


@contextlib.contextmanager
def long_wait(what: str, why: str) -> Iterator[None]:
    """Say ``what`` is starting and ``why`` (INFO), then that it ended, with its seconds, or that it failed."""
    ident = next(_ids)
    log.info("mainsdk: %s: %s", what, why, extra={"mainsdk_wait": "start", "mainsdk_wait_id": ident})
    started = time.monotonic()
    outcome = "failed after"
    try:
        yield
        outcome = "done in"
    finally:
        seconds = time.monotonic() - started
        log.info(
            "mainsdk: %s: %s %.1f s", what, outcome, seconds, extra={"mainsdk_wait": "end", "mainsdk_wait_id": ident}
        )
