"""A crash is not a success: a command killed by a signal reports 128 + N and the signal's name, in both modes.

Namespace mode reads the code's status from the worker's report (B reaps C); weak mode from the server's own
waitpid of C. Both must come back the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from typing import Any

import pytest
from as_nobody import readable_copy_of_imports

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


# The app as nobody: no writable cgroup, so the memory limit is RLIMIT_AS and nothing records why a process
# died. A crash must still be a crash, and a memory stop needs evidence (the code's own out-of-memory error).
AS_NOBODY_CRASH = """
import json, site, sys
site.addsitedir(sys.argv[1])
from mainsdk import Sandbox, SandboxDeps
from mainsdk.config import load_config_text
from mainsdk_local import local_sandbox_driver
config = load_config_text("sandbox: {driver: local, limits: {memory: 64MB}}\\n")
sandbox = Sandbox(SandboxDeps(config=config, driver=local_sandbox_driver(programs={"python": "/usr/bin/python3"}),
                              load_entrypoints=False))
segv = sandbox.run("import ctypes; ctypes.string_at(0)")
killed = sandbox.run("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
oom = sandbox.run("b = bytearray(300 << 20)")
sandbox.close()
print(json.dumps({"scope": segv.memory_limit_scope, "segv": [segv.exit_code, segv.signal, segv.stop],
                  "killed": [killed.exit_code, killed.signal, killed.stop], "oom": [oom.stop, oom.signal]}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="running the app as another user needs root")
def test_a_crash_under_a_per_process_memory_limit_is_not_called_a_memory_stop() -> None:
    if not os.path.exists(SYSTEM_PYTHON) or shutil.which("setpriv") is None:
        pytest.skip(f"needs {SYSTEM_PYTHON} and setpriv")
    version = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if version != str(sys.version_info[:2]):
        pytest.skip(f"{SYSTEM_PYTHON} is {version}, not this venv's Python: it cannot import the venv's packages")
    readable = readable_copy_of_imports(sysconfig.get_paths()["purelib"], "mainsdk", "mainsdk_local")
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
         SYSTEM_PYTHON, "-c", AS_NOBODY_CRASH, readable],
        capture_output=True, text=True, timeout=120, check=False, cwd="/",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.splitlines()[-1])
    assert answer["scope"] == "process", answer
    assert answer["segv"] == [139, "SIGSEGV", None], answer
    assert answer["killed"] == [137, "SIGKILL", None], answer
    assert answer["oom"] == ["memory", None], answer  # Python's MemoryError: the evidence of a memory stop
