"""``mainsdk sandbox mcp`` as its users expect (issue 15), through the ``mcp`` package's real stdio client.

Progress while a run goes on, the output as its messages, out files as
content clients render (a PNG as an image), a timeout that can only lower the
limit, tool annotations and an output schema, and a session kept across calls.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

CONFIG = """
sandbox:
  driver: local
  limits: { timeout: 10s }
permissions:
  processes: [python3, bash]
"""

# A valid 1x1 PNG made in the box with the standard library only.
PNG_CODE = """
import struct, zlib
def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data) & 0xffffffff)
png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0))
png += chunk(b'IDAT', zlib.compress(b'\\x00\\xff\\x00\\x00')) + chunk(b'IEND', b'')
open('../out/plot.png', 'wb').write(png)
open('../out/table.csv', 'w').write('a,b\\n1,2\\n')
print('drawn')
"""


@asynccontextmanager
async def mcp_client(*extra: str, logs: list[Any] | None = None) -> AsyncIterator[ClientSession]:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mainsdk_cli", "sandbox", "mcp", "--language", "python", *extra],
        cwd=str(Path.cwd()),
    )

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        if logs is not None:
            logs.append(params)

    async with stdio_client(server) as (read, write), ClientSession(read, write, logging_callback=on_log) as session:
        await session.initialize()
        yield session


async def test_the_server_lists_and_runs_the_tool(app_dir: Callable[[str], Path]) -> None:
    app_dir(CONFIG)
    async with mcp_client() as session:
        tools = (await session.list_tools()).tools
        assert [t.name for t in tools] == ["code_run"]
        assert tools[0].input_schema["properties"]["language"]["enum"] == ["python"]
        ran = await session.call_tool("code_run", {"code": "print(6 * 7)"})
        assert not ran.is_error and isinstance(ran.content[0], types.TextContent)
        assert json.loads(ran.content[0].text)["stdout"] == "42\n"
        refused = await session.call_tool("code_run", {"code": "echo hi", "language": "bash"})
        assert refused.is_error and isinstance(refused.content[0], types.TextContent)
        assert "not allowed" in refused.content[0].text


async def test_the_tool_says_what_it_is(app_dir: Callable[[str], Path]) -> None:
    app_dir(CONFIG)
    async with mcp_client() as session:
        [tool] = (await session.list_tools()).tools
    assert tool.annotations is not None
    assert (tool.annotations.read_only_hint, tool.annotations.open_world_hint) == (False, False)  # no hosts
    assert tool.output_schema is not None and "files" in tool.output_schema["properties"]
    assert "timeout" in tool.input_schema["properties"]


async def test_open_world_only_when_hosts_are_configured(app_dir: Callable[[str], Path]) -> None:
    app_dir(CONFIG.replace("  limits:", "  network: [api.example.com]\n  limits:"))
    async with mcp_client() as session:
        [tool] = (await session.list_tools()).tools
    assert tool.annotations is not None and tool.annotations.open_world_hint is True


async def test_a_png_comes_back_as_image_content(app_dir: Callable[[str], Path]) -> None:
    app_dir(CONFIG)
    async with mcp_client() as session:
        ran = await session.call_tool("code_run", {"code": PNG_CODE})
    assert not ran.is_error, ran.content
    assert ran.structured_content is not None
    files = {f["name"]: f for f in ran.structured_content["files"]}
    assert files["plot.png"]["mime"] == "image/png"
    [image] = [c for c in ran.content if isinstance(c, types.ImageContent)]
    assert image.mime_type == "image/png"
    data = base64.b64decode(image.data)
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and hashlib.sha256(data).hexdigest() == files["plot.png"]["sha256"]
    [resource] = [c for c in ran.content if isinstance(c, types.EmbeddedResource)]
    assert isinstance(resource.resource, types.TextResourceContents)
    assert (resource.resource.text, resource.resource.mime_type) == ("a,b\n1,2\n", "text/csv")


async def test_a_long_run_sends_progress_and_its_output_as_progress_messages(app_dir: Callable[[str], Path]) -> None:
    # MCP logging is deprecated (SEP-2577): the output comes live as the progress notifications' messages.
    app_dir(CONFIG)
    seen: list[tuple[float, str | None]] = []
    logs: list[Any] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    code = "import time\nfor i in range(3):\n    print('tick', i, flush=True); time.sleep(1)\n"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecation warning on the way, client or server
        async with mcp_client(logs=logs) as session:
            ran = await session.call_tool("code_run", {"code": code}, progress_callback=on_progress)
    assert not ran.is_error and ran.structured_content is not None
    assert ran.structured_content["stdout"] == "tick 0\ntick 1\ntick 2\n"
    assert len(seen) >= 2 and seen[-1][0] >= 1.0  # seconds of running, reported while it ran
    output = [message for _, message in seen if message and message.startswith("tick")]
    assert "".join(output) == "tick 0\ntick 1\ntick 2\n" and logs == []
    first = next(i for i, (_, message) in enumerate(seen) if message == "tick 0\n")
    assert any(message and message.startswith("running for") for _, message in seen[first:])  # it came live


async def test_no_output_without_a_progress_token(app_dir: Callable[[str], Path]) -> None:
    app_dir(CONFIG)
    logs: list[Any] = []
    async with mcp_client(logs=logs) as session:
        ran = await session.call_tool("code_run", {"code": "print('quiet')"})
    assert not ran.is_error and logs == []


async def test_timeout_can_only_lower_the_limit(app_dir: Callable[[str], Path]) -> None:
    app_dir(CONFIG)
    async with mcp_client() as session:
        stopped = await session.call_tool("code_run", {"code": "while True: pass", "timeout": 1})
        refused = await session.call_tool("code_run", {"code": "print(1)", "timeout": "1h"})
    assert stopped.structured_content is not None and stopped.structured_content["stop"] == "timeout"
    assert refused.is_error and "above sandbox.limits.timeout" in refused.content[0].text  # type: ignore[union-attr]


async def test_with_session_files_stay_between_calls(app_dir: Callable[[str], Path]) -> None:
    app_dir(CONFIG)
    async with mcp_client("--session") as session:
        first = await session.call_tool("code_run", {"code": "open('state.txt', 'w').write('kept')"})
        second = await session.call_tool("code_run", {"code": "print(open('state.txt').read())"})
        drawn = await session.call_tool("code_run", {"code": PNG_CODE})
        again = await session.call_tool("code_run", {"code": "open('../out/table.csv', 'w').write('changed')"})
    assert not first.is_error and second.structured_content is not None
    assert second.structured_content["stdout"] == "kept\n"
    assert drawn.structured_content is not None and again.structured_content is not None
    assert [f["name"] for f in drawn.structured_content["files"]] == ["plot.png", "table.csv"]
    assert any(isinstance(c, types.ImageContent) for c in drawn.content)
    assert [f["name"] for f in again.structured_content["files"]] == ["table.csv"]  # new or changed only


async def test_with_session_a_path_both_file_and_folder_is_a_tool_error(app_dir: Callable[[str], Path]) -> None:
    # --session writes the input's files one by one into its kept box, through the same check as the action.
    app_dir(CONFIG)
    async with mcp_client("--session") as client:
        for tool in ("code_run", "run_code"):
            refused = await client.call_tool(tool, {"code": "print(1)", "files": {"a": "x", "a/b": "y"}})
            text = " ".join(getattr(item, "text", "") for item in refused.content)
            assert refused.is_error and "MAIN-SANDBOX-0001" in text and "also the folder of 'a/b'" in text, text
        listed = await client.call_tool("code_run", {"code": "import os; print(sorted(os.listdir('.')))"})
        assert not listed.is_error and "'a'" not in str(listed.structured_content)


async def test_without_session_each_call_starts_fresh(app_dir: Callable[[str], Path]) -> None:
    app_dir(CONFIG)
    async with mcp_client() as session:
        await session.call_tool("code_run", {"code": "open('state.txt', 'w').write('kept')"})
        second = await session.call_tool("code_run", {"code": "import os; print(os.path.exists('state.txt'))"})
    assert second.structured_content is not None and second.structured_content["stdout"] == "False\n"


def _inspector() -> str | None:
    named = os.environ.get("MCP_INSPECTOR")  # tox's all env installs it where npm exists
    return named if named and os.path.exists(named) else shutil.which("mcp-inspector")


@pytest.mark.skipif(
    _inspector() is None,
    reason="the MCP inspector's CLI is not installed (npm install @modelcontextprotocol/inspector, "
    "then MCP_INSPECTOR=node_modules/.bin/mcp-inspector)",
)
def test_the_mcp_inspector_receives_the_png_as_an_image(app_dir: Callable[[str], Path]) -> None:
    """A second real client, the one MCP's own project ships: Node, its own SDK, over stdio."""
    app_dir(CONFIG)
    inspector = _inspector()
    assert inspector is not None
    server = [sys.executable, "-m", "mainsdk_cli", "sandbox", "mcp"]
    call = ["--method", "tools/call", "--tool-name", "code_run", "--tool-arg", f"code={PNG_CODE}"]
    done = subprocess.run(
        [inspector, "--cli", *server, *call], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    [image] = [c for c in result["content"] if c["type"] == "image"]
    assert image["mimeType"] == "image/png" and base64.b64decode(image["data"]).startswith(b"\x89PNG\r\n\x1a\n")
    assert [f["name"] for f in result["structuredContent"]["files"]] == ["plot.png", "table.csv"]
    listed = subprocess.run(
        [inspector, "--cli", *server, "--method", "tools/list"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    [tool] = json.loads(listed.stdout)["tools"]
    assert tool["annotations"]["readOnlyHint"] is False and "outputSchema" in tool


# The PNG above, as the value of a cell's final expression (a notebook shows an object's _repr_png_).
PNG_VALUE = (
    PNG_CODE.replace("open('../out/plot.png', 'wb').write(png)\n", "")
    .replace("open('../out/table.csv', 'w').write('a,b\\n1,2\\n')\n", "")
    .replace("print('drawn')\n", "class Plot:\n    def _repr_png_(self):\n        return png\nPlot()\n")
)


async def test_with_session_run_code_keeps_a_notebook_in_the_same_box(app_dir: Callable[[str], Path]) -> None:
    app_dir(CONFIG)
    async with mcp_client("--session") as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        wrote = await session.call_tool("code_run", {"code": "open('state.txt', 'w').write('from code_run')"})
        first = await session.call_tool("run_code", {"code": "x = 41\nprint(open('state.txt').read())"})
        second = await session.call_tool("run_code", {"code": "x + 1"})
        failed = await session.call_tool("run_code", {"code": "1 / 0"})
        drawn = await session.call_tool("run_code", {"code": PNG_VALUE})
        refused = await session.call_tool("run_code", {"code": "x", "language": "bash"})
    assert sorted(tools) == ["code_run", "run_code"]
    assert tools["run_code"].output_schema is not None and "state_kept" in tools["run_code"].output_schema["properties"]
    assert not wrote.is_error
    assert first.structured_content is not None and first.structured_content["stdout"] == "from code_run\n"
    assert second.structured_content is not None
    assert second.structured_content["results"] == [{"mime": "text/plain", "text": "42"}]
    assert (second.structured_content["cell"], second.structured_content["state_kept"]) == (2, True)
    assert not failed.is_error and failed.structured_content is not None
    assert failed.structured_content["error"]["name"] == "ZeroDivisionError"
    [image] = [c for c in drawn.content if isinstance(c, types.ImageContent)]
    assert image.mime_type == "image/png" and base64.b64decode(image.data).startswith(b"\x89PNG\r\n\x1a\n")
    assert refused.is_error and "unknown input ['language']" in refused.content[0].text  # type: ignore[union-attr]


async def test_without_session_there_is_no_run_code(app_dir: Callable[[str], Path]) -> None:
    app_dir(CONFIG)
    async with mcp_client() as session:
        names = [t.name for t in (await session.list_tools()).tools]
        called = await session.call_tool("run_code", {"code": "1"})
    assert names == ["code_run"] and called.is_error


async def test_a_runs_figures_come_back_as_image_content(app_dir: Callable[[str], Path]) -> None:
    # No matplotlib in this box: the code writes a PNG where the figures backend writes one (test_figures.py
    # draws with the real matplotlib); the tool returns it as a result and as image content, not as a file.
    app_dir(CONFIG)
    code = PNG_CODE.replace("'../out/plot.png'", "'../out/.mainsdk-figures/1.png'").replace(
        "import struct, zlib", "import os, struct, zlib\nos.makedirs('../out/.mainsdk-figures')"
    )
    async with mcp_client() as session:
        ran = await session.call_tool("code_run", {"code": code})
    assert not ran.is_error and ran.structured_content is not None
    [result] = ran.structured_content["results"]
    assert result["mime"] == "image/png" and base64.b64decode(result["base64"]).startswith(b"\x89PNG\r\n\x1a\n")
    assert [f["name"] for f in ran.structured_content["files"]] == ["table.csv"]
    [image] = [c for c in ran.content if isinstance(c, types.ImageContent)]
    assert image.data == result["base64"]


def _code_of(size: int) -> str:
    head = "print('ok')\n#"
    return head + "x" * (size - len(head))


@pytest.mark.parametrize("mode", [[], ["--session"]], ids=["plain", "session"])
async def test_one_code_bound_in_both_modes_said_in_the_schema(app_dir: Callable[[str], Path], mode: list[str]) -> None:
    # --session refused code over 100,000 bytes while plain mode took it, and neither said so: one rule now.
    app_dir(CONFIG)
    async with mcp_client(*mode) as session:
        tools = (await session.list_tools()).tools
        at_bound = await session.call_tool("code_run", {"code": _code_of(100_000)})
        past = await session.call_tool("code_run", {"code": _code_of(100_001)})
        cell = await session.call_tool("run_code", {"code": _code_of(100_001)}) if mode else None
    for tool in tools:
        code = tool.input_schema["properties"]["code"]
        assert code["maxLength"] == 100_000 and "At most 100,000 bytes of UTF-8." in code["description"]
        assert "at most 100,000 bytes of UTF-8" in (tool.description or "")
    assert not at_bound.is_error and at_bound.structured_content is not None
    assert at_bound.structured_content["stdout"] == "ok\n"
    for refused in (past, cell) if cell else (past,):
        assert refused.is_error
        text = refused.content[0].text  # type: ignore[union-attr]
        assert "code is 100,001 bytes; at most 100,000 bytes of UTF-8" in text and "MAIN-SANDBOX-0001" in text


def test_the_readme_mcp_example_runs_without_the_venv_on_path(tmp_path: Path) -> None:
    # As a user runs it: the README's client saved as mcp_plot.py, run as `.venv/bin/python mcp_plot.py` with
    # the venv not activated. With command="mainsdk" it was FileNotFoundError: 'mainsdk'.
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("\n## Agents: a code-runner action\n") :]
    block = section[section.index("```python\nimport asyncio\n") + len("```python\n") :]
    block = block[: block.index("```\n")]
    assert "asyncio.run(plot())  # [('text', None), ('image', 'image/png')]" in block
    (tmp_path / "mcp_plot.py").write_text(block.replace("asyncio.run(plot())  #", "print(asyncio.run(plot()))  #"))
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", os.defpath).split(os.pathsep) if p and p != venv_bin)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAINSDK_", "VIRTUAL_ENV"))}
    env["PATH"] = path
    assert shutil.which("mainsdk", path=path) is None  # no mainsdk command to be found: only the interpreter
    done = subprocess.run(
        [sys.executable, "mcp_plot.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stdout) == (0, "[('text', None), ('image', 'image/png')]\n"), done.stderr
