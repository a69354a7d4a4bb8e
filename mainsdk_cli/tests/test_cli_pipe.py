"""``mainsdk sandbox run ... | head -1``: a reader that goes away is no outage and no traceback."""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path


def test_a_broken_pipe_exits_141_quietly_like_a_cli_killed_by_sigpipe(
    app_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    app_dir("permissions: { processes: [python3] }\n")
    errors = tmp_path / "stderr.txt"
    for extra in ([], ["--json"]):
        command = shlex.join(
            [sys.executable, "-m", "mainsdk_cli", "sandbox", "run", *extra, "--code", "while True: print('line')"]
        )
        # A real pipe to head, as a user types it; PIPESTATUS[0] is mainsdk's own status.
        script = f"{command} 2>{shlex.quote(str(errors))} | head -1; echo status=${{PIPESTATUS[0]}}"
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120, check=False)
        first, status = done.stdout.splitlines()[0], done.stdout.splitlines()[-1]
        assert first in ("line", "{"), done.stdout
        assert status == "status=141", (done.stdout, errors.read_text())
        assert errors.read_text() == "", "no traceback and no MAIN-SANDBOX-0006 on a closed pipe"
