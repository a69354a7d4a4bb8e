"""An interpreter the box may not execute (weak mode) or use (under /tmp): a config mistake, said as one (#31).

Weak mode runs the code as the box's own host uid. An interpreter under a folder only its owner may enter (a
pyenv or a venv under /root) cannot be executed by it: before, that was a retryable MAIN-SANDBOX-0006 that no
retry could fix; it is a MAIN-SANDBOX-0001 naming the interpreter, its ``sandbox.local`` key and the fix.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mainsdk.errors import INVALID_OPTION, SandboxError

from mainsdk_local import local_sandbox_driver

CONFIG = """
sandbox:
  driver: local
permissions:
  processes: [python3, bash]
"""


@pytest.fixture
def private() -> Iterator[Path]:
    """A folder only its owner (the app's user) may enter, outside /tmp (the launcher refuses programs there)."""
    if not os.path.isdir("/var/tmp"):
        pytest.skip("needs /var/tmp, a temporary folder outside /tmp")
    folder = Path(tempfile.mkdtemp(prefix="mainsdk-weak-interpreter-", dir="/var/tmp"))
    folder.chmod(0o700)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root app gives weak boxes a host uid other than its own")
def test_an_interpreter_the_weak_box_may_not_execute_is_0001_naming_it(
    make_sandbox: Callable[..., Any], private: Path
) -> None:
    bash = private / "bash"  # bash: a copy runs from anywhere (python looks for its library beside itself)
    shutil.copy2(shutil.which("bash") or "/bin/bash", bash)
    bash.chmod(0o700)
    driver = local_sandbox_driver(
        permissions={"processes": ["python3", "bash"]}, programs={"bash": str(bash)}, force_weak=True
    )
    built = make_sandbox(CONFIG, driver=driver)
    with pytest.raises(SandboxError) as caught:
        built.sandbox.run("echo ran", "bash")
    exc = caught.value
    assert (exc.code, exc.retryable, exc.ran) == (INVALID_OPTION, False, False), str(exc)
    assert "sandbox.local.bash" in exc.message and str(bash) in exc.message and "chmod o+x" in exc.message
    assert "weak mode" in exc.message
    private.chmod(0o755)  # the fix the message gives: the box's user may now enter the folder and run the file
    bash.chmod(0o755)
    assert built.sandbox.run("echo ran", "bash").stdout == "ran\n"


@pytest.mark.parametrize("weak", [False, True], ids=["namespace", "weak"])
def test_an_interpreter_under_tmp_is_0001_naming_it(make_sandbox: Callable[..., Any], weak: bool) -> None:
    # Must hold: the box's own /tmp hides the host's, so the launcher refuses an interpreter there before
    # anything runs; that was a non-retryable 0006 "may have run", though it is the config's mistake.
    folder = Path(tempfile.mkdtemp(prefix="mainsdk-tmp-interpreter-", dir="/tmp"))
    try:
        bash = folder / "bash"
        shutil.copy2(shutil.which("bash") or "/bin/bash", bash)
        driver = local_sandbox_driver(
            permissions={"processes": ["python3", "bash"]}, programs={"bash": str(bash)}, force_weak=weak
        )
        with pytest.raises(SandboxError) as caught:
            make_sandbox(CONFIG, driver=driver).sandbox.run("echo ran", "bash")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    exc = caught.value
    assert (exc.code, exc.retryable, exc.ran) == (INVALID_OPTION, False, False), str(exc)
    assert "sandbox.local.bash" in exc.message and str(bash) in exc.message and "outside /tmp" in exc.message
