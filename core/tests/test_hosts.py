import pytest
from mainsdk.hosts import host_covered, host_matches, validate_host_pattern


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("pypi.org", "pypi.org"),
        ("PyPI.org", "pypi.org"),
        ("files.pythonhosted.org.", "files.pythonhosted.org"),
        ("*.example.com", "*.example.com"),
        ("*.Example.COM", "*.example.com"),
        ("api-1.example.co.uk", "api-1.example.co.uk"),
        ("localhost", "localhost"),
        ("127.0.0.1", "127.0.0.1"),
        ("203.0.113.7", "203.0.113.7"),
        ("::1", "::1"),
        ("[::1]", "::1"),
        ("2001:DB8:0:0::1", "2001:db8::1"),
        ("xn--bcher-kva.de", "xn--bcher-kva.de"),
    ],
)
def test_valid_host_patterns_are_normalised(text: str, normalised: str) -> None:
    assert validate_host_pattern(text) == normalised


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ("https://pypi.org", "is a URL"),
        ("pypi.org/simple", "has a path"),
        ("pypi.org:443", "has a port"),
        ("[::1]:8080", "has a port"),
        ("pypi .org", "contains a space"),
        ("a.com b.com", "contains a space"),
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("pypi..org", "has an empty label"),
        (".pypi.org", "has an empty label"),
        ("*.", "would allow every host"),
        ("*..example.com", "has an empty label"),
        ("*", "would allow every host"),
        ("*.*.example.com", "has more than one *"),
        ("a.*.example.com", "has a * that is not a leading *. label"),
        ("*example.com", "has a * that is not a leading *. label"),
        ("api.*", "has a * that is not a leading *. label"),
        ("*.com", "is too broad"),
        ("-bad.example.com", 'has a label "-bad"'),
        ("under_score.example.com", 'has a label "under_score"'),
        ("bücher.de", 'has a label "bücher"'),
        ("a" * 64 + ".com", "has a label"),
        ("256.1.1.1", "is not a valid IP address"),
        ("1.2.3", "is not a valid IP address"),
    ],
)
def test_invalid_host_patterns_say_what_is_wrong(text: str, fault: str) -> None:
    with pytest.raises(ValueError) as caught:
        validate_host_pattern(text)
    message = str(caught.value)
    assert fault in message
    assert "like" in message  # every message shows a form that works


@pytest.mark.parametrize("value", [None, 443, ["pypi.org"], {"host": "pypi.org"}])
def test_non_text_is_not_a_host(value: object) -> None:
    with pytest.raises(ValueError, match="is not a host"):
        validate_host_pattern(value)


@pytest.mark.parametrize(
    ("host", "pattern", "expected"),
    [
        ("pypi.org", "pypi.org", True),
        ("PyPI.org", "pypi.org", True),
        ("pypi.org.", "pypi.org", True),
        ("pypi.org", "PYPI.ORG.", True),
        ("files.pypi.org", "pypi.org", False),
        ("pypi.org", "pypi.org.evil.com", False),
        ("a.example.com", "*.example.com", True),
        ("a.b.example.com", "*.example.com", True),
        ("A.Example.com.", "*.example.com", True),
        ("example.com", "*.example.com", False),
        ("badexample.com", "*.example.com", False),
        ("example.com.evil.org", "*.example.com", False),
        ("127.0.0.1", "127.0.0.1", True),
        ("0:0::1", "::1", True),
        ("[::1]", "::1", True),
        ("127.0.0.2", "127.0.0.1", False),
        ("localhost", "127.0.0.1", False),
    ],
)
def test_host_matches(host: str, pattern: str, expected: bool) -> None:
    assert host_matches(host, pattern) is expected


def test_host_covered_by_any_pattern() -> None:
    patterns = ["pypi.org", "*.pythonhosted.org"]
    assert host_covered("pypi.org", patterns)
    assert host_covered("files.pythonhosted.org", patterns)
    assert not host_covered("pythonhosted.org", patterns)
    assert not host_covered("github.com", patterns)
    assert not host_covered("pypi.org", [])


@pytest.mark.parametrize(
    ("wildcard", "patterns", "expected"),
    [
        ("*.example.com", ["*.example.com"], True),
        ("*.a.example.com", ["*.example.com"], True),  # a broader wildcard covers a narrower one
        ("*.example.com", ["a.example.com"], False),
        ("*.example.com", ["a.example.com", "b.example.com", "example.com"], False),
        ("*.example.com", ["*.a.example.com"], False),  # a narrower wildcard does not cover a broader one
        ("*.example.com", ["*.other.com"], False),
    ],
)
def test_wildcard_is_covered_only_by_the_same_or_a_broader_wildcard(
    wildcard: str, patterns: list[str], expected: bool
) -> None:
    assert host_covered(wildcard, patterns) is expected
