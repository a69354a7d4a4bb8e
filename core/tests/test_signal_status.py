"""How a driver's view of a command's end becomes the result's exit code and signal (the shell's 128 + N)."""

from __future__ import annotations

import pytest
from mainsdk.limits import signal_status


@pytest.mark.parametrize(
    ("exit_code", "signal", "expected"),
    [
        (None, 11, (139, "SIGSEGV")),
        (None, 9, (137, "SIGKILL")),
        (None, "SIGSEGV", (139, "SIGSEGV")),
        (None, "segv", (139, "SIGSEGV")),
        (None, "SIGIOT", (134, "SIGABRT")),  # an alias gets the canonical name
        (-11, 11, (139, "SIGSEGV")),  # whatever the driver put in exit_code, the signal decides
        (None, 40, (168, None)),  # a real-time signal: 128 + N, no name of its own
        (0, None, (0, None)),
        (139, None, (139, None)),  # `exit 139` is not a crash
        (None, None, (None, None)),
        (None, "SIGNOPE", (None, None)),  # a name no Linux has: not invented
        (None, 0, (None, None)),
        (None, 65, (None, None)),
        (None, True, (None, None)),
    ],
)
def test_a_signal_becomes_128_plus_n_and_its_name(
    exit_code: int | None, signal: int | str | None, expected: tuple[int | None, str | None]
) -> None:
    assert signal_status(exit_code, signal, None) == expected


def test_a_stop_reports_no_signal() -> None:
    # The sandbox ended the run at a limit; the signal it used is not the code's.
    assert signal_status(None, 9, "timeout") == (None, None)
    assert signal_status(None, 9, "memory") == (None, None)
    assert signal_status(1, None, "memory") == (1, None)  # a Python MemoryError exits by itself
