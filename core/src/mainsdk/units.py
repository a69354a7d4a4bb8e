"""Durations, sizes and money as written in ``main.yaml``: ``30s``, ``512MB``, ``$0.05``.

Each parser raises ``ValueError`` with a message that says what was wrong and
shows a value that works, so the config loader can pass it on unchanged.
Sizes are binary: ``1KB`` is 1024 bytes, the same as ``1KiB``.

Every limit has an upper bound (``LIMIT_MAXIMUMS``), checked where it is
parsed, so the config loader and a call's ``limits=`` refuse the same values:
past them a number is a typo, and some overflow the kernel's timers (a
``select`` timeout overflows at about 596 hours).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_NUMBER = r"(\d+(?:\.\d+)?|\.\d+)"
_DURATION = re.compile(rf"{_NUMBER}\s*(ms|s|m|h)?")
_SIZE = re.compile(rf"{_NUMBER}\s*([kmgt]i?b|b)?", re.IGNORECASE)
_MONEY = re.compile(rf"\$?{_NUMBER}")

_SECONDS_PER_UNIT = {"ms": Decimal("0.001"), "s": Decimal(1), "m": Decimal(60), "h": Decimal(3600)}
_BYTES_PER_UNIT = {"b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3, "tb": 1024**4}

KB, MB, GB, TB = 1024, 1024**2, 1024**3, 1024**4

# The upper bounds. A run is not held for more than a day; a box's memory and disk cannot
# exceed what a large machine holds; output and files pass through the app's own memory.
MAX_TIMEOUT = 24 * 3600.0
MAX_IDLE = 24 * 3600.0
MAX_MEMORY = 1 * TB
MAX_DISK = 1 * TB
MAX_OUTPUT = 1 * GB
MAX_FILES = 64 * GB
MAX_MONEY = Decimal(1_000_000)
LIMIT_MAXIMUMS: dict[str, float | int] = {
    "timeout": MAX_TIMEOUT,
    "memory": MAX_MEMORY,
    "output": MAX_OUTPUT,
    "files": MAX_FILES,
}
"""The most each ``limits`` key may be, in seconds or bytes: one definition for main.yaml and for calls."""

_SHOWN_CHARS = 60  # a value quoted in a message is cut to this many characters

DURATION_HINT = "use a number with s, ms, m or h, like 30s"
SIZE_HINT = "use a number with B, KB, MB or GB, like 512MB"
MONEY_HINT = "use dollars, like $0.05"


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on or cannot show escaped: ``\\x1b``, ``\\n``, ``\\ud800``.

    Values from a config file are quoted back in messages; an escape sequence or a
    newline in one must not repaint the user's terminal or forge another line of output.
    """
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escaped(char) for char in text)


def _escaped(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def describe(value: object) -> str:
    """Name what a value is for an error message: ``"30x"``, ``a list``, ``null``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a yes/no value)"
    if isinstance(value, str):
        shown = value if len(value) <= _SHOWN_CHARS else value[: _SHOWN_CHARS - 3] + "..."
        return f'"{printable(shown)}"'
    if isinstance(value, (int, float, Decimal)):
        text = str(value)
        return text if len(text) <= _SHOWN_CHARS else f"a {len(text)}-digit number"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _number_text(value: object, what: str, hint: str) -> str:
    """The text of a number-ish value; lists, mappings, yes/no and null are refused."""
    if isinstance(value, str):
        return value.strip()
    # bool is an int, but `timeout: true` is a mistake, not 1 second.
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"{describe(value)} is not {what}: {hint}")


def _positive(amount: Decimal, value: object, what: str, hint: str) -> Decimal:
    if not amount.is_finite():
        raise ValueError(f"{describe(value)} is not {what}: {hint}")
    if amount <= 0:
        raise ValueError(f"{describe(value)} is too small: {what} must be more than 0; {hint}")
    return amount


def _at_most(amount: Decimal, maximum: Decimal, value: object, what: str, shown_maximum: str) -> None:
    if amount > maximum:
        raise ValueError(f"{describe(value)} is too large: {what} must be at most {shown_maximum}")


def parse_duration(value: object, *, maximum: float = MAX_TIMEOUT) -> float:
    """Seconds from ``"30s"``, ``"500ms"``, ``"1.5m"``, ``"2h"`` or a plain number of seconds.

    Must be more than 0 and at most ``maximum`` seconds (a day by default).
    """
    text = _number_text(value, "a duration", DURATION_HINT)
    if isinstance(value, str):
        match = _DURATION.fullmatch(text)
        if match is None:
            raise ValueError(f"{describe(value)} is not a duration: {DURATION_HINT}")
        number, unit = match.groups()
        seconds = Decimal(number) * _SECONDS_PER_UNIT[unit or "s"]
    else:
        seconds = Decimal(text)
    _positive(seconds, value, "a duration", DURATION_HINT)
    _at_most(seconds, Decimal(str(maximum)), value, "a duration", format_duration(maximum))
    return float(seconds)


def parse_size(value: object, *, maximum: int = MAX_MEMORY) -> int:
    """Bytes from ``"512MB"``, ``"1.5GB"``, ``"64KiB"``, ``"10B"`` or a plain whole number of bytes.

    Must be more than 0 and at most ``maximum`` bytes (1TB by default).
    """
    text = _number_text(value, "a size", SIZE_HINT)
    if isinstance(value, str):
        match = _SIZE.fullmatch(text)
        if match is None:
            raise ValueError(f"{describe(value)} is not a size: {SIZE_HINT}")
        number, unit = match.groups()
        size = Decimal(number) * _BYTES_PER_UNIT[(unit or "b").lower().replace("i", "")]
    else:
        size = Decimal(text)
    _positive(size, value, "a size", SIZE_HINT)
    _at_most(size, Decimal(maximum), value, "a size", format_size(maximum))
    if size != size.to_integral_value():
        raise ValueError(f"{describe(value)} is not a whole number of bytes: {SIZE_HINT}")
    return int(size)


def parse_money(value: object, *, maximum: Decimal = MAX_MONEY) -> Decimal:
    """Dollars from ``"$0.05"``, ``"0.05"`` or a number (converted through ``str`` so 0.05 stays 0.05).

    Must be 0 or more and at most ``maximum`` dollars ($1,000,000 by default).
    """
    text = _number_text(value, "an amount of money", MONEY_HINT)
    if isinstance(value, str):
        match = _MONEY.fullmatch(text)
        if match is None:
            raise ValueError(f"{describe(value)} is not an amount of money: {MONEY_HINT}")
        text = match.group(1)
    try:
        amount = Decimal(text)
    except InvalidOperation:
        raise ValueError(f"{describe(value)} is not an amount of money: {MONEY_HINT}") from None
    if not amount.is_finite() or amount < 0:
        raise ValueError(f"{describe(value)} is not an amount of money: it must be 0 or more; {MONEY_HINT}")
    _at_most(amount, maximum, value, "an amount of money", f"${maximum:,}")
    return amount


def format_duration(seconds: float) -> str:
    """A duration for messages, exact and in the largest whole unit: ``2h``, ``1m``, ``30s``, ``500ms``, ``1.5s``."""
    exact = Decimal(str(seconds))
    # Milliseconds only below a second: 1.5s reads better than 1500ms.
    for unit in ("h", "m", "s", "ms") if exact < 1 else ("h", "m", "s"):
        count = exact / _SECONDS_PER_UNIT[unit]
        if count == count.to_integral_value() and count != 0:
            return f"{int(count)}{unit}"
    return f"{exact.normalize():f}s"


def format_size(size: int) -> str:
    """The largest binary unit that divides a size exactly, for messages: ``512MB``, ``1536MB``, ``10B``."""
    for unit in ("TB", "GB", "MB", "KB"):
        per_unit = _BYTES_PER_UNIT[unit.lower()]
        if size and size % per_unit == 0:
            return f"{size // per_unit}{unit}"
    return f"{size}B"
