"""The error codes of the sandbox interface, as exceptions.

Every error a user can cause or meet carries the seed's code, an HTTP-style
status and whether a retry can help, so an app can map it to a response
without parsing the message. The message names what is at fault and the fix.
"""

from __future__ import annotations

from collections.abc import Sequence

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

# Which stop reason a run result carries for each limit code.
STOP_CODES = {"timeout": TIMEOUT, "memory": MEMORY, "output": OUTPUT, "cost": COST}


class SandboxError(Exception):
    """An error of the sandbox interface.

    ``code`` is the seed's code (``MAIN-SANDBOX-0001`` ...), ``status`` an
    HTTP-style status, ``retryable`` whether the same call may succeed later.
    """

    def __init__(self, code: str, message: str, *, status: int | None = None, retryable: bool | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status if status is not None else _STATUS.get(code, 500)
        self.retryable = retryable if retryable is not None else code == DRIVER_UNAVAILABLE


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
        where = self.source or "main.yaml"
        if self.line is not None:
            where += f" line {self.line}"
        return f"{where}: {self.key}: {self.message} ({self.code})"


class ConfigError(SandboxError):
    """A ``main.yaml`` (or a raw config dict) with one or more problems; all of them are listed."""

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        self.problems = tuple(problems)
        first = self.problems[0]
        if len(self.problems) == 1:
            text = str(first)
        else:
            text = f"{len(self.problems)} problems in the config:\n" + "\n".join(f"  {p}" for p in self.problems)
        super().__init__(first.code, text)
