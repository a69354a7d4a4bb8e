"""The error codes of the sandbox interface, as exceptions.

Every error a user can cause or meet carries the seed's code, an HTTP-style
status and whether a retry can help, so an app can map it to a response
without parsing the message. The message names what is at fault and the fix.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TypeVar

import attrs

INVALID_OPTION = "MAIN-SANDBOX-0001"
TIMEOUT = "MAIN-SANDBOX-0002"
MEMORY = "MAIN-SANDBOX-0003"
OUTPUT = "MAIN-SANDBOX-0004"
HOST_NOT_ALLOWED = "MAIN-SANDBOX-0005"
DRIVER_UNAVAILABLE = "MAIN-SANDBOX-0006"
COST = "MAIN-SANDBOX-0007"
NO_SESSION = "MAIN-SANDBOX-0008"
SECRET_NOT_ALLOWED = "MAIN-SANDBOX-0009"
UNSAFE_EVAL = "MAIN-SANDBOX-0010"
LOCAL_IN_PRODUCTION = "MAIN-SANDBOX-0011"
NETWORK_NOT_ALLOWED = "MAIN-SANDBOX-0012"
UNKNOWN_CONFIG_KEY = "MAIN-CONFIG-0003"

_STATUS = {
    INVALID_OPTION: 400,
    TIMEOUT: 408,
    MEMORY: 413,
    OUTPUT: 413,
    HOST_NOT_ALLOWED: 403,
    DRIVER_UNAVAILABLE: 503,
    COST: 402,
    NO_SESSION: 404,
    SECRET_NOT_ALLOWED: 403,
    LOCAL_IN_PRODUCTION: 400,
    NETWORK_NOT_ALLOWED: 403,
    UNKNOWN_CONFIG_KEY: 400,
}

# What MAIN-SANDBOX-0006 says to check when a driver does not say (``Capabilities.outage_remedy``).
DEFAULT_OUTAGE_REMEDY = "check that the driver's backend is up and reachable from this machine"

T = TypeVar("T")
_UNSAID = object()  # ``ran`` not given: nothing ran, unless core learns otherwise

# Which stop reason a run result carries for each limit code.
STOP_CODES = {"timeout": TIMEOUT, "memory": MEMORY, "output": OUTPUT, "cost": COST}


class SandboxError(Exception):
    """An error of the sandbox interface.

    ``code`` is the seed's code (``MAIN-SANDBOX-0001`` ...) and ``status`` an
    HTTP-style status. ``ran`` says whether the code ran: ``False`` nothing ran
    (every refusal, an outage before the command was sent), ``True`` it ran, ``None``
    unknown (the connection was lost after the command was sent). ``retryable`` is
    True only when a blind retry is safe and may succeed: an outage
    (``MAIN-SANDBOX-0006``) where nothing ran. A driver may pass ``retryable=False``
    for an outage a retry cannot fix; it can never make an unsafe retry retryable.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int | None = None,
        retryable: bool | None = None,
        ran: bool | object | None = _UNSAID,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status if status is not None else _STATUS.get(code, 500)
        self._retry_refused = retryable is False
        # Whether the raiser said ``ran`` itself: core decides it for errors escaping a driver's exec.
        self.ran_said = ran is not _UNSAID
        self.ran: bool | None = False if ran is _UNSAID else ran  # type: ignore[assignment]

    @property
    def retryable(self) -> bool:
        """True only for an outage (``MAIN-SANDBOX-0006``) where nothing ran: retrying cannot run the code twice."""
        return self.code == DRIVER_UNAVAILABLE and self.ran is False and not self._retry_refused

    def nothing_ran(self) -> SandboxError:
        """Say that nothing ran: a driver raising before its exec hook sent the command (keeps it retryable)."""
        if not self.ran_said:
            self.ran, self.ran_said = False, True
        return self

    def after_exec(self, ran: bool | None = None) -> SandboxError:
        """This error as raised once a command was sent (``ran=None``) or had run (``ran=True``).

        Core calls this at one place for every error escaping a driver's exec or collect hook.
        Unless its raiser said ``ran`` itself, the code may have run: not retryable, and said so.
        """
        if self.ran_said:
            return self
        self.ran = ran
        if self.code == DRIVER_UNAVAILABLE:
            self.message += (
                "; the command had run" if ran else "; the command was already sent and may have run"
            ) + ", so this is not retryable: check its effects before running it again"
            self.args = (f"{self.code}: {self.message}",)
        return self


async def before_command(awaitable: Awaitable[T]) -> T:
    """Await a driver's step that comes before its command is sent; a ``SandboxError`` from it ran nothing.

    For a driver's exec hook: core judges every error escaping exec as "may have run" unless the
    driver says otherwise, and this is how a driver says it for the steps before the send.
    """
    try:
        return await awaitable
    except SandboxError as exc:
        raise exc.nothing_ran() from exc.__cause__


class BoxGone(SandboxError):
    """A driver's word that a box no longer exists (its backend lost it): ``MAIN-SANDBOX-0008``, nothing ran.

    A session whose box is gone is closed by core: every later call answers 0008 too,
    rather than an outage a retry would repeat forever. New runs start new boxes.
    """

    def __init__(self, message: str) -> None:
        super().__init__(NO_SESSION, message, status=404, ran=False)


@attrs.frozen
class ConfigProblem:
    """One problem in a ``main.yaml``: the code, the dotted key, its line (1-based) and what to do."""

    code: str
    key: str
    message: str
    line: int | None = None
    column: int | None = None
    source: str | None = None

    def __str__(self) -> str:
        return f"{self.located()} ({self.code})"

    def located(self) -> str:
        """The problem with its file, line and key, without its code (a one-problem ConfigError leads with it)."""
        where = self.source or "main.yaml"
        if self.line is not None:
            where += f" line {self.line}"
        return f"{where}: {self.key}: {self.message}"


class ConfigError(SandboxError):
    """A ``main.yaml`` (or a raw config dict) with one or more problems; all of them are listed."""

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        self.problems = tuple(problems)
        first = self.problems[0]
        if len(self.problems) == 1:
            text = first.located()  # its code leads the message once: "MAIN-CONFIG-0003: main.yaml line 2: ..."
        else:
            text = f"{len(self.problems)} problems in the config:\n" + "\n".join(f"  {p}" for p in self.problems)
        super().__init__(first.code, text)
