"""Transfers to and from a box, with deadlines that grow with their bytes.

In e2b 2.63 a buffered upload's request timeout is its whole-request deadline, and a streamed read given an
explicit ``request_timeout`` is documented to get it as its total-transfer deadline (``e2b/sandbox_async/
filesystem/filesystem.py`` ``write_files``, ``read``; through the pyqwest transport a per-request timeout is a
total deadline). A fixed 30 s would need 14 Mbit/s for a 53.8 MB package set. (Measured against the stand-in:
the upload is bounded so; a read was not, streamed or not: tests/test_transfers.py.) So each transfer gets
the request's own bound (``floor``) plus the time its bytes take at ``MIN_RATE``, at most what is left before
the plan's cap (E2B ends the sandbox there, whatever the transfer). An upload is of known size, and the sandbox
is first kept alive through its deadline (``Lifetimes.outlive``, a refresh that never shortens); a read is given
the time for the most it may bring back (the out folder's archive, ``limits.files``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import attrs

from mainsdk_e2b.box import E2BBox
from mainsdk_e2b.lifetime import Lifetimes
from mainsdk_e2b.provider import ProviderErrors

REQUEST_TIMEOUT = 30.0
# The slowest link a transfer is given time for: 1 Mbit/s (a poor uplink, a congested mobile link). The 53.8 MB
# package set then has 430 s, the cell kernel's 10.5 MB set 84 s.
MIN_RATE = 125_000  # bytes per second


def transfer_deadline(nbytes: int, floor: float, left: float) -> float:
    """Seconds a transfer of ``nbytes`` may take: ``floor`` plus the bytes at ``MIN_RATE``, at most ``left`` (the
    seconds before the sandbox's cap), never under ``floor``."""
    return max(floor, min(floor + nbytes / MIN_RATE, left))


@attrs.frozen
class Transfers:
    """Uploads and read deadlines for the driver's boxes: ``floor`` is the request timeout of every other call."""

    floor: float
    lifetimes: Lifetimes
    provider: ProviderErrors

    def deadline(self, box: E2BBox, nbytes: int) -> float:
        """The deadline of a transfer of ``nbytes`` to or from ``box``, now."""
        return transfer_deadline(nbytes, self.floor, box.cap_at - time.monotonic())

    async def upload(self, box: E2BBox, entries: Sequence[dict[str, Any]], what: str) -> None:
        """Write ``entries`` (``{"path", "data"}``) in one multipart request, whatever envd version answers; the
        sandbox kept alive through its deadline first. 0006 saying ``what`` could not be done, should E2B fail."""
        if not entries:
            return
        deadline = self.deadline(box, sum(len(entry["data"]) for entry in entries))
        await self.lifetimes.outlive(box, deadline, self.provider)
        with self.provider(what, box):
            await box.sandbox.files.write_files(
                entries,  # type: ignore[arg-type]
                use_octet_stream=False,
                request_timeout=deadline,
            )
