"""Redaction of secret values and key formats, whole and across chunk boundaries."""

from __future__ import annotations

import random

import pytest
from mainsdk.redact import REDACTED, NameRedactor, StreamRedactor


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


def test_only_a_possible_secret_start_is_held_back() -> None:
    redactor = StreamRedactor([b"hunter2-value"])
    assert redactor.feed(b"line one\n") == b"line one\n"  # nothing here can begin a secret: released at once
    assert redactor.feed(b"token: hunt") == b"token: "  # "hunt" may begin the value
    assert redactor.holding
    assert redactor.quiet() == b""  # a pause releases no part of a secret
    assert redactor.feed(b"ing season\n") == b"hunting season\n"  # decided: not the value
    assert not redactor.holding


def test_a_pause_releases_a_complete_key_and_swallows_its_growth() -> None:
    redactor = StreamRedactor([])
    assert redactor.feed(b"t ghp_" + b"a" * 36) == b"t "  # a whole token, which could still grow
    assert redactor.quiet() == REDACTED
    assert redactor.feed(b"bbbb") == b""  # the same token, longer: already shown as the marker
    assert redactor.feed(b" next\n") + redactor.finish() == b" next\n"


def test_a_longer_value_beginning_with_a_shorter_one_is_not_cut_in_two() -> None:
    redactor = StreamRedactor([b"abc", b"abcdef"])
    out = redactor.feed(b"x abc") + redactor.quiet() + redactor.feed(b"def y\n") + redactor.finish()
    assert out == b"x " + REDACTED + b" y\n"


def test_fuzz_chunked_and_paused_output_never_shows_a_value() -> None:
    """A short fixed-seed slice: any chunking and pauses give the whole-stream result, or more redaction."""
    rng = random.Random(15)
    values = [b"hunter2-value", b"abcabd", b"xyzzy", b"abc"]
    alphabet = b"abcdhunter2-valuexyz \nAKIA0123ghp_sk-"
    for _ in range(1500):
        data = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 160)))
        if rng.random() < 0.5:
            at = rng.randint(0, len(data))
            data = data[:at] + rng.choice(values) + data[at:]
        whole = StreamRedactor(values)
        expected = whole.feed(data) + whole.finish()
        redactor = StreamRedactor(values)
        pauses = rng.random() < 0.5
        out, pos = b"", 0
        while pos < len(data):
            size = rng.randint(1, 20)
            out += redactor.feed(data[pos : pos + size])
            pos += size
            if pauses and rng.random() < 0.3:
                out += redactor.quiet()
        out += redactor.finish()
        if not pauses:
            assert out == expected, data
        assert not any(v in out.replace(REDACTED, b"|") for v in values), data


def test_a_value_is_redacted_as_json_and_html_hold_it_in_a_rich_result() -> None:
    # The kernel writes a cell's data forms (and application/json) with json.dumps and pandas its HTML escaped:
    # a value with a quote, a backslash, a non-ASCII letter or an ampersand is no longer itself there.
    import html
    import json

    value = 'pä"ss\\wörd&<1>'
    redact = NameRedactor([value.encode()])
    marker = REDACTED.decode()
    forms = {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1], html.escape(value)}
    forms.add(html.escape(value, quote=False))
    for text in (
        json.dumps({"k": [value]}),
        json.dumps({"k": value}, ensure_ascii=False),
        "<td>" + html.escape(value, quote=False) + "</td>",
        '<p title="' + html.escape(value) + '">',
        "plain " + value,
    ):
        redacted = redact(text)
        assert marker in redacted and not [form for form in forms if form in redacted], (text, redacted)
    assert json.loads(redact(json.dumps({"k": value}))) == {"k": marker}  # still JSON
    assert redact('{"k": "p\\u00e4ss"}') == '{"k": "p\\u00e4ss"}'  # a part of a value is no value
