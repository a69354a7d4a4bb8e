"""How long an E2B sandbox lives: the plan's cap, measured from its start, and keeping it alive without ever
shortening it.

E2B's API has two calls that move a sandbox's end (e2b-dev/infra ``packages/api/internal/handlers``):

- ``POST /sandboxes/{id}/timeout`` (the SDK's ``set_timeout``) calls ``KeepAliveFor(..., allowShorter=true)``
  (``sandbox_timeout.go``): the end becomes ``now + asked`` even when that is sooner. A worker that took a
  session over and asked for its own, smaller, limits would cut short a session its opener had extended.
- ``POST /sandboxes/{id}/refreshes`` ``{duration}`` calls ``KeepAliveFor(..., allowShorter=false)``
  (``sandbox_refresh.go``; at least ``SandboxTimeoutDefault``, 15 s): an end later than ``now + duration`` is
  kept as it is (``orchestrator/keep_alive.go``: ``ErrCannotShortenTTL`` answers 204 and changes nothing).

So the driver only ever refreshes. Both hold the end to ``start + MaxLengthHours`` (``getMaxAllowedTTL``) and
answer 400 "Max instance length exceeded" past it. The e2b SDK (2.63) has no method for refreshes: the call is
its generated client's (``e2b.api.client.api.sandboxes.post_sandboxes_sandbox_id_refreshes``), with the
sandbox's own connection settings, and its failures raised as the SDK raises ``set_timeout``'s.
"""

from __future__ import annotations

import math
import time

import attrs
from e2b.api import handle_api_exception
from e2b.api.client.api.sandboxes import post_sandboxes_sandbox_id_refreshes
from e2b.api.client.models import SandboxRefreshRequest
from e2b.api.client_async import get_api_client
from e2b.connection_config import ConnectionConfig
from e2b.exceptions import NotFoundException
from mainsdk.driver import BoxGone, BoxSpec, SandboxError

from mainsdk_e2b.box import E2BBox
from mainsdk_e2b.provider import ProviderErrors

# A sandbox outlives its deadline by this much at most if the driver itself dies: E2B kills it then.
SANDBOX_MARGIN = 60
# A command gets a refresh of the sandbox's lifetime only when less than its timeout and this is left.
KEEP_ALIVE_SLACK = 10
# A session's request that fails this close to the plan's cap failed because E2B ended the sandbox there.
CAP_SLACK = 5.0
# sandbox.SandboxTimeoutDefault: a refresh of less is one of this long (sandbox_refresh.go).
MIN_REFRESH = 15


async def refresh(box: E2BBox, seconds: int) -> None:
    """``POST /sandboxes/{id}/refreshes {duration: seconds}``: the end is pushed to ``now + seconds``, never sooner."""
    config = ConnectionConfig(**box.sandbox.connection_config.get_api_params())
    answer = await post_sandboxes_sandbox_id_refreshes.asyncio_detailed(
        box.sandbox_id, client=get_api_client(config), body=SandboxRefreshRequest(duration=seconds)
    )
    if answer.status_code == 404:
        raise NotFoundException(f"Sandbox {box.sandbox_id} not found")
    if answer.status_code >= 300:
        raise handle_api_exception(answer)


@attrs.frozen
class Lifetimes:
    """The team's cap (``max_length`` seconds from a sandbox's start, and the setting that says so) and the
    keep-alives that respect it."""

    max_length: int
    plan: str

    def lifetime(self, spec: BoxSpec) -> int:
        """Seconds a box is created (or kept) for: its idle time and a command's timeout, plus the margin; never past
        the cap (a create asking more is a 400, handlers/timeout_helper.go validateAndParseTimeout)."""
        return min(math.ceil((spec.idle or 0) + spec.limits.timeout) + SANDBOX_MARGIN, self.max_length)

    def cap_text(self) -> str:
        """``1 h from its start, sandbox.e2b.plan: base``."""
        return f"{self.max_length / 3600:g} h from its start, {self.plan}"

    def cap_reached(self, box: E2BBox) -> BoxGone:
        """The session's sandbox reached the plan's cap: it is over (0008, not retryable), and why."""
        return BoxGone(
            f"E2B ends a sandbox {self.cap_text()}, and this session's sandbox {box.sandbox_id} reached it "
            "(for longer sessions: a plan with a longer maximum, sandbox.e2b.plan or sandbox.e2b.max_hours)"
        )

    def check_cap(self, box: E2BBox) -> None:
        """Refuse a request to a sandbox past the plan's cap: E2B has ended it (keep_alive.go, the evictor)."""
        if time.monotonic() >= box.cap_at:
            raise self.cap_reached(box)

    def at_cap(self, box: E2BBox) -> SandboxError | None:
        """The cap's answer for a request of ``box`` that failed within ``CAP_SLACK`` of it, else None."""
        return self.cap_reached(box) if time.monotonic() >= box.cap_at - CAP_SLACK else None

    async def keep_alive(self, box: E2BBox, timeout: float, provider: ProviderErrors) -> None:
        """Push the sandbox's end back only when a command of ``timeout`` could outlive it; else no request.

        A command longer than the sandbox's own lifetime (core's cell kernel: no deadline of its own) counts as
        one lifetime: it is kept alive by what the session sends it next (a write, a cell's input). The driver
        asks for no more than is left before the cap, and knows the end it gets; a box whose end is the cap
        needs no more asking.
        """
        await self._last(box, min(timeout, box.lifetime - SANDBOX_MARGIN), box.lifetime, provider)

    async def outlive(self, box: E2BBox, seconds: float, provider: ProviderErrors) -> None:
        """Make sure the sandbox lives ``seconds`` more, and its margin: a transfer of that deadline ends first."""
        await self._last(box, seconds, SANDBOX_MARGIN, provider)

    async def _last(self, box: E2BBox, needed: float, then: int, provider: ProviderErrors) -> None:
        now = time.monotonic()
        if box.expires >= box.cap_at or box.expires - now >= needed + KEEP_ALIVE_SLACK:
            return
        wanted, left = math.ceil(needed + then), math.floor(box.cap_at - now)
        if left <= 0:
            raise self.cap_reached(box)
        with provider("keep the sandbox alive", box):
            await refresh(box, max(min(wanted, left), MIN_REFRESH))
        # A refresh never shortens: the end is at least this (up to the cap: E2B ends it there).
        box.expires = max(box.expires, now + wanted if wanted < left else box.cap_at)
