from decimal import Decimal

import pytest
from mainsdk.units import (
    LIMIT_MAXIMUMS,
    MAX_DISK,
    MAX_FILES,
    MAX_MEMORY,
    MAX_MONEY,
    MAX_OUTPUT,
    MAX_TIMEOUT,
    describe,
    format_duration,
    format_size,
    parse_duration,
    parse_money,
    parse_size,
    printable,
)

KB, MB, GB = 1024, 1024**2, 1024**3


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("500ms", 0.5),
        ("1m", 60.0),
        ("1.5m", 90.0),
        ("2h", 7200.0),
        (" 45 s ", 45.0),
        ("10", 10.0),
        (30, 30.0),
        (2.5, 2.5),
        (Decimal("0.25"), 0.25),
    ],
)
def test_parse_duration_forms(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("30x", '"30x" is not a duration: use a number with s, ms, m or h, like 30s'),
        ("", '"" is not a duration'),
        ("s", '"s" is not a duration'),
        ("30S", '"30S" is not a duration'),
        ("-5s", '"-5s" is not a duration'),
        ("0s", '"0s" is too small: a duration must be more than 0'),
        (0, "0 is too small"),
        (-1.5, "-1.5 is too small"),
        (float("inf"), "inf is not a duration"),
        (True, "true (a yes/no value) is not a duration"),
        (None, "null is not a duration"),
        (["30s"], "a list is not a duration"),
        ({"s": 30}, "a mapping is not a duration"),
    ],
)
def test_parse_duration_rejects(value: object, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_duration(value)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("512MB", 512 * MB),
        ("1GB", GB),
        ("64KB", 64 * KB),
        ("10B", 10),
        ("1.5GB", 1536 * MB),
        ("0.5KB", 512),
        ("512MiB", 512 * MB),
        ("64KiB", 64 * KB),
        ("2GiB", 2 * GB),
        ("1TB", 1024 * GB),
        ("512mb", 512 * MB),
        ("512 MB", 512 * MB),
        ("4096", 4096),
        (4096, 4096),
        (2048.0, 2048),
    ],
)
def test_parse_size_forms(text: object, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("512XB", '"512XB" is not a size: use a number with B, KB, MB or GB, like 512MB'),
        ("MB", '"MB" is not a size'),
        ("1.5B", '"1.5B" is not a whole number of bytes'),
        ("0MB", '"0MB" is too small: a size must be more than 0'),
        (0, "0 is too small"),
        (-1, "-1 is too small"),
        (10.5, "10.5 is not a whole number of bytes"),
        (False, "false (a yes/no value) is not a size"),
        ([512], "a list is not a size"),
    ],
)
def test_parse_size_rejects(value: object, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_size(value)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    ("value", "amount"),
    [
        ("$0.05", Decimal("0.05")),
        ("0.05", Decimal("0.05")),
        ("$0.0001", Decimal("0.0001")),
        ("$0", Decimal(0)),
        ("$12", Decimal(12)),
        (0.05, Decimal("0.05")),
        (1e-05, Decimal("0.00001")),
        (3, Decimal(3)),
        (Decimal("0.5"), Decimal("0.5")),
    ],
)
def test_parse_money_forms(value: object, amount: Decimal) -> None:
    result = parse_money(value)
    assert isinstance(result, Decimal)
    assert result == amount


def test_parse_money_keeps_decimal_digits_of_a_float() -> None:
    # Through str(), not Decimal(0.1), which would be 0.1000000000000000055...
    assert parse_money(0.1) == Decimal("0.1")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("$-0.05", '"$-0.05" is not an amount of money: use dollars, like $0.05'),
        ("-0.05", '"-0.05" is not an amount of money'),
        ("0.05$", '"0.05$" is not an amount of money'),
        ("5 dollars", '"5 dollars" is not an amount of money'),
        ("", '"" is not an amount of money'),
        (-1, "-1 is not an amount of money: it must be 0 or more"),
        (float("nan"), "nan is not an amount of money: it must be 0 or more"),
        (True, "true (a yes/no value) is not an amount of money"),
        (None, "null is not an amount of money"),
    ],
)
def test_parse_money_rejects(value: object, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_money(value)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(30.0, "30s"), (0.5, "500ms"), (60.0, "1m"), (90.0, "90s"), (7200.0, "2h"), (1.5, "1.5s"), (0.0005, "0.0005s")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("size", "text"),
    [(512 * MB, "512MB"), (GB, "1GB"), (1536 * MB, "1536MB"), (64 * KB, "64KB"), (10, "10B"), (1500, "1500B")],
)
def test_format_size(size: int, text: str) -> None:
    assert format_size(size) == text


@pytest.mark.parametrize("size", [1, 1023, 1024, 50 * MB, 1536 * MB + 1, 3 * GB])
def test_format_size_parses_back(size: int) -> None:
    assert parse_size(format_size(size)) == size


@pytest.mark.parametrize("seconds", [0.001, 0.5, 1.5, 30.0, 90.0, 3600.0, 5400.0])
def test_format_duration_parses_back(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


# --- Upper bounds (issue 12): past them a value is a typo, and some overflow the launcher's timers ------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("597h", '"597h" is too large: a duration must be at most 24h'),
        ("99999999999h", '"99999999999h" is too large'),
        (1e300, "1e+300 is too large"),
        (10**40, "10000000000000000000000000000000000000000 is too large"),
        ("24.001h", '"24.001h" is too large'),
        (86400.001, "86400.001 is too large"),
    ],
)
def test_parse_duration_refuses_more_than_a_day(value: object, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_duration(value)
    assert str(caught.value).startswith(message)


def test_the_maximums_are_accepted_and_can_be_chosen() -> None:
    assert parse_duration("24h") == MAX_TIMEOUT == 86400.0
    assert parse_size("1TB") == MAX_MEMORY
    assert parse_money("$1000000") == MAX_MONEY
    assert parse_duration("2h", maximum=7200) == 7200.0
    with pytest.raises(ValueError, match="at most 1h"):
        parse_duration("2h", maximum=3600)
    with pytest.raises(ValueError, match="at most 1GB"):
        parse_size("2GB", maximum=MAX_OUTPUT)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2TB", '"2TB" is too large: a size must be at most 1TB'),
        ("1e300", '"1e300" is not a size'),
        (1e300, "1e+300 is too large"),
        (2**70, f"{2**70} is too large"),
        ("1" + "0" * 400 + "TB", "a string of"),
    ],
)
def test_parse_size_refuses_more_than_a_terabyte(value: object, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_size(value)
    text = str(caught.value)
    if message == "a string of":  # a value too long to quote is cut short, never printed whole
        assert text.startswith('"1000') and '..." is too large' in text and len(text) < 200
    else:
        assert text.startswith(message)


def test_parse_money_refuses_more_than_a_million_dollars() -> None:
    with pytest.raises(ValueError, match=r"is too large: an amount of money must be at most \$1,000,000"):
        parse_money("$1000000.01")


def test_the_limit_maximums_are_one_table() -> None:
    assert LIMIT_MAXIMUMS == {"timeout": MAX_TIMEOUT, "memory": MAX_MEMORY, "output": MAX_OUTPUT, "files": MAX_FILES}
    assert MAX_TIMEOUT * 1000 < 2**31  # select()/poll() take a timeout in milliseconds as a C int
    assert MAX_DISK == MAX_MEMORY == 1024**4


def test_describe_cuts_long_values() -> None:
    assert describe("x" * 1000) == '"' + "x" * 57 + '..."'
    assert describe(10**100) == "a 101-digit number"


def test_printable_escapes_what_a_terminal_would_act_on() -> None:
    assert printable("plain ünïcødé 😀") == "plain ünïcødé 😀"
    assert printable("\x1b[2J\n\t\x00\ud800\u202e") == "\\x1b[2J\\x0a\\x09\\x00\\ud800\\u202e"
    assert describe("a\x1bb") == '"a\\x1bb"'
