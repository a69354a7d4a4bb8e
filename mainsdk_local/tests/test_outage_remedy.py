"""An outage of the local driver names what to check here (the launcher, namespaces, /tmp), not a provider's token."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import pytest
from mainsdk import SandboxError
from mainsdk.errors import DRIVER_UNAVAILABLE

from mainsdk_local import local_sandbox_driver


def test_a_launcher_killed_mid_run_is_an_outage_naming_local_remedies(make_sandbox: Callable[..., Any]) -> None:
    driver = local_sandbox_driver()
    sandbox = make_sandbox(driver=driver).sandbox
    assert "launcher" in sandbox.capabilities().outage_remedy
    started = threading.Event()

    def on_output(stream: str, data: bytes) -> None:
        started.set()

    def kill_launcher() -> None:
        if started.wait(30):
            proc = driver._launcher._proc
            assert proc is not None
            os.kill(proc.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_launcher)
    killer.start()
    with pytest.raises(SandboxError) as caught:
        sandbox.run("import time; print('up', flush=True); time.sleep(30)", on_output=on_output)
    killer.join()
    error = caught.value
    assert error.code == DRIVER_UNAVAILABLE
    assert "local launcher" in error.message and "/tmp" in error.message and "namespaces" in error.message
    assert "provider" not in error.message and "token" not in error.message
