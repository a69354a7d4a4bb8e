"""Redaction of secret values and well-known key formats from a byte stream.

The stream arrives in chunks, and a secret may be split across two of them, so
the redactor holds back the last few bytes that could still be the start of a
match. Every pattern has a bounded length, which bounds what is held back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = b"[redacted:secret]"

# Well-known credential formats. Each is bounded so a match is decided within
# MAX_PATTERN bytes of its start.
KEY_PATTERNS: tuple[bytes, ...] = (
    rb"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key id
    rb"\bgh[pousr]_[A-Za-z0-9]{36,255}",  # GitHub tokens
    rb"\bgithub_pat_[A-Za-z0-9_]{22,255}",
    rb"\bsk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,255}",  # OpenAI and Anthropic keys
    rb"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,255}",  # Stripe
    rb"\bxox[abposr]-[A-Za-z0-9-]{10,255}",  # Slack
    rb"\bAIza[0-9A-Za-z_-]{35}",  # Google API key
    rb"\be2b_[0-9a-f]{40}\b",  # E2B API key
    rb"\beyJ[A-Za-z0-9_-]{10,2048}\.eyJ[A-Za-z0-9_-]{10,4096}\.[A-Za-z0-9_-]{10,2048}",  # JWT
    rb"-----BEGIN [A-Z ]{0,20}PRIVATE KEY-----[\s\S]{0,8192}?-----END [A-Z ]{0,20}PRIVATE KEY-----",
)
MAX_PATTERN = 8300


class StreamRedactor:
    """Redacts one stream. ``feed`` returns what is safe to pass on; ``finish`` the rest.

    ``values`` are secret values (as bytes); empty values are ignored.
    """

    def __init__(self, values: Iterable[bytes], *, key_formats: bool = True) -> None:
        self._values = sorted({v for v in values if v}, key=len, reverse=True)
        alternatives = [re.escape(v) for v in self._values]
        if key_formats:
            alternatives += list(KEY_PATTERNS)
        self._pattern = re.compile(b"|".join(alternatives)) if alternatives else None
        longest_value = len(self._values[0]) if self._values else 0
        self._window = max(longest_value, MAX_PATTERN if key_formats else 0)
        self._held = b""
        # One byte of already-emitted context, so a \b at the seam is judged as in the whole stream.
        self._context = b""

    def feed(self, data: bytes) -> bytes:
        """Take a chunk; return the redacted bytes that can no longer be part of a match."""
        if self._pattern is None:
            return data
        self._held += data
        decided = len(self._held) - self._window + 1
        if decided <= 0:
            return b""
        return self._redact(decided)

    def finish(self, *, cut: bool = False) -> bytes:
        """Return the rest. With ``cut`` (the stream was cut at a limit) a trailing secret prefix is redacted too."""
        if self._pattern is None:
            return b""
        out = self._redact(len(self._held))
        if cut:
            for value in self._values:
                for length in range(min(len(value) - 1, len(out)), 0, -1):
                    if out.endswith(value[:length]):
                        return out[:-length] + REDACTED
        return out

    def _redact(self, decided: int) -> bytes:
        assert self._pattern is not None
        text = self._context + self._held
        offset = len(self._context)
        out: list[bytes] = []
        pos = offset
        for match in self._pattern.finditer(text, offset):
            if match.start() >= decided + offset:
                break
            out.append(text[pos : match.start()])
            out.append(REDACTED)
            pos = match.end()
        cut_at = max(pos, decided + offset)
        out.append(text[pos:cut_at])
        self._context = text[cut_at - 1 : cut_at] if cut_at > 0 else b""
        self._held = text[cut_at:]
        return b"".join(out)


class NameRedactor:
    """Redacts secret values and key formats from short strings the code chose: refused hosts, out-file names.

    Such a string leaves the box whole (in a result, an audit event, a log
    line), so it is redacted as output is, plus one hostname-specific rule: a
    secret value matches in any letter case, since DNS names are
    case-insensitive and the proxy lowercases them. Hex, base32 or other
    encodings of a value are not recognised (output redaction does not either).
    The pattern is compiled at first use: most runs have nothing to redact.
    """

    def __init__(self, values: Iterable[bytes]) -> None:
        self._values = sorted({v.decode("utf-8", "replace") for v in values if v}, key=len, reverse=True)
        self._pattern: re.Pattern[str] | None = None

    def __call__(self, text: str) -> str:
        """``text`` with every secret value (any case) and well-known key format replaced by the marker."""
        if self._pattern is None:
            alternatives = [p.decode() for p in KEY_PATTERNS]
            if self._values:
                alternatives.insert(0, "(?i:" + "|".join(re.escape(v) for v in self._values) + ")")
            self._pattern = re.compile("|".join(alternatives))
        return self._pattern.sub(REDACTED.decode(), text)
