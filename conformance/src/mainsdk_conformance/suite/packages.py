"""Packages in the box (``sandbox.packages``), on drivers that declare ``Capabilities.packages``, and a clean
refusal on drivers that do not.

The packages come from the driver's installer and the app's package index: a small pure-Python wheel
(``six==1.16.0``), so a driver run live builds its set in a second or two.
"""

from __future__ import annotations

import pytest
from mainsdk import Capabilities, SandboxError
from mainsdk.errors import INVALID_OPTION

from mainsdk_conformance.marks import LIVE, requires
from mainsdk_conformance.target import Conformance

SIX = "six==1.16.0"
PACKAGES = {"sandbox": {"packages": {"python": [SIX]}}}


@requires("packages", LIVE)
class TestPackages:
    """A configured pin is importable; a call gets a subset, never more; an unbuildable set runs nothing."""

    def test_a_configured_package_is_importable_and_packages_empty_leaves_it_out(
        self, conformance: Conformance
    ) -> None:
        sandbox = conformance.sandbox(PACKAGES)
        result = sandbox.run("import six\nprint(six.__version__)")
        assert (result.exit_code, result.stdout) == (0, "1.16.0\n"), result.stderr
        without = sandbox.run("import six", packages=[])
        assert without.exit_code == 1 and "No module named 'six'" in without.stderr

    def test_a_package_not_configured_is_refused_and_nothing_starts(self, conformance: Conformance) -> None:
        built = conformance.build(PACKAGES)
        with pytest.raises(SandboxError) as caught:
            built.sandbox.run("print(1)", packages=["requests"])
        assert caught.value.code == INVALID_OPTION and "requests" in caught.value.message
        assert built.started == []

    def test_a_set_that_cannot_be_built_is_one_0001_naming_the_package(self, conformance: Conformance) -> None:
        sandbox = conformance.sandbox({"sandbox": {"packages": {"python": [SIX, "doesnotexist-xyz==1.0"]}}})
        with pytest.raises(SandboxError) as caught:
            sandbox.run("print('ran')")
        assert caught.value.code == INVALID_OPTION and caught.value.ran is False
        assert "doesnotexist-xyz==1.0" in caught.value.message


class TestNoPackages:
    """A driver without packages refuses a call that would get some, and starts nothing."""

    def test_a_call_that_would_get_packages_is_refused_without_them(
        self, conformance: Conformance, conformance_capabilities: Capabilities
    ) -> None:
        if conformance_capabilities.packages:
            pytest.skip(f"driver {conformance.driver_id} declares packages")
        built = conformance.build(PACKAGES)
        with pytest.raises(SandboxError) as caught:
            built.sandbox.run("print(1)")
        assert caught.value.code == INVALID_OPTION and "packages=[]" in caught.value.message
        assert built.started == []
