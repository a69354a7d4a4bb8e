"""The runtime codes a call or a driver can cause that the other classes do not: 0001, 0006 and 0011."""

from __future__ import annotations

import functools

import pytest
from mainsdk import Capabilities, SandboxError
from mainsdk.driver import LANGUAGES
from mainsdk.errors import DRIVER_UNAVAILABLE, INVALID_OPTION, LOCAL_IN_PRODUCTION

from mainsdk_conformance.marks import requires
from mainsdk_conformance.suite._helpers import refused
from mainsdk_conformance.target import Conformance


class TestErrors:
    """Each refusal carries its code and status, and nothing runs."""

    def test_an_unknown_language_is_refused(self, conformance: Conformance) -> None:
        built = conformance.build()
        error = refused(built, lambda: built.sandbox.run("print(1)", "cobol"), INVALID_OPTION)
        assert error.status == 400 and not error.retryable and "cobol" in error.message
        assert error.ran is False  # a refusal ran nothing

    def test_empty_code_is_refused(self, conformance: Conformance) -> None:
        built = conformance.build()
        refused(built, lambda: built.sandbox.run("  \n"), INVALID_OPTION)
        refused(built, lambda: built.sandbox.run(b"print(1)"), INVALID_OPTION)  # type: ignore[arg-type]

    def test_a_language_the_driver_does_not_run_is_refused(
        self, conformance: Conformance, conformance_capabilities: Capabilities
    ) -> None:
        missing = [language for language in LANGUAGES if language not in conformance_capabilities.languages]
        if not missing:
            pytest.skip(f"driver {conformance.driver_id} runs every language")
        built = conformance.build()
        for language in missing:
            error = refused(built, functools.partial(built.sandbox.run, "1", language), INVALID_OPTION)
            assert "does not run" in error.message

    @requires("unavailable")
    def test_an_unavailable_backend_is_0006_and_retryable(self, conformance: Conformance) -> None:
        built = conformance.build(factory=conformance.target.unavailable)
        with pytest.raises(SandboxError) as caught:
            built.sandbox.run("print(1)")
        assert (caught.value.code, caught.value.status, caught.value.retryable) == (DRIVER_UNAVAILABLE, 503, True)
        assert caught.value.ran is False  # the backend never started a box: a retry cannot run the code twice
        assert [(e.kind, e.error) for e in built.events] == [("run", DRIVER_UNAVAILABLE)]

    def test_production(self, conformance: Conformance, conformance_capabilities: Capabilities) -> None:
        built = conformance.build(environment="production")
        if conformance_capabilities.production:
            assert built.sandbox.run("print(1)").stdout == "1\n"
            return
        error = refused(built, lambda: built.sandbox.run("print(1)"), LOCAL_IN_PRODUCTION)
        assert "production" in error.message
