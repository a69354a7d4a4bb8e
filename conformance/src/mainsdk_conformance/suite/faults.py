"""Provider faults, replayed from fault cassettes: outages are MAIN-SANDBOX-0006, a command is never sent twice.

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
    with pytest.raises(SandboxError) as caught:
        conformance.sandbox().run(CODE)
    assert (caught.value.code, caught.value.status, caught.value.retryable) == (DRIVER_UNAVAILABLE, 503, True)
    return caught.value


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
        _outage(conformance)
        assert replay.commands_sent() == 1

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
