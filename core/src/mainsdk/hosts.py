"""Host patterns for ``sandbox.network`` and ``network.allow``.

A pattern is a DNS name (``pypi.org``), a wildcard whose only ``*`` is the
leading label (``*.example.com``), an IPv4 or IPv6 literal, or ``localhost``.
Patterns are lowercase with no trailing dot; matching ignores case and a
trailing dot on either side.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from mainsdk.units import describe

_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_EXAMPLE = "like pypi.org or *.example.com"


def _normalise(text: str) -> str:
    return text.strip().lower().rstrip(".")


def _ip_literal(text: str) -> str | None:
    """The canonical form of an IP literal (``[::1]`` is accepted for IPv6), or None when it is not one."""
    inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        return str(ipaddress.ip_address(inner))
    except ValueError:
        return None


def _check_dns_name(name: str, text: str) -> None:
    labels = name.split(".")
    if "" in labels:
        raise ValueError(f'"{text}" has an empty label (two dots in a row, or a leading dot): use a host {_EXAMPLE}')
    if len(name) > 253:
        raise ValueError(f'"{text}" is longer than the 253 characters a host name may have')
    for label in labels:
        if not _LABEL.fullmatch(label):
            raise ValueError(
                f'"{text}" has a label "{label}" that is not a host name part: use letters, digits and -'
                f" (not at either end, at most 63 characters), {_EXAMPLE}"
            )
    # A top-level domain is never all digits, so this was meant as an IPv4 address.
    if labels[-1].isdigit():
        raise ValueError(f'"{text}" is not a valid IP address or host name: use one {_EXAMPLE} or 203.0.113.7')


def validate_host_pattern(text: object) -> str:
    """Check one host pattern and return it normalised (lowercase, no trailing dot).

    Raises ``ValueError`` naming what is wrong (a scheme, a path, a port, a
    space, an empty label, a bare or misplaced ``*``) with an example.
    """
    if not isinstance(text, str):
        # ValueError, not TypeError: to a caller this is one more invalid entry in a config list.
        raise ValueError(f"{describe(text)} is not a host: give a host name {_EXAMPLE}")
    if not text.strip():
        raise ValueError(f"a host must not be empty: give a host name {_EXAMPLE}")
    if any(char.isspace() for char in text.strip()):
        raise ValueError(f'"{text}" contains a space: give one host per entry, {_EXAMPLE}')
    if "://" in text:
        raise ValueError(f'"{text}" is a URL: give the host only, without the scheme, {_EXAMPLE}')
    if "/" in text:
        raise ValueError(f'"{text}" has a path: give the host only, {_EXAMPLE}')
    ip = _ip_literal(text.strip())
    if ip is not None:
        return ip
    name = _normalise(text)
    if ":" in name:
        raise ValueError(f'"{text}" has a port: give the host only (any port is allowed), {_EXAMPLE}')
    if name == "*":
        raise ValueError(f'"{text}" would allow every host: name the hosts, or a wildcard like *.example.com')
    if name.startswith("*."):
        suffix = name[2:]
        if "*" in suffix:
            raise ValueError(f'"{text}" has more than one *: only a leading *. label is allowed, like *.example.com')
        _check_dns_name(suffix, text)
        if "." not in suffix:
            raise ValueError(f'"{text}" is too broad: put at least two labels after *., like *.example.com')
        return name
    if "*" in name:
        raise ValueError(f'"{text}" has a * that is not a leading *. label: use a wildcard like *.example.com')
    _check_dns_name(name, text)
    return name


def host_matches(host: str, pattern: str) -> bool:
    """Whether a host falls under a pattern, ignoring case and a trailing dot.

    ``*.example.com`` matches ``a.example.com`` and ``a.b.example.com`` but not
    ``example.com``. A wildcard host is matched by the same or a broader
    wildcard only: ``*.a.example.com`` falls under ``*.example.com``, while
    ``*.example.com`` does not fall under ``a.example.com``.
    """
    host_ip, pattern_ip = _ip_literal(host.strip()), _ip_literal(pattern.strip())
    if host_ip is not None or pattern_ip is not None:
        return host_ip == pattern_ip
    host, pattern = _normalise(host), _normalise(pattern)
    if host == pattern:
        return True
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return False


def host_covered(host: str, patterns: Iterable[str]) -> bool:
    """Whether any of ``patterns`` matches ``host`` (see ``host_matches``)."""
    return any(host_matches(host, pattern) for pattern in patterns)
