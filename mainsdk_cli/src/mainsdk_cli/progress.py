"""A progress display for the long waits the library says (``mainsdk_driverkit.waits``), on a terminal only.

While a package set builds or the kernel's packages download, the command shows a spinner with what is being
built and why (``rich``'s status display), then one line with how long it took. Off a terminal (a pipe, a file,
CI), nothing is shown: the command's stderr stays the code's and the command's own messages.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any, TextIO

LOGGER = "mainsdk"


class WaitDisplay(logging.Handler):
    """Shows each long wait's start as a live status and its end as a line; ignores every other record."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(logging.INFO)
        from rich.console import Console  # imported only for a terminal

        self.console = Console(file=stream, stderr=stream is sys.stderr, highlight=False)
        self._lock = threading.Lock()
        self._statuses: dict[object, Any] = {}

    def emit(self, record: logging.LogRecord) -> None:
        """Start or end the status of a wait record (its ``mainsdk_wait`` attribute)."""
        kind = getattr(record, "mainsdk_wait", None)
        if kind is None:
            return
        ident = getattr(record, "mainsdk_wait_id", None)
        text = record.getMessage().removeprefix("mainsdk: ")
        with self._lock:
            if kind == "start":
                status = self.console.status(text, spinner="dots")
                status.start()
                self._statuses[ident] = status
            else:
                status = self._statuses.pop(ident, None)
                if status is not None:
                    status.stop()
                self.console.print(f"mainsdk: {text}", markup=False)

    def close(self) -> None:
        """Stop any status still shown (the command is ending)."""
        with self._lock:
            for status in self._statuses.values():
                status.stop()
            self._statuses.clear()
        super().close()


def show_waits(stream: TextIO | None = None) -> WaitDisplay | None:
    """Attach the display to the ``mainsdk`` logger when ``stream`` (stderr) is a terminal; None otherwise."""
    stream = stream if stream is not None else sys.stderr
    if not stream.isatty():
        return None
    display = WaitDisplay(stream)
    logger = logging.getLogger(LOGGER)
    logger.addHandler(display)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)  # the waits are INFO; this command's own process, not an app's
    return display
