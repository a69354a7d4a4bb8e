"""A crash is not a success: a command killed by a signal reports 128 + N and the signal's name, in both modes.

Namespace mode reads the code's status from the worker's report (B reaps C); weak mode from the server's own
waitpid of C. Both must come back the same way.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

from mainsdk_local import local_sandbox_driver

SEGFAULT = "import ctypes; ctypes.string_at(0)"
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.parametrize("weak", [False, True], ids=["namespace", "weak"])
def test_a_crash_reports_the_signal_in_both_modes(make_sandbox: Callable[..., Any], weak: bool) -> None:
    # Weak mode runs the code as the box's uid on the host: it needs a python that uid can read (not pyenv's).
    if weak and not os.path.exists(SYSTEM_PYTHON):
        pytest.skip(f"weak mode needs {SYSTEM_PYTHON}, readable by the box's uid")
    programs = {"python": SYSTEM_PYTHON} if weak else None
    sandbox = make_sandbox(driver=local_sandbox_driver(force_weak=weak, programs=programs)).sandbox
    assert sandbox.capabilities().reports_signals
    segv = sandbox.run(SEGFAULT)
    assert (segv.isolation == "weak") is weak
    assert (segv.exit_code, segv.signal, segv.stop, segv.ok) == (139, "SIGSEGV", None, False)
    killed = sandbox.run("echo before; kill -9 $$; echo after", "bash")
    assert (killed.stdout, killed.exit_code, killed.signal, killed.stop) == ("before\n", 137, "SIGKILL", None)
    term = sandbox.run("kill -TERM $$", "bash")
    assert (term.exit_code, term.signal) == (143, "SIGTERM")
    clean = sandbox.run("print('fine')")
    assert (clean.exit_code, clean.signal, clean.ok) == (0, None, True)


def test_a_crash_is_in_the_audit_event_as_its_exit_code(make_sandbox: Callable[..., Any]) -> None:
    built = make_sandbox()
    built.sandbox.run(SEGFAULT)
    assert [(e.kind, e.exit_code, e.stop) for e in built.events] == [("run", 139, None)]


def test_the_timeout_stop_is_not_reported_as_a_signal(make_sandbox: Callable[..., Any]) -> None:
    # The launcher kills at the deadline with SIGKILL; that is the sandbox's stop, not the code's crash.
    result = make_sandbox().sandbox.run("import time; time.sleep(30)", limits={"timeout": "1s"})
    assert (result.stop, result.exit_code, result.signal) == ("timeout", None, None)
