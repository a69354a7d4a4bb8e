"""A sandbox's lifetime: its lease at create, extensions within the plan's cap, the wait until it runs.

Vercel stops a sandbox at its timeout (the create's, plus every ``extend-timeout``), and never lets it live past
the plan's maximum duration from its start (``config.PLAN_MAX_DURATION``): a session is extended by a whole
lease when less than one command's is left, and only up to the cap. An extension only ever lengthens (its
``duration`` is added to the timeout), so a take-over (another worker's ``mainsdk_driver_reconnect``) never shortens
a session's end: it reads the session's start and timeout and extends, within the cap, only when little is left.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from mainsdk.driver import DRIVER_UNAVAILABLE, NO_SESSION, BoxGone, SandboxError

from mainsdk_vercel._api import VercelApi
from mainsdk_vercel._box import SESSIONS, VercelBox

# Room past a command's own limit before Vercel's own timeout stops the VM: files in, collect, stop.
MARGIN = 60.0
INSTALL_TIMEOUT = 300.0  # seconds for installer to install a set offline in the box (pandas + matplotlib: well under)
# A new session is polled until ``running``, as the official Python client does (vercel-sandbox 0.10.0,
# ``_internal/service.py``, ``_wait_for_ready_sandbox``: every 0.5 s; running is ready, stopped, failed and
# aborted are terminal, pending, stopping and snapshotting are polled again).
READY_POLL = 0.5
READY = "running"
TERMINAL = frozenset({"stopped", "failed", "aborted"})
TRANSITIONAL = frozenset({"pending", "stopping", "snapshotting"})
# Seconds before a session's cap at which an ended stream or a killed command is taken for Vercel's stop at the
# cap (its clock and ours differ by the create's round trip, and a stop is not instant).
CAP_SLACK = 5.0


class Lifetimes:
    """The leases of one driver's sandboxes: ``cap`` seconds at most from a start, named by ``cap_setting``."""

    def __init__(self, api: VercelApi, project: str | None, cap: float, cap_setting: str) -> None:
        self._api = api
        self._project = project
        self.cap = cap
        self.cap_setting = cap_setting

    def lease(self, box: VercelBox, installs: bool) -> float:
        """The create's timeout (seconds): one command's lease (two for a session), and the install's time."""
        needed = self.lifetime(box, box.spec.limits.timeout) + (INSTALL_TIMEOUT if installs else 0.0)
        return min(needed * (2 if box.session else 1), self.cap)  # Vercel refuses a timeout past the plan's cap

    def taken_over(self, box: VercelBox, session: Mapping[str, Any]) -> None:
        """The clock of a session another worker created (``GET /v2/sandboxes/{name}``'s ``session``).

        The cap counts from its ``startedAt`` (ms since the epoch), and its lease ends ``timeout`` ms after it:
        the create's timeout plus every extension (validators.ts ``Session.timeout``; ``extend-timeout`` adds
        to it). So the taking worker extends only when less than a lease is left, and never past the cap: an
        extension sized as if the session ended now would ask past the cap for a session its opener extended
        near it, which Vercel refuses. Without those fields, it ends now: the first use extends it.
        """
        now = time.monotonic()
        started_at, timeout = session.get("startedAt"), session.get("timeout")
        box.started = box.expires = now
        if isinstance(started_at, (int, float)):
            box.started = now - max(time.time() - started_at / 1000, 0.0)
            if isinstance(timeout, (int, float)):
                box.expires = max(box.started + timeout / 1000, now)

    def started(self, box: VercelBox, lease: float) -> None:
        """Note a create's answer: the cap counts from now, and the lease ends ``lease`` seconds on."""
        box.started = time.monotonic()
        box.expires = box.started + lease

    def lifetime(self, box: VercelBox, command_timeout: float) -> float:
        """Seconds the sandbox must live from now: this command, the session's idle time, and room to collect."""
        return command_timeout + (box.spec.idle or 0.0) + MARGIN

    async def ensure(self, box: VercelBox) -> None:
        """Refuse a stopped box; extend a session's timeout when less than one command's lease is left.

        A one-shot box's lease already covers its one command, files in and out, and the stop.
        """
        async with box.lock:
            if box.gone or box.session_id is None:
                # Gone for good: a session on it is over (0008, core closes it), not an outage to retry forever.
                raise BoxGone(f"the Vercel sandbox of box {box.id} has stopped")
            needed = self.lifetime(box, box.spec.limits.timeout)
            end = box.started + self.cap  # the plan's cap: no extension reaches past it
            if box.session and time.monotonic() >= end - CAP_SLACK:
                box.gone = True  # Vercel stops it at the cap; nothing sent to it could run any more
                raise BoxGone(self.cap_message(box, advice=False))
            # Extend by a whole lease, in a fixed amount, so the requests (and cassettes) do not depend on timing,
            # and extensions stay rare; near the cap, only up to it.
            if box.session and box.expires - time.monotonic() < needed and box.expires < end:
                extra = min(needed, end - box.expires)
                await self._api.json(
                    "POST",
                    f"{SESSIONS}/{box.session_id}/extend-timeout",
                    "extend-timeout",
                    json_body={"duration": int(extra * 1000)},
                    idempotent=False,
                )
                box.expires += extra

    def cap_message(self, box: VercelBox, advice: bool = True) -> str:
        """What a session at the plan's cap says; core adds "open a new session" to a BoxGone's itself."""
        text = (
            f"the Vercel sandbox of {box.id} reached the most a sandbox may live on this plan, {human(self.cap)} "
            f"from its start ({self.cap_setting}), and Vercel stopped it: its files, variables and processes are "
            "gone (set sandbox.vercel.plan or max_duration if your plan allows longer)"
        )
        return text + ("; open a new session" if advice else "")

    def at_cap(self, box: VercelBox) -> bool:
        """Whether the box's session is at (or past) the plan's cap, so Vercel has stopped it or is stopping it."""
        return box.started > 0 and time.monotonic() >= box.started + self.cap - CAP_SLACK

    def capped(self, box: VercelBox) -> SandboxError:
        """The error for a command Vercel cut at the cap: not retryable (the session is over), and the box gone."""
        box.gone = True
        return SandboxError(NO_SESSION, self.cap_message(box), status=404, retryable=False, ran=True)

    async def until_running(self, box: VercelBox, status: Any) -> None:
        """Wait until the new session is ``running``: Vercel may answer the create while the VM still boots.

        Polled with ``GET /v2/sandboxes/{name}?projectId=...&resume=false``, the request the official
        Python client polls with, first at once and then every ``READY_POLL`` seconds, within the run's
        time limit. A session that ends (stopped, failed, aborted) or never runs in that time is a
        retryable 0006 naming its status; the caller stops the sandbox.
        """
        limit = box.spec.limits.timeout
        deadline = time.monotonic() + limit
        first = True
        while status != READY:
            if status in TERMINAL:
                raise self._api.error(
                    "create", None, cause=f"the sandbox {box.name} ended as {status!r} before it was running"
                )
            if status not in TRANSITIONAL:
                raise self._api.error("create", None, cause=f"the sandbox {box.name} has no known status ({status!r})")
            if time.monotonic() >= deadline:
                raise SandboxError(
                    DRIVER_UNAVAILABLE,
                    f"Vercel Sandbox {box.name} was still {status!r}, not running, {limit:g}s after its create "
                    "(the run's time limit); it was stopped and nothing ran. Check Vercel's status, then retry "
                    "(or give the run a longer timeout)",
                    status=503,
                    retryable=True,
                    ran=False,
                )
            if not first:
                await asyncio.sleep(min(READY_POLL, max(deadline - time.monotonic(), 0.0)))
            first = False
            answer = await self._api.read_sandbox(str(box.name), str(self._project))
            session = answer.get("session") if isinstance(answer, dict) else None
            if not isinstance(session, dict):
                raise self._api.error("get", None, cause="the answer names no session")
            status = session.get("status")


def human(seconds: float) -> str:
    """``45 min``, ``24 h``, ``8 s``: a duration for messages."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
