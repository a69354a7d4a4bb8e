"""The one boundary between the driver and the e2b SDK: what any SDK failure becomes, said once.

As httpx maps httpcore's exceptions at one place (``httpx/_transports/default.py``, ``map_httpcore_exceptions``),
every call the driver makes to the SDK runs inside ``with provider("what it does", box):``. A ``SandboxError``
(the driver's own, raised inside) passes through unchanged, and so does a cancel. Any other exception becomes
MAIN-SANDBOX-0006 with E2B's reason, cut and with every secret redacted, and what to check (``OUTAGE_REMEDY``).
A session's request that failed at the plan's cap instead gets the cap's answer (``Lifetimes.cap_reached``).
The calls that must never raise (a kill, a clean-up) use ``best_effort``, which logs the kind of failure only.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence

import httpx
from e2b.exceptions import AuthenticationException, NotFoundException, RateLimitException, ServiceBusyException
from mainsdk.driver import DRIVER_UNAVAILABLE, EgressRule, SandboxError

from mainsdk_e2b.box import E2BBox

log = logging.getLogger("mainsdk.e2b")

# What every MAIN-SANDBOX-0006 of this driver ends with (Capabilities.outage_remedy, the README's promise).
OUTAGE_REMEDY = "check E2B's status and the API key (sandbox.e2b.key, default secret:E2B_API_KEY)"
# The SDK's exceptions, in the words a user reads first; anything else is named by its kind.
KINDS: tuple[tuple[type[BaseException], str], ...] = (
    (AuthenticationException, "authentication failed (check sandbox.e2b.key)"),
    (RateLimitException, "rate limited"),
    (ServiceBusyException, "the service is busy"),
    (NotFoundException, "the sandbox is gone"),
)
REASON_CHARS = 200


class ProviderErrors:
    """The boundary: ``with errors("read a file", box):`` around each SDK call (see the module's docstring).

    ``secrets`` gives the values no message may hold (the API key); ``at_cap`` answers, for a box, the error to
    raise instead when its failure came at the plan's cap (or None).
    """

    def __init__(
        self, secrets: Callable[[], Iterable[str | None]], at_cap: Callable[[E2BBox], SandboxError | None]
    ) -> None:
        self._secrets = secrets
        self._at_cap = at_cap

    @contextlib.contextmanager
    def __call__(self, what: str, box: E2BBox | None = None, *, egress: Sequence[EgressRule] = ()) -> Iterator[None]:
        """Run the block; map whatever the SDK raised in it (see the class)."""
        try:
            yield
        except SandboxError:
            raise
        except Exception as exc:  # noqa: BLE001 - the one place any SDK failure becomes the driver's 0006
            raise self.unavailable(what, exc, box, egress=egress) from None

    @contextlib.contextmanager
    def best_effort(self, what: str, box: E2BBox | None = None) -> Iterator[None]:
        """Run the block; a failure in it is logged by its kind (never its text, which may hold a value) and dropped."""
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - a clean-up must not hide the error that led to it
            where = f" of sandbox {box.sandbox_id}" if box is not None else ""
            log.warning("e2b: could not %s%s (%s)", what, where, type(exc).__name__)

    def unavailable(
        self, what: str, exc: BaseException, box: E2BBox | None = None, *, egress: Sequence[EgressRule] = ()
    ) -> SandboxError:
        """MAIN-SANDBOX-0006 with the provider's reason and what to check, never a secret; the cap's answer at it."""
        if box is not None:
            capped = self._at_cap(box)
            if capped is not None:
                return capped
        return SandboxError(DRIVER_UNAVAILABLE, f"E2B could not {what}: {self.reason(exc, egress)}; {OUTAGE_REMEDY}")

    def reason(self, exc: BaseException, egress: Sequence[EgressRule] = ()) -> str:
        """E2B's reason for ``exc``: its kind in words, then its text, redacted, cut between words."""
        label = next((text for kind, text in KINDS if isinstance(exc, kind)), None)
        if label is None and "sandbox was not found" in str(exc):
            # E2B's proxy answers 502 "The sandbox was not found" for a sandbox it lost (e2b-dev/infra
            # packages/shared/pkg/proxy/template/sandbox_not_found.go), not a 404.
            label = "the sandbox is gone"
        if label is None:
            label = "unreachable" if isinstance(exc, (OSError, httpx.TransportError)) else type(exc).__name__
        detail = " ".join(str(exc).split())
        # Neither the key nor an egress header's value, should an answer ever repeat one (E2B's never do): redacted
        # before the cut, so no cut leaves part of one.
        values = (*self._secrets(), *(v for rule in egress for h in rule.headers for v in (h.value, h.secret_value)))
        for value in values:
            if value:
                detail = detail.replace(value, "[redacted]")
        return f"{label}: {cut_at_word(detail, REASON_CHARS)}" if detail else label


def cut_at_word(text: str, limit: int) -> str:
    """``text``, or its first words within ``limit`` characters and an ellipsis: never a word cut in two."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    return (head.rsplit(" ", 1)[0] if " " in head else head) + " …"
