"""Provider faults, replayed from fault cassettes: outages are MAIN-SANDBOX-0006, a command is never sent twice.

An outage is ``retryable`` only when the command was never sent (``ran=False``); once it
was sent, the code may have run, so the error says ``ran`` is not False and is not retryable.

Each test's cassette is authored for the driver from the provider's documented
protocol (``meta.made: authored``); the test checks that the cassette holds the
fault it is about, so a wrong cassette cannot pass for nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from mainsdk import SandboxError
from mainsdk.errors import DRIVER_UNAVAILABLE

from mainsdk_conformance.marks import requires
from mainsdk_conformance.suite._helpers import DEADLINE_GRACE
from mainsdk_conformance.target import Conformance

CODE = "print('fault')"


def _replay(conformance: Conformance) -> Any:
    assert conformance.replay is not None
    return conformance.replay


def _outage(conformance: Conformance) -> SandboxError:
    """Run into the cassette's fault: an outage, retryable exactly when the command was never sent."""
    with pytest.raises(SandboxError) as caught:
        conformance.sandbox().run(CODE)
    error = caught.value
    assert (error.code, error.status) == (DRIVER_UNAVAILABLE, 503), error
    if _replay(conformance).commands_sent() == 0:
        # Nothing was sent: a blind retry cannot run the code twice.
        assert (error.ran, error.retryable) == (False, True), error
    else:
        # The command was sent: it may have run, and a retry could run it twice.
        assert error.ran is not False and not error.retryable, error
        assert "not retryable" in error.message
    return error


@requires("replay")
class TestFaults:
    """What the driver answers when the provider fails."""

    def test_429_with_retry_after_is_retried_after_the_wait(self, conformance: Conformance) -> None:
        replay = _replay(conformance)
        assert replay.cassette.has_status(429, header="retry-after"), "the cassette holds no 429 with Retry-After"
        assert conformance.sandbox().run(CODE).stdout == "fault\n"
        assert replay.retry_after_violations() == []

    def test_503_is_0006_and_retryable(self, conformance: Conformance) -> None:
        assert _replay(conformance).cassette.has_status(503), "the cassette holds no 503"
        _outage(conformance)

    def test_a_reset_mid_stream_is_0006_and_the_command_is_not_sent_again(self, conformance: Conformance) -> None:
        replay = _replay(conformance)
        assert replay.cassette.has_fault("reset"), "the cassette holds no reset"
        error = _outage(conformance)
        assert replay.commands_sent() == 1
        assert (error.ran, error.retryable) == (None, False), "a cut stream may have run the code"

    def test_a_sandbox_that_vanished_mid_run_is_0006(self, conformance: Conformance) -> None:
        assert _replay(conformance).cassette.has_status(404), "the cassette holds no 404"
        _outage(conformance)

    def test_a_response_past_the_deadline_stops_the_run_at_its_time_limit(self, conformance: Conformance) -> None:
        replay = _replay(conformance)
        assert replay.cassette.has_fault("delay"), "the cassette holds no delay"
        result = conformance.sandbox().run(CODE, limits={"timeout": "1s"})
        assert (result.stop, result.exit_code) == ("timeout", None)
        assert result.duration < 1 + DEADLINE_GRACE
        assert replay.commands_sent() == 1
