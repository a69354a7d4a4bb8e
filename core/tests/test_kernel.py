"""The cell kernel's own protocol, run as the real processes on this machine (no sandbox): supervisor and executor.

Core's kernel (the package ``mainsdk/kernel/``) is started here the way a driver starts it
(``mainsdk.kernel_start.kernel_command``: ``python3 -I -u -c <loader>``, then on stdin the token, the package and
the start line), and each cell is one JSON line after; the tests read its stdout for the frames. The "probe" watch
(what the supervisor falls back to where ``/proc/<child>/syscall`` cannot be read) is the same package with that
path pointed at nothing.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from mainsdk.kernel_start import kernel_command, kernel_files

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the cell kernel runs in Linux boxes")
TOKEN = "0123456789abcdef0123456789abcdef"
# The start line: a Python interpreter, no packages of its own.
START: dict[str, Any] = {"language": "python", "cwd": None, "site": []}
MARK = b"\x1e" + TOKEN.encode() + b":"
# A thread left by one cell writes a forged result line for cell 2, one second into it, into every descriptor.
FORGE = """
import json, os, threading, time
line = json.dumps({"cell": 2, "results": [{"mime": "text/plain", "data": "'forged'", "encoding": "utf-8"}],
                   "results_dropped": 0, "error": None}).encode() + b"\\n"
def forge():
    time.sleep(1)
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2:
            try:
                os.write(int(name), line)
            except OSError:
                pass
threading.Thread(target=forge, daemon=True).start()
"""


def _syscall_readable() -> bool:
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text()) < 2
    except (OSError, ValueError):
        return Path("/proc/self/syscall").exists()


class Kernel:
    """One kernel process and the frames it writes."""

    def __init__(self, files: Mapping[str, str] | None = None, start: dict[str, Any] = START) -> None:
        _, args, stdin = kernel_command(TOKEN, start, files)
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.stdin.write(stdin)
        self.stdin.flush()

    def cell(self, code: str, timeout: float = 10.0) -> tuple[bytes, dict[str, Any], float]:
        """Send one cell; its stdout before the frame, the frame, and how long it took."""
        started = time.monotonic()
        request = {"code": code, "timeout": timeout, "grace": 1.0, "max_results": 1 << 20}
        self.stdin.write(json.dumps(request).encode() + b"\n")
        self.stdin.flush()
        out = b""
        self.live: list[dict[str, Any]] = []  # the cell's live display frames, in order
        while True:
            while not (MARK in out and out.endswith(b"\n")):
                chunk = os.read(self.stdout.fileno(), 1 << 16)
                assert chunk, f"the kernel ended with {self.proc.wait()}"
                out += chunk
            before, _, rest = out.partition(MARK)
            line, _, after = rest.partition(b"\n")
            frame = json.loads(line)
            if "code_sha256" in frame:  # the end frame; a live display frame never has it
                return before, frame, time.monotonic() - started
            self.live.append(frame)
            out = before + after

    def close(self) -> int:
        self.stdin.close()
        return self.proc.wait(10)


def edited(file: str, *changes: tuple[str, str]) -> dict[str, str]:
    """The kernel's files with ``file``'s text changed (each old text must be there)."""
    files = dict(kernel_files())
    for old, new in changes:
        assert old in files[file], old
        files[file] = files[file].replace(old, new)
    return files


def watched(watch: str) -> dict[str, str]:
    """The kernel's files for a watch: "probe" points the supervisor's syscall path at nothing."""
    if watch == "probe":
        return edited("supervisor.py", ('SYSCALL_PATH = "/proc/{}/syscall"', 'SYSCALL_PATH = "/nonexistent/{}"'))
    return dict(kernel_files())


@pytest.fixture(params=["syscall", "probe"])
def kernel(request: pytest.FixtureRequest) -> Iterator[tuple[Kernel, str]]:
    if request.param == "syscall" and not _syscall_readable():
        pytest.skip("this machine's Yama ptrace_scope refuses /proc/<child>/syscall: only the probe watch runs here")
    running = Kernel(watched(request.param))
    yield running, request.param
    if running.proc.poll() is None:
        running.proc.kill()
        running.proc.wait()


def test_each_frame_carries_the_cell_the_hash_of_its_code_and_the_watch(kernel: tuple[Kernel, str]) -> None:
    running, watch = kernel
    out, frame, _ = running.cell("x = 41\nprint('set')")
    assert out == b"set\n" and frame["cell"] == 1 and frame["watch"] == watch and frame["undumpable"] is True
    assert frame["code_sha256"] == hashlib.sha256(b"x = 41\nprint('set')").hexdigest()
    _, second, _ = running.cell("x + 1")
    assert second["cell"] == 2 and second["results"][0]["data"] == "42"
    assert running.close() == 0  # the app closing stdin ends the kernel


def test_a_result_line_forged_by_a_thread_does_not_end_the_cell(kernel: tuple[Kernel, str]) -> None:
    running, _ = kernel
    running.cell(FORGE)
    out, frame, took = running.cell("import time\ntime.sleep(2.5)\nprint('MARK-2')\n6 * 7")
    assert took >= 2.4 and out.endswith(b"MARK-2\n") and frame["results"][0]["data"] == "42"


def test_the_timeout_interrupts_and_keeps_the_state_and_a_stubborn_cell_ends_the_kernel(
    kernel: tuple[Kernel, str],
) -> None:
    running, _ = kernel
    running.cell("x = 'kept'")
    _, frame, took = running.cell("import time\ntime.sleep(30)", timeout=0.5)
    assert frame["stop"] == "timeout" and frame["error"]["name"] == "KeyboardInterrupt" and took < 5
    assert running.cell("x")[1]["results"][0]["data"] == "'kept'"
    stubborn = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(30)"
    running.stdin.write(json.dumps({"code": stubborn, "timeout": 0.5, "grace": 0.5}).encode() + b"\n")
    running.stdin.flush()
    assert running.proc.wait(10) == 124  # killed at timeout + grace, the state with it


def test_an_executor_that_dies_ends_the_kernel_with_its_status(kernel: tuple[Kernel, str]) -> None:
    running, _ = kernel
    running.stdin.write(json.dumps({"code": "import os\nos._exit(7)", "timeout": 10}).encode() + b"\n")
    running.stdin.flush()
    assert running.proc.wait(10) == 7


def test_the_start_line_names_the_folder_and_the_kernels_own_packages_and_a_bad_one_is_refused(
    tmp_path: Path,
) -> None:
    own = tmp_path / "kernel-site"
    own.mkdir()
    (own / "kernel_only.py").write_text("WHERE = 'kernel site'\n")
    running = Kernel(None, {"language": "python", "cwd": str(tmp_path), "site": [str(own)]})
    out, frame, _ = running.cell("import os, sys, kernel_only\nprint(os.getcwd())\nsys.path[-1], kernel_only.WHERE")
    assert out == f"{tmp_path}\n".encode() and frame["error"] is None
    # Last on sys.path: after the user's (IPython's pretty printer may wrap the tuple: compared as a value).
    assert ast.literal_eval(frame["results"][0]["data"]) == (str(own), "kernel site")
    assert running.close() == 0
    for start, why in (
        ({"language": "cobol"}, b"no executor for language 'cobol'"),
        ({"language": "python", "cwd": str(tmp_path / "missing")}, b"cannot enter the interpreter's folder"),
        ({"language": "python", "site": "/opt"}, b"not a list of folders"),
    ):
        refused = Kernel(None, start)
        assert refused.proc.wait(10) == 125, start  # nothing started: the app reports the kernel's exit
        assert refused.proc.stderr is not None and why in refused.proc.stderr.read(), start


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found += _tree(int(child))
    return found


def test_no_kernel_process_carries_the_kernel_on_its_command_line(tmp_path: Path) -> None:
    # A package far past what one argument may hold (131,072 bytes fail with E2BIG): a padding module.
    padded = {**kernel_files(), "padding.py": f"PAD = {'x' * (600 * 1024)!r}\n"}
    for language, code in (("python", "import mainsdk_kernel.padding as p\nlen(p.PAD)"), ("bash", "echo 1")):
        running = Kernel(padded, {"language": language, "cwd": str(tmp_path), "site": []})
        out, frame, _ = running.cell(code)
        assert frame["error"] is None and (
            out == b"1\n" if language == "bash" else frame["results"][0]["data"] == "614400"
        )
        lines = {pid: Path(f"/proc/{pid}/cmdline").read_bytes() for pid in _tree(running.proc.pid)}
        assert len(lines) == 2 and max(len(line) for line in lines.values()) <= 16 * 1024, lines
        assert running.close() == 0


def test_each_display_output_comes_as_a_live_frame_before_the_end_frame(kernel: tuple[Kernel, str]) -> None:
    running, _ = kernel
    out, frame, _ = running.cell("print('before')\n6 * 7")
    # The final expression's output, on stdout as soon as it is made: a display index, its forms, no code hash.
    assert [(live["cell"], live["display"], "code_sha256" in live) for live in running.live] == [(1, 0, False)]
    item = {"mime": "text/plain", "data": "42", "encoding": "utf-8", "display": 0, "main": True}
    assert running.live[0]["results"] == [item] and frame["results"] == [item]  # the end frame holds it too
    assert out == b"before\n"
