"""How the cell kernel reaches a real local box: the loader on the command line, the package on the app's stdin.

Issue 32: the kernel used to travel as one ``-c`` argument, which Linux refuses past 128 KiB; now no process in a
box carries it on its command line, and its size has no such ceiling.
"""

from __future__ import annotations

import ast
import json
import shutil
from collections.abc import Mapping

import pytest
from mainsdk import AsyncSandbox, kernel_start

needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="JavaScript cells need node (.ci/run installs it)")
PADDING = 600 * 1024  # a module far past the 128 KiB a single argument may hold

# Every process a cell can see in its box, by program, with the size of its longest command line: in each language.
COMMAND_LINES = {
    "python": """
import os
sizes = {}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            line = f.read()
    except OSError:
        continue
    name = os.path.basename(line.split(b"\\0")[0].decode(errors="replace"))
    sizes[name] = max(len(line), sizes.get(name, 0))
print(sorted(sizes.items()))
""",
    "javascript": """
const fs = require("fs");
const sizes = {};
for (const pid of fs.readdirSync("/proc").filter((p) => /^[0-9]+$/.test(p))) {
  let line;
  try { line = fs.readFileSync(`/proc/${pid}/cmdline`); } catch { continue; }
  const name = line.subarray(0, Math.max(line.indexOf(0), 0)).toString().split("/").pop();
  sizes[name] = Math.max(line.length, sizes[name] || 0);
}
console.log(JSON.stringify(Object.entries(sizes).sort()));
""",
    "bash": """
for f in /proc/[0-9]*/cmdline; do
  n=$(wc -c < "$f" 2>/dev/null) || continue
  p=$(tr '\\0' '\\n' < "$f" 2>/dev/null | head -n 1)
  printf '%s %s\\n' "${p##*/}" "$n"
done
""",
}


async def test_a_kernel_whose_modules_pass_the_argument_limit_starts_and_runs_cells(
    async_sandbox: AsyncSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    padded: Mapping[str, str] = {**kernel_start.kernel_files(), "padding.py": f"PAD = {'x' * PADDING!r}\n"}
    assert sum(len(text.encode()) for text in padded.values()) > 4 * 128 * 1024
    monkeypatch.setattr(kernel_start, "kernel_files", lambda: padded)
    async with async_sandbox.create() as session:
        # The module came through whole: the executor imports it from the package the app sent.
        result = await session.run_code("import mainsdk_kernel.padding as p\nlen(p.PAD)")
        assert result.error is None and result.text == str(PADDING)
        assert (await session.run_code("6 * 7")).text == "42"


@needs_node
async def test_no_process_in_a_cells_box_carries_more_than_16_kib_on_its_command_line(
    async_sandbox: AsyncSandbox,
) -> None:
    async with async_sandbox.create() as session:
        for language, code in COMMAND_LINES.items():
            result = await session.run_code(code, language=language)
            assert result.error is None, (language, result.error)
            if language == "bash":
                pairs = [line.rsplit(" ", 1) for line in result.stdout.splitlines() if line]
                sizes = {name: int(n) for name, n in pairs}
            else:
                sizes = dict(json.loads(result.stdout) if language == "javascript" else ast.literal_eval(result.stdout))
            # This language's executor is among those seen (the supervisor is undumpable: the box may hide it).
            program = {"python": "python3", "javascript": "node", "bash": "bash"}[language]
            assert any(name.startswith(program) for name in sizes), (language, sizes)
            assert max(sizes.values()) <= 16 * 1024, (language, sizes)
