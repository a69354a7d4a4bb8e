"""The launcher client's errors and call budgets: apart so the box and its exec stream share them without a cycle."""

from __future__ import annotations

import errno
from typing import Any

# Backstop: how long past its own work a call waits for the server before the server counts as stalled.
_CALL_GRACE = 3.0
_TRANSFER_RATE = 256 << 20  # bytes a second a call's payload is allowed (well below what a socket and tmpfs do)


class LauncherError(Exception):
    """The launcher failed: setup of a run, the server itself, or the protocol. The message says what and where.

    ``ran``: False when the launcher says the request did nothing (for an exec: no code ran); None otherwise.
    """

    def __init__(
        self, message: str, *, ran: bool | None = None, stage: str | None = None, error_number: int | None = None
    ) -> None:
        super().__init__(message)
        self.ran = ran
        self.stage = stage  # where a run's setup failed (``execve``), when the launcher says
        self.errno = error_number  # and the error number it failed with


class OpenFailed(LauncherError):
    """A one-shot box's open or one of its files failed, found by its exec: the command did not run.

    ``cause`` is what ``open_box`` or ``write_file`` would have raised (``OSError``, ``ValueError``
    or ``LauncherError``).
    """

    def __init__(self, cause: Exception) -> None:
        super().__init__(f"the box did not open: {cause}")
        self.cause = cause


def _error_from(header: dict[str, Any], what: str) -> Exception:
    message = str(header.get("error", "unknown error"))
    kind = header.get("kind")
    if kind == "value":
        return ValueError(message)
    if kind == "os":
        err = header.get("errno")
        return OSError(err if isinstance(err, int) else errno.EIO, message)
    stage, err = header.get("stage"), header.get("errno")
    return LauncherError(
        f"{what}: {message}",
        ran=False if header.get("ran") is False else None,
        stage=stage if isinstance(stage, str) else None,
        error_number=err if isinstance(err, int) else None,
    )
