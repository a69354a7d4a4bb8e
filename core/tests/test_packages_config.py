"""sandbox.packages: pinned entries per language, refused at load with their line; a call gets a subset, never more."""

from __future__ import annotations

import pytest
from mainsdk.config import Packages, load_config_text
from mainsdk.driver import Capabilities
from mainsdk.errors import INVALID_OPTION, UNKNOWN_CONFIG_KEY, ConfigError, SandboxError
from mainsdk.packages import parse_pin, select_packages
from mainsdk.preflight import check_packages

CONFIGURED = ("six==1.16.0", "Pandas[excel]==2.2.3")
CAN = Capabilities(isolation="namespace", packages=True)
CANNOT = Capabilities(isolation="microvm")


def test_pinned_packages_load() -> None:
    config = load_config_text("sandbox:\n  packages:\n    python:\n      - six==1.16.0\n      - Pandas[excel]==2.2.3\n")
    assert config.sandbox.packages.python == CONFIGURED
    assert config.sandbox.packages.for_language("python") == CONFIGURED
    assert config.sandbox.packages.for_language("node") == ()
    assert load_config_text("sandbox: {}\n").sandbox.packages == Packages()


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("pandas", "is not pinned"),
        ("numpy>=1.0", "is a range"),
        ("numpy~=1.0", "is a range"),
        ("numpy==1.*", "is a range"),
        ("git+https://example.com/x.git", "is not a pinned package"),
        ("./local/path", "is not a pinned package"),
        ("six==1.16.0; python_version<'3'", "is not a pinned package"),
        ("six @ https://example.com/six.whl", "is not a pinned package"),
        ("12", "expected a pinned package"),
    ],
)
def test_unpinned_or_malformed_entry_is_refused_with_its_line(entry: str, says: str) -> None:
    text = f"sandbox:\n  packages:\n    python:\n      - six==1.16.0\n      - {entry!r}\n"
    if entry == "12":
        text = "sandbox:\n  packages:\n    python:\n      - six==1.16.0\n      - 12\n"
    with pytest.raises(ConfigError) as caught:
        load_config_text(text, source="main.yaml")
    (problem,) = caught.value.problems
    assert problem.code == INVALID_OPTION
    assert problem.key == "sandbox.packages.python[1]"
    assert problem.line == 5
    assert says in problem.message


def test_unknown_language_is_an_unknown_key_with_its_line() -> None:
    text = "sandbox:\n  packages:\n    python: [six==1.16.0]\n    ruby: [rails==7.0.0]\n"
    with pytest.raises(ConfigError) as caught:
        load_config_text(text)
    (problem,) = caught.value.problems
    assert (problem.code, problem.key, problem.line) == (UNKNOWN_CONFIG_KEY, "sandbox.packages.ruby", 4)
    assert "python" in problem.message


def test_a_package_listed_twice_is_refused() -> None:
    text = "sandbox:\n  packages:\n    python:\n      - six==1.16.0\n      - Six==1.17.0\n"
    with pytest.raises(ConfigError, match=r"Six is listed twice"):
        load_config_text(text)


def test_a_string_instead_of_a_list_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"expected a list like \[pandas==2.2.3\]"):
        load_config_text("sandbox:\n  packages:\n    python: six==1.16.0\n")


def test_packages_built_by_hand_are_checked_too() -> None:
    with pytest.raises(SandboxError, match="not pinned"):
        Packages(python=("six",))  # type: ignore[arg-type]  # attrs' converter takes any iterable of pins


def test_pin_normalises_extras_and_keeps_the_name() -> None:
    pin = parse_pin("Pandas[performance,excel]==2.2.3")
    assert (str(pin), pin.key) == ("Pandas[excel,performance]==2.2.3", "pandas")


def test_default_is_every_configured_package_and_a_subset_is_by_name_or_exact_pin() -> None:
    assert select_packages(None, CONFIGURED, "python") == CONFIGURED
    assert select_packages(["pandas"], CONFIGURED, "python") == ("Pandas[excel]==2.2.3",)
    assert select_packages(["six==1.16.0", "SIX"], CONFIGURED, "python") == ("six==1.16.0",)
    assert select_packages([], CONFIGURED, "python") == ()


@pytest.mark.parametrize(
    ("requested", "says"),
    [
        (["numpy"], "'numpy' is not under sandbox.packages.python"),
        (["six==1.17.0"], "asks for another version"),
        ("six", "must be a list"),
        ([3], "is not a package name"),
        (["six>=1"], "is a range"),
    ],
)
def test_asking_for_more_than_configured_is_0001_naming_the_package(requested: object, says: str) -> None:
    with pytest.raises(SandboxError) as caught:
        select_packages(requested, CONFIGURED, "python")
    assert caught.value.code == INVALID_OPTION
    assert says in str(caught.value)


def test_a_driver_without_packages_refuses_a_call_that_would_get_some() -> None:
    config = load_config_text("sandbox:\n  packages:\n    python: [six==1.16.0]\n")
    assert check_packages(None, config, CAN, "local") == ("six==1.16.0",)
    assert check_packages([], config, CANNOT, "e2b") == ()
    with pytest.raises(SandboxError, match="'e2b' driver cannot put packages in a box"):
        check_packages(None, config, CANNOT, "e2b")
    assert check_packages(None, load_config_text("sandbox: {}\n"), CANNOT, "e2b") == ()


@pytest.mark.parametrize("entry", ["six[a b]==1.0", "pan das==1.0", "six==1 .0", "six[a,b c]==1.0"])
def test_a_space_inside_a_name_an_extra_or_the_version_is_refused_with_its_line_not_removed(entry: str) -> None:
    # ``six[a b]`` once loaded as ``six[ab]``: a different package set than the one written.
    text = f"sandbox:\n  packages:\n    python:\n      - six==1.16.0\n      - {entry}\n"
    with pytest.raises(ConfigError) as caught:
        load_config_text(text, source="main.yaml")
    (problem,) = caught.value.problems
    assert (problem.code, problem.key, problem.line) == (INVALID_OPTION, "sandbox.packages.python[1]", 5)
    assert "has a space inside a name, an extra or the version" in problem.message
    with pytest.raises(SandboxError, match="has a space inside"):
        Packages(python=(entry,))  # type: ignore[arg-type]  # attrs' converter takes any iterable


def test_spaces_where_pep_508_allows_them_are_kept_out_of_the_pin() -> None:
    assert str(parse_pin(" Six [ b , a ] == 1.16.0 ")) == "Six[a,b]==1.16.0"
