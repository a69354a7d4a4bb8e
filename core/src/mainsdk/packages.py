"""Packages in the box: the pinned entries of ``sandbox.packages`` and the subset a call may ask for.

Only an exact pin is accepted (``name==version``, extras allowed): no range, no marker, no URL, no path.
These are the two small grammars of PEP 508's name and PEP 440's public version, checked with a regex
rather than ``packaging``, because the point is to refuse everything but the one form, not to parse all
of PEP 508; core keeps no dependency for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

from mainsdk import errors
from mainsdk.errors import SandboxError
from mainsdk.units import describe

__all__ = [
    "PACKAGE_LANGUAGES",
    "Pin",
    "canonical_name",
    "parse_pin",
    "select_packages",
]

# The languages ``sandbox.packages`` takes. Node and bash are not built by any driver yet: refused, not ignored.
PACKAGE_LANGUAGES = ("python",)
MAX_PACKAGES = 200

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
# PEP 440 public versions plus a local label: 2.2.3, 1.0rc1, 2024.1.post2, 1.0.dev3, 1.0+cpu
_VERSION = r"(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?(?:\.dev[0-9]+)?(?:\+[A-Za-z0-9.]+)?"
# Whitespace only where PEP 508 allows it: around the extras' brackets and commas and around ``==``; never
# inside a name, an extra or the version (``six[a b]`` and ``pan das`` are mistakes, not ``six[ab]``/``pandas``).
_PIN = re.compile(
    rf"(?P<name>{_NAME})\s*(?:\[\s*(?P<extras>{_NAME}(?:\s*,\s*{_NAME})*)\s*\]\s*)?==\s*(?P<version>{_VERSION})"
)
_NAME_ONLY = re.compile(_NAME)
_EXAMPLE = "pandas==2.2.3"


def canonical_name(name: str) -> str:
    """The name as PEP 503 compares it: lowercase, runs of ``-``, ``_`` and ``.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


@attrs.frozen
class Pin:
    """One pinned package: ``name==version`` (``extras`` as written, sorted)."""

    name: str
    version: str
    extras: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The canonical name, which identifies the package whatever its spelling."""
        return canonical_name(self.name)

    def __str__(self) -> str:
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        return f"{self.name}{extras}=={self.version}"


def parse_pin(value: object) -> Pin:
    """A ``name==version`` entry, or ``ValueError``/``TypeError`` saying what is wrong and how to write it."""
    if not isinstance(value, str):
        raise TypeError(f"expected a pinned package like {_EXAMPLE}, not {describe(value)}")
    text = value.strip()
    match = _PIN.fullmatch(text)
    if match is None or len(text) > 200:
        if _NAME_ONLY.fullmatch(text):
            raise ValueError(f"{describe(text)} is not pinned: give the exact version, like {text}==1.2.3")
        if re.search(r"\s", text) and _PIN.fullmatch(re.sub(r"\s+", "", text)):
            raise ValueError(
                f"{describe(text)} has a space inside a name, an extra or the version; write it like "
                "pandas[excel,performance]==2.2.3 (extras separated by commas)"
            )
        plain = not any(mark in text for mark in (";", "@", "/", ":"))  # no marker, URL or path
        if plain and any(op in text for op in (">=", "<=", "~=", "!=", ">", "<", "===", "*")):
            name = _NAME_ONLY.match(text)
            example = f"{name[0]}==1.2.3" if name else _EXAMPLE
            raise ValueError(f"{describe(text)} is a range: pin one exact version, like {example}")
        raise ValueError(
            f"{describe(text)} is not a pinned package: write name==version, like {_EXAMPLE} "
            "(no URL, path, marker or range)"
        )
    extras = tuple(sorted(extra.strip() for extra in match["extras"].split(","))) if match["extras"] else ()
    return Pin(match["name"], match["version"], extras)


def check_unique(pins: Sequence[Pin]) -> None:
    """Refuse the same package listed twice (``ValueError`` naming it)."""
    seen: dict[str, Pin] = {}
    for pin in pins:
        if pin.key in seen:
            raise ValueError(f"{pin.name} is listed twice ({seen[pin.key]} and {pin}); keep one")
        seen[pin.key] = pin


def select_packages(requested: object, configured: Sequence[str], language: str) -> tuple[str, ...]:
    """The packages a call gets: all of ``configured`` when ``requested`` is None, else the subset it names.

    Each requested entry is a name (``"six"``) or the exact pin configured (``"six==1.16.0"``). One that is
    not configured, or pinned to another version, is ``MAIN-SANDBOX-0001`` naming it; nothing runs.
    """
    if requested is None:
        return tuple(configured)
    if isinstance(requested, (str, bytes)) or not isinstance(requested, (list, tuple)):
        raise SandboxError(
            errors.INVALID_OPTION,
            f"packages: must be a list of names like ['pandas'], not {type(requested).__name__}",
        )
    by_key = {parse_pin(entry).key: entry for entry in configured}
    chosen: dict[str, None] = {}
    for item in requested:
        if not isinstance(item, str) or not item.strip():
            raise SandboxError(errors.INVALID_OPTION, f"packages: {describe(item)} is not a package name")
        text = item.strip()
        if _NAME_ONLY.fullmatch(text):
            key, pin = canonical_name(text), None
        else:
            try:
                pin = parse_pin(text)
            except (ValueError, TypeError) as exc:
                raise SandboxError(errors.INVALID_OPTION, f"packages: {exc}") from None
            key = pin.key
        entry = by_key.get(key)
        if entry is None:
            where = f"sandbox.packages.{language}"
            raise SandboxError(
                errors.INVALID_OPTION,
                f"packages: {text[:100]!r} is not under {where} in main.yaml; add it there pinned "
                f"(like {canonical_name(text.split('==')[0])[:80]}==1.2.3), or drop it from the call",
            )
        if pin is not None and str(pin) != entry and pin.version != parse_pin(entry).version:
            raise SandboxError(
                errors.INVALID_OPTION,
                f"packages: {text[:100]!r} asks for another version than sandbox.packages.{language} pins "
                f"({entry}); ask for it by name, or change the pin in main.yaml",
            )
        chosen[entry] = None
    return tuple(chosen)
