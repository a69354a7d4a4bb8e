from decimal import Decimal

import pytest
from mainsdk.units import format_duration, format_size, parse_duration, parse_money, parse_size

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
