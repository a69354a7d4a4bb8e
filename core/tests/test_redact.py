"""Redaction of secret values and key formats, whole and across chunk boundaries."""

from __future__ import annotations

import pytest
from mainsdk.redact import REDACTED, StreamRedactor


def redact_in_chunks(data: bytes, values: list[bytes], size: int) -> bytes:
    redactor = StreamRedactor(values)
    out = b"".join(redactor.feed(data[i : i + size]) for i in range(0, len(data), size))
    return out + redactor.finish()


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 10_000])
def test_a_secret_split_across_reads_is_redacted(size: int) -> None:
    data = b"before hunter2-value after hunter2-value end"
    assert redact_in_chunks(data, [b"hunter2-value"], size) == b"before " + REDACTED + b" after " + REDACTED + b" end"


@pytest.mark.parametrize(
    "key",
    [
        b"AKIAIOSFODNN7EXAMPLE",
        b"ghp_" + b"a" * 36,
        b"sk-ant-api03-" + b"x" * 40,
        b"sk_live_" + b"4eC39HqLyjWDarjtT1zdp7dc",
        b"xoxb-123456789012-abcdefghij",
        b"AIza" + b"B" * 35,
        b"-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
    ],
)
def test_known_key_formats_are_redacted(key: bytes) -> None:
    assert redact_in_chunks(b"key=" + key + b"\n", [], 5) == b"key=" + REDACTED + b"\n"


def test_plain_text_passes_unchanged_and_in_order() -> None:
    data = b"".join(b"line %d skeleton key task-1\n" % i for i in range(2000))
    assert redact_in_chunks(data, [b"not-in-there"], 333) == data


def test_nothing_to_redact_streams_without_holding_back() -> None:
    redactor = StreamRedactor([], key_formats=False)
    assert redactor.feed(b"abc") == b"abc"


def test_a_cut_secret_prefix_at_the_end_is_redacted() -> None:
    redactor = StreamRedactor([b"supersecretvalue"], key_formats=False)
    out = redactor.feed(b"token: supersec") + redactor.finish(cut=True)
    assert out == b"token: " + REDACTED
    assert b"supersec" not in out


def test_a_word_inside_a_longer_word_is_not_a_key() -> None:
    assert redact_in_chunks(b"xAKIAIOSFODNN7EXAMPLEx", [], 4) == b"xAKIAIOSFODNN7EXAMPLEx"
