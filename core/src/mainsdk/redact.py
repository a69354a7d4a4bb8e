"""Redaction of secret values and well-known key formats from a byte stream.

The stream arrives in chunks, and a secret may be split across two of them, so
the redactor holds back only the bytes that could still become a match: a
suffix that is the start of a secret value, or a partial match of a key format
(found with the ``regex`` module's partial matching, which says exactly that and
which the standard ``re`` cannot). Everything before them is released at once,
so output reaches the app as it arrives. Every pattern has a bounded length,
which bounds what is held back.
"""

from __future__ import annotations

import functools
import html
import json
import re
from collections.abc import Iterable

import regex

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
    """Redacts one stream. ``feed`` returns what is safe to pass on now; ``quiet`` and ``finish`` more.

    ``values`` are secret values (as bytes); empty values are ignored. What is
    held back is always a possible start of a secret: a suffix that a value
    begins with, or a partial or still-growing match of a key format. It is
    released as soon as the next bytes decide it, never on a timer (that would
    print the first half of a secret written in two halves with a pause).
    """

    def __init__(self, values: Iterable[bytes], *, key_formats: bool = True) -> None:
        self._values = sorted({v for v in values if v}, key=len, reverse=True)
        self._pattern = _stream_pattern(tuple(self._values), key_formats)
        self._held = b""
        # One byte of already-emitted context, so a \b at the seam is judged as in the whole stream.
        self._context = b""
        # The first ``_absorbed`` held bytes were already released as a marker by ``quiet``: a match that
        # still grows over them (a longer token) is released without a second marker.
        self._absorbed = 0

    @property
    def holding(self) -> bool:
        """Whether bytes are held back, waiting for what comes next."""
        return len(self._held) > self._absorbed

    def feed(self, data: bytes) -> bytes:
        """Take a chunk; return the redacted bytes that can no longer be part of a match."""
        if self._pattern is None:
            return data
        self._held += data
        return self._scan(final=False, quiet=False)

    def quiet(self) -> bytes:
        """The stream has paused: release a complete match that ends the buffer (as the marker), keep prefixes.

        A key that could still grow (``ghp_`` and 36 characters, more may come)
        is released as the marker now; should it grow, the rest is swallowed
        into the marker already released rather than shown.
        """
        if self._pattern is None:
            return b""
        return self._scan(final=False, quiet=True)

    def finish(self, *, cut: bool = False) -> bytes:
        """Return the rest. With ``cut`` (the stream was cut at a limit) a trailing secret prefix is redacted too."""
        if self._pattern is None:
            return b""
        out = self._scan(final=True, quiet=False)
        if cut:
            for value in self._values:
                for length in range(min(len(value) - 1, len(out)), 0, -1):
                    if out.endswith(value[:length]):
                        return out[:-length] + REDACTED
        return out

    def _value_prefix_at(self, text: bytes, pos: int) -> int:
        """The first position at or after ``pos`` from which the rest of ``text`` begins some value (else its end)."""
        end = len(text)
        first = end
        for value in self._values:
            start = max(pos, end - len(value) + 1)
            while start < first:
                found = text.find(value[:1], start, first)
                if found < 0:
                    break
                if value.startswith(text[found:]):
                    first = found
                    break
                start = found + 1
        return first

    def _scan(self, *, final: bool, quiet: bool) -> bytes:
        assert self._pattern is not None
        text = self._context + self._held
        offset = len(self._context)
        seen = offset + self._absorbed  # bytes before this were released already (as a marker)
        out: list[bytes] = []

        def emit(start: int, stop: int) -> None:
            start = max(start, seen)
            if stop > start:
                out.append(text[start:stop])

        pos = offset
        hold = len(text)
        kept = -1  # with ``quiet``: the start of a released match that ends the buffer, kept to see if it grows
        for match in self._pattern.finditer(text, offset, partial=not final):
            if match.start() == match.end():
                break  # an empty partial match at the very end: nothing begun
            if not final:
                prefix = self._value_prefix_at(text, pos)
                open_ended = match.partial or (match.end() == len(text) and not quiet)
                if open_ended or prefix <= match.start():
                    hold = min(match.start(), prefix)
                    break
            emit(pos, match.start())
            if match.end() > seen:
                if match.start() >= seen:
                    out.append(REDACTED)
                seen = match.end()
            pos = match.end()
            if quiet and pos == len(text):
                kept = match.start()
        else:
            if not final:
                hold = self._value_prefix_at(text, pos)
        emit(pos, hold)
        hold = max(hold, pos) if kept < 0 else kept
        self._absorbed = max(seen - hold, 0)
        self._context = text[hold - 1 : hold] if hold > 0 else b""
        self._held = text[hold:]
        return b"".join(out)


@functools.lru_cache(maxsize=64)  # once per set of secrets (a session's cells share one), not once per cell
def _stream_pattern(values: tuple[bytes, ...], key_formats: bool) -> regex.Pattern[bytes] | None:
    alternatives = [regex.escape(v) for v in values] + (list(KEY_PATTERNS) if key_formats else [])
    return regex.compile(b"|".join(alternatives)) if alternatives else None


@functools.lru_cache(maxsize=64)
def _name_pattern(values: tuple[str, ...]) -> re.Pattern[str]:
    anycase = ["(?i:" + "|".join(re.escape(v) for v in values) + ")"] if values else []
    return re.compile("|".join(anycase + [p.decode() for p in KEY_PATTERNS]))


CUT_MARK = "..."  # how drivers end a name they cut to a length
MIN_CUT_PREFIX = 4  # a cut name ending in at least this much of a value's start loses it


def _escaped(value: str) -> set[str]:
    """How ``value`` reads inside a JSON string (ASCII-only or not) and inside HTML text, where that differs."""
    forms = {
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        html.escape(value, quote=False),
        html.escape(value),
    }
    forms.discard(value)
    return forms


class NameRedactor:
    """Redacts secret values and key formats from short strings the code chose: refused hosts, out-file names.

    Such a string leaves the box whole (in a result, an audit event, a log
    line), so it is redacted as output is, plus one hostname-specific rule: a
    secret value matches in any letter case, since DNS names are
    case-insensitive and the proxy lowercases them. A cell's rich results are
    redacted with it too, and the kernel writes values into them escaped: so a
    value also matches as a JSON string holds it (``\\"``, ``\\u00e4``: the
    data forms, ``application/json``) and HTML-escaped (``&amp;``, ``&quot;``:
    ``text/html``). Hex, base32 or other encodings of a value are not
    recognised (output redaction does not either).
    The pattern is compiled at first use: most runs have nothing to redact.
    """

    def __init__(self, values: Iterable[bytes]) -> None:
        plain = {v.decode("utf-8", "replace") for v in values if v}
        self._values = sorted(plain | {e for v in plain for e in _escaped(v)}, key=len, reverse=True)
        self._pattern: re.Pattern[str] | None = None

    def __call__(self, text: str) -> str:
        """``text`` with every secret value (any case) and well-known key format replaced by the marker."""
        if self._pattern is None:
            self._pattern = _name_pattern(tuple(self._values))
        redacted = self._pattern.sub(REDACTED.decode(), text)
        if redacted.endswith(CUT_MARK) and self._values:
            redacted = self._redact_cut_start(redacted[: -len(CUT_MARK)]) + CUT_MARK
        return redacted

    def _redact_cut_start(self, head: str) -> str:
        # A driver that cuts a long name and ends it with "..." may cut through a secret value, which
        # the pattern then no longer matches: a name padded to put the cut one character before the
        # value's end carried all of it but that character. The value's start left at the end goes too.
        folded = head.lower()
        for value in self._values:
            start = value.lower()
            for size in range(min(len(start), len(folded)), MIN_CUT_PREFIX - 1, -1):
                if folded.endswith(start[:size]):
                    return head[:-size] + REDACTED.decode()
        return head
