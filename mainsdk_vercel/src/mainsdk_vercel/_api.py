"""Vercel Sandbox REST API (v3 create, v2 sessions), spoken with httpx: requests, retries and errors.

Every failure becomes ``SandboxError(DRIVER_UNAVAILABLE)`` (MAIN-SANDBOX-0006,
503, retryable) carrying Vercel's status, code and message, and never the
token: messages are built from the answer's body, and the token is scrubbed
from them all the same, in case a proxy echoes a header back.

What httpx raises (and a stream's line that is not JSON) becomes a ``VercelError`` at one place,
``VercelApi.errors``, as httpx maps httpcore's exceptions at one place (``httpx._transports.default``,
``map_httpcore_exceptions``): every request and every stream, and the reading of a stream's answer, pass
through it, and nothing else in the driver catches an httpx exception.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
from mainsdk.driver import DRIVER_UNAVAILABLE, SandboxError

log = logging.getLogger("mainsdk.vercel")

DEFAULT_BASE_URL = "https://api.vercel.com"
ATTEMPTS = 3  # one request and at most two retries
MAX_RETRY_AFTER = 10.0  # seconds: a longer Retry-After is reported as an outage instead of blocking the run
# Connect and write are bounded; read is not for streams and long polls: a quiet command is not a dead one.
TIMEOUT = httpx.Timeout(60.0, connect=10.0)
STREAM_TIMEOUT = httpx.Timeout(60.0, connect=10.0, read=None)

_REASONS = {
    401: "the token was refused; check the token (sandbox.vercel.token)",
    402: "the Vercel account cannot pay for more sandboxes (billing)",
    403: "the token may not use this project or team; check sandbox.vercel.project and team",
    404: "not found",
    410: "the sandbox has stopped",
    422: "the sandbox cannot take this now",
    429: "too many sandboxes or requests (rate limit)",
}
# Vercel's API answers a token it does not know with 403 and ``invalidToken`` (providers.md, checked
# 2026-11-30), more often than with 401: that 403 is about the token, not the project or team.
INVALID_TOKEN = "the token is not valid (revoked, expired or mistyped); check the token (sandbox.vercel.token)"


class VercelError(SandboxError):
    """MAIN-SANDBOX-0006 from a Vercel request, with Vercel's own status and error code (None when absent)."""

    def __init__(
        self, message: str, vercel_status: int | None, vercel_code: str | None = None, *, broken: bool = False
    ) -> None:
        super().__init__(DRIVER_UNAVAILABLE, message, status=503, retryable=True)
        self.vercel_status = vercel_status
        self.vercel_code = vercel_code
        # No answer from Vercel: the connection failed, or a stream broke (or held a line that is not JSON)
        # on the way. Only such a failure is retried or followed; an answer is Vercel's word.
        self.broken = broken


class NotFound(VercelError):
    """A 404 from Vercel; a file read turns it into MAIN-SANDBOX-0008, anything else keeps it an outage."""


def session_ended(error: VercelError) -> bool:
    """Whether Vercel said the session is stopped or stopping, so a stop request is not needed.

    As the TypeScript SDK decides it (github vercel/sandbox,
    ``packages/vercel-sandbox/src/sandbox.ts``: ``isSandboxStoppedError`` is any
    410, ``isSandboxStoppingError`` a 422 with code ``sandbox_stopping``).
    Nothing else is proof: a 404 may name a command or a file
    (``command_not_found``, ``file_not_found``), so it still gets a stop.
    """
    status = error.vercel_status
    return status == 410 or (status == 422 and error.vercel_code == "sandbox_stopping")


class VercelApi:
    """One base URL, one token, one team: the requests the driver makes. Never logs or repeats the token."""

    def __init__(self, *, token: str, team: str | None, base_url: str, client: httpx.AsyncClient | None) -> None:
        self._token = token
        self._team = team
        self._base_url = base_url.rstrip("/")
        self._client = client
        self._owned: dict[int, httpx.AsyncClient] = {}  # per event loop: an AsyncClient belongs to one loop

    def _http(self) -> httpx.AsyncClient:
        if self._client is not None:
            return self._client
        loop = id(asyncio.get_running_loop())
        client = self._owned.get(loop)
        if client is None or client.is_closed:
            client = httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False)
            self._owned[loop] = client
        return client

    async def aclose(self) -> None:
        """Close the clients this object opened on the running loop (an injected client is the caller's)."""
        client = self._owned.pop(id(asyncio.get_running_loop()), None)
        if client is not None:
            await client.aclose()

    def _url(self, path: str) -> str:
        return self._base_url + path

    def _params(self) -> dict[str, str]:
        return {"teamId": self._team} if self._team else {}

    def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {"authorization": f"Bearer {self._token}", **(extra or {})}

    def clean(self, text: str) -> str:
        """``text`` with the token replaced, for messages."""
        return text.replace(self._token, "[token]") if self._token else text

    @contextmanager
    def errors(self, what: str) -> Iterator[None]:
        """The driver's one boundary for provider errors: httpx's failures as a broken ``VercelError``.

        Around every request and stream (and so around the reading of a stream's answer, which runs inside
        ``stream``): a network failure is ``network: <httpx exception>``, a stream line that is not JSON
        ``the stream broke``; both ``broken``. A ``VercelError`` passes as it is.
        """
        try:
            yield
        except httpx.TransportError as exc:
            raise self.error(what, None, cause=f"network: {type(exc).__name__}", broken=True) from None
        except json.JSONDecodeError:
            raise self.error(what, None, cause="the stream broke: a line is not JSON", broken=True) from None

    def error(
        self, what: str, status: int | None, body: bytes = b"", cause: str = "", *, broken: bool = False
    ) -> VercelError:
        """The MAIN-SANDBOX-0006 for a failed request: Vercel's status, code and message, and why."""
        detail = cause
        code: str | None = None
        invalid_token = False
        if body:
            try:
                parsed = json.loads(body)
            except ValueError:
                parsed = None
            err = parsed.get("error") if isinstance(parsed, dict) else None
            if isinstance(err, dict):
                code = str(err["code"]) if isinstance(err.get("code"), str) else None
                invalid_token = err.get("invalidToken") is True or code == "invalidToken"
                detail = f"{err.get('code', '')}: {err.get('message', '')}".strip(": ")
            elif not detail:
                detail = body[:200].decode("utf-8", "replace")
        reason = _REASONS.get(status or 0, "Vercel is unavailable" if (status or 500) >= 500 else "refused")
        if status == 403 and invalid_token:
            reason = INVALID_TOKEN
        head = f"Vercel Sandbox {what} failed" + (f" with {status}" if status else "")
        message = self.clean(f"{head}: {reason}" + (f" ({detail})" if detail else ""))
        cls = NotFound if status == 404 else VercelError
        return cls(message, status, code, broken=broken)

    async def request(
        self,
        method: str,
        path: str,
        what: str,
        *,
        json_body: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        query: Mapping[str, str] | None = None,
        idempotent: bool,
    ) -> httpx.Response:
        """Send one request and return its 2xx answer, read.

        A 429 is retried after its Retry-After (the server refused without
        acting, so even a create or a command is safe to send again); a 5xx or
        a network failure only when ``idempotent``.
        """
        for attempt in range(ATTEMPTS):
            last = attempt == ATTEMPTS - 1
            try:
                with self.errors(what):
                    answer = await self._http().request(
                        method,
                        self._url(path),
                        params={**self._params(), **(query or {})},
                        json=json_body,
                        content=content,
                        headers=self._headers(headers),
                    )
            except VercelError as exc:
                if exc.broken and idempotent and not last:
                    await asyncio.sleep(_backoff(attempt))
                    continue
                raise
            if answer.is_success:
                return answer
            wait = _retry_wait(answer, attempt, idempotent)
            if wait is None or last:
                raise self.error(what, answer.status_code, answer.content)
            log.info("Vercel Sandbox %s answered %s; retrying in %.1fs", what, answer.status_code, wait)
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    async def json(self, method: str, path: str, what: str, **kwargs: Any) -> Any:
        """``request``, with the answer parsed as JSON."""
        answer = await self.request(method, path, what, **kwargs)
        try:
            return answer.json()
        except ValueError:
            raise self.error(what, answer.status_code, cause="the answer is not JSON") from None

    async def read_sandbox(self, name: str, project: str) -> Any:
        """``GET /v2/sandboxes/{name}`` as vercel-sandbox's ``get_sandbox`` reads it: never resuming a stopped one."""
        return await self.json(
            "GET", f"/v2/sandboxes/{name}", "get", query={"projectId": project, "resume": "false"}, idempotent=True
        )

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        what: str,
        *,
        json_body: Any = None,
        query: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[httpx.Response]:
        """An answer to read as it comes, with no read timeout (logs, a command run with ``wait``). 2xx heads only.

        Sent once: a stream is a command's run or its logs, never retried here. What breaks while the caller
        reads it comes out of ``errors`` too: the caller reads inside this context.
        """
        for attempt in range(ATTEMPTS):
            with self.errors(what):
                async with self._http().stream(
                    method,
                    self._url(path),
                    params={**self._params(), **(query or {})},
                    json=json_body,
                    headers=self._headers(headers),
                    timeout=STREAM_TIMEOUT,
                ) as answer:
                    if not answer.is_success:
                        body = await answer.aread()
                        # A 429 is a refusal before acting: even a command is safe to send again, after the wait.
                        wait = _retry_wait(answer, attempt, idempotent=False) if answer.status_code == 429 else None
                        if wait is None or attempt == ATTEMPTS - 1:
                            raise self.error(what, answer.status_code, body)
                    else:
                        yield answer
                        return
            log.info("Vercel Sandbox %s answered 429; retrying in %.1fs", what, wait)
            await asyncio.sleep(wait)


def _backoff(attempt: int) -> float:
    return (0.25 * 2.0**attempt) * (1 + random.random() / 2)  # jitter, not a secret


def _retry_wait(answer: httpx.Response, attempt: int, idempotent: bool) -> float | None:
    """How long to wait before sending again, or None when this answer must not be retried."""
    status = answer.status_code
    if status == 429:
        raw = answer.headers.get("retry-after")
        if raw is None:
            return _backoff(attempt)
        try:
            wait = float(raw)
        except ValueError:
            return None  # an HTTP date: too far to reason about here; report it
        return wait if 0 <= wait <= MAX_RETRY_AFTER else None
    if status >= 500 and idempotent:
        return _backoff(attempt)
    return None
