"""``mainsdk sandbox mcp``: the code-runner action as a tool over the Model Context Protocol (stdio).

Needs the ``mcp`` package (``pip install 'mainsdk[mcp]'``). The tool's input
schema is the action's own; a call the action refuses (a language it does not
allow, empty code) comes back as a tool error the model can read and correct.

While a run goes on the server sends progress notifications (when the client
gave a progress token) and the output as log messages (when the client asked
for them: ``logging/setLevel``, or the request's log-level ``_meta`` on newer
protocol versions; the SDK applies that gate). Out files come back as content
MCP clients render: images (PNG, JPEG, SVG) as image content, other files as
embedded resources, each up to ``MAX_INLINE_BYTES``; a larger one is named in a
note. A Python run's figures (``results``) come back as image content too.
With ``session=True`` the server keeps one sandbox session for its client
(stdio serves exactly one), so what one call leaves in the work folder is there
for the next, and adds a second tool, ``run_code``: Python run as the next cell
of a notebook interpreter that lives as long as that session (variables and
imports stay), its final value and figures returned as results.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import warnings
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mainsdk import __version__, errors
from mainsdk.action import CodeRunAction, file_entry
from mainsdk.action_cells import cell_action_result
from mainsdk.driver import LANGUAGE_PROGRAMS
from mainsdk.engine import ARGV_CODE_LIMIT
from mainsdk.errors import SandboxError
from mainsdk.sessions import AsyncSession

IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml")
MAX_INLINE_BYTES = 1_000_000  # one file's bytes in a tool result; past it the file is named in a note
MAX_INLINE_TOTAL = 4_000_000  # all files' bytes in one tool result
PROGRESS_EVERY = 1.0  # seconds between progress notifications while a run goes on
LOG_CHUNK_CHARS = 8_000  # output is sent as log messages of at most this many characters

# A rich result as ``mainsdk.rich.rich_entry`` gives it: inline text, base64 bytes, or a file id.
RICH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "mime": {"type": "string"},
        "text": {"type": "string"},
        "base64": {"type": "string"},
        "file": {
            "type": "object",
            "properties": {"id": {"type": "string"}, "name": {"type": "string"}, "size": {"type": "integer"}},
        },
    },
    "required": ["mime"],
}
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "stdout": {"type": "string"},
        "stderr": {"type": "string"},
        "exit_code": {"type": ["integer", "null"]},
        "signal": {"type": ["string", "null"]},
        "stop": {"type": ["string", "null"], "enum": [None, "timeout", "memory", "output", "cost"]},
        "files": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "name": {"type": "string"},
                    "size": {"type": "integer"},
                    "sha256": {"type": "string"},
                    "mime": {"type": "string"},
                },
                "required": ["id", "name", "size", "sha256", "mime"],
            },
        },
        "files_dropped": {"type": "array", "items": {"type": "string"}},
        "results": {"type": "array", "items": RICH_SCHEMA},
        "cost": {"type": "string"},
    },
    "required": ["stdout", "stderr", "exit_code", "stop", "files", "cost"],
}
CELL_TOOL = "run_code"
CELL_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "minLength": 1, "description": "The Python code of the cell."},
        "files": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "Files to put in the working folder first, by relative path.",
        },
        "timeout": {
            "type": ["number", "string"],
            "description": "A time limit for this cell, in seconds or like '5s'; it can only lower the configured "
            "limit. At it the cell is interrupted and the variables are kept.",
        },
    },
    "required": ["code"],
    "additionalProperties": False,
}
CELL_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "stdout": {"type": "string"},
        "stderr": {"type": "string"},
        "results": {"type": "array", "items": RICH_SCHEMA},
        "error": {
            "type": ["object", "null"],
            "properties": {"name": {"type": "string"}, "value": {"type": "string"}, "traceback": {"type": "string"}},
        },
        "stop": {"type": ["string", "null"], "enum": [None, "timeout", "memory", "output", "cost"]},
        "state_kept": {"type": "boolean"},
        "restarted": {"type": "boolean"},
        "cell": {"type": "integer"},
        "cost": {"type": "string"},
    },
    "required": ["stdout", "stderr", "results", "error", "stop", "state_kept", "restarted", "cell", "cost"],
}


def build_server(action: CodeRunAction, *, session: bool = False) -> Server[Any]:
    """An MCP server exposing ``action`` as one tool; with ``session``, one sandbox session kept across calls."""
    sandbox = action._sandbox
    open_world = bool(sandbox.config.sandbox.network)
    log_level: list[str | None] = [None]  # what the client set with logging/setLevel (older protocol versions)
    kept: list[_KeptSession] = []

    def tool() -> types.Tool:
        description = action.description
        if session:
            description += " Files in the working folder stay there from one call to the next."
        return types.Tool(
            name=action.tool_name(),
            description=description,
            input_schema=action.input_schema,
            output_schema=OUTPUT_SCHEMA,
            annotations=types.ToolAnnotations(
                read_only_hint=False,  # it runs code, which writes files and spends the budget
                destructive_hint=False,  # each run starts from a fresh box (or the session's own)
                idempotent_hint=False,
                open_world_hint=open_world,  # only hosts named in main.yaml are reachable at all
            ),
        )

    def cell_tool() -> types.Tool:
        return types.Tool(
            name=CELL_TOOL,
            description=(
                "Runs Python as the next cell of a notebook kept for this client, in the same sandbox as "
                f"{action.tool_name()}: variables, imports and files stay from one call to the next. The final "
                "expression's value and every matplotlib figure come back as results (figures as images)."
            ),
            input_schema=CELL_INPUT_SCHEMA,
            output_schema=CELL_OUTPUT_SCHEMA,
            annotations=types.ToolAnnotations(
                read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=open_world
            ),
        )

    cells = session and "python" in action.languages  # a notebook runs Python cells only

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool(), cell_tool()] if cells else [tool()])

    async def set_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
        log_level[0] = params.level
        return types.EmptyResult()

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        names = [action.tool_name(), CELL_TOOL] if cells else [action.tool_name()]
        if params.name not in names:
            return _error(f"no tool named {params.name!r}; this server has {', '.join(map(repr, names))}")
        arguments = params.arguments or {}
        # Newer protocol versions opt in per request (the SDK drops what was not asked for); older ones by setLevel.
        asked = ctx.session.protocol_version in MODERN_PROTOCOL_VERSIONS or log_level[0] in ("debug", "info")
        live = _LiveReport(ctx, send_logs=asked)
        try:
            async with live.running():
                if params.name == CELL_TOOL:
                    result = await _run_cell(action, kept, arguments, live.on_output)
                elif session:
                    result = await _run_in_session(action, kept, arguments, live.on_output)
                else:
                    result = await action.arun(arguments, on_output=live.on_output)
        except SandboxError as exc:
            return _error(str(exc))
        content: list[Any] = [types.TextContent(text=json.dumps(result, indent=2))]
        content += await _result_contents(action, result["results"])
        content += await _file_contents(action, result.get("files", []))
        return types.CallToolResult(content=content, structured_content=result)

    with warnings.catch_warnings():
        # logging/setLevel is how clients on protocol versions before 2026-07-28 ask for log messages.
        warnings.simplefilter("ignore")
        return Server(
            "mainsdk-sandbox",
            version=__version__,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_set_logging_level=set_level,
        )


class _LiveReport:
    """While a run goes on: progress every PROGRESS_EVERY seconds, and its output as log messages."""

    def __init__(self, ctx: Any, *, send_logs: bool) -> None:
        self._ctx = ctx
        self._send_logs = send_logs
        self._pending: list[tuple[str, bytes]] = []
        self._wake = asyncio.Event()
        self._started = time.monotonic()

    def on_output(self, stream: str, data: bytes) -> None:
        if self._send_logs:
            self._pending.append((stream, data))
            self._wake.set()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Report while the body runs; then send the last output, before the result."""
        task = asyncio.ensure_future(self._pump())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._flush()

    async def _pump(self) -> None:
        next_progress = self._started
        while True:
            now = time.monotonic()
            if now >= next_progress:
                elapsed = now - self._started
                await self._ctx.session.report_progress(elapsed, None, f"running for {elapsed:.0f}s")
                next_progress = now + PROGRESS_EVERY
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=max(next_progress - time.monotonic(), 0.01))
            except TimeoutError:
                continue
            self._wake.clear()
            await self._flush()

    async def _flush(self) -> None:
        pending, self._pending = self._pending, []
        for stream, data in pending:
            text = data.decode("utf-8", "replace")
            for start in range(0, len(text), LOG_CHUNK_CHARS):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the logging capability is deprecated in newer versions
                    await self._ctx.session.send_log_message(
                        level="info", data=text[start : start + LOG_CHUNK_CHARS], logger=stream
                    )


class _KeptSession:
    """The server's sandbox session, and the out files (name to sha256) its calls have already returned."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session
        self.returned: dict[str, str] = {}
        self.lost = False  # it replaced one that had expired or closed


async def _run_in_session(
    action: CodeRunAction, kept: list[_KeptSession], arguments: Mapping[str, Any], on_output: Callable[..., None]
) -> dict[str, Any]:
    """Run the call in the server's one sandbox session, opened at the first call (again if it expired).

    The out folder stays from call to call, so a call returns the out files that are new or changed since.
    """
    code, language, files = action.check_input(arguments)
    limits = action.input_limits(arguments)
    if len(code.encode()) > ARGV_CODE_LIMIT:
        raise SandboxError(errors.INVALID_OPTION, f"{action.name}: code longer than {ARGV_CODE_LIMIT} bytes")
    current = await _kept_session(action, kept)
    for path, text in files.items():
        await current.write(path, text)
    program = LANGUAGE_PROGRAMS[language]
    flags: tuple[str, ...] = ("-E", "-s", "-c") if language == "python" else ("-e",) if language == "node" else ("-c",)
    timeout = limits["timeout"] if limits else None
    command = await current.run(program, [*flags, code], timeout=timeout, on_output=on_output)
    refs, dropped = await current.out_files()
    returned = kept[0].returned
    fresh = [ref for ref in refs if returned.get(ref.name) != ref.sha256]
    returned.update((ref.name, ref.sha256) for ref in fresh)
    return {
        "stdout": command.stdout,
        "stderr": command.stderr,
        "exit_code": command.exit_code,
        "signal": command.signal,
        "stop": command.stop,
        "files": [file_entry(ref) for ref in fresh],
        "files_dropped": list(dropped),
        "results": [],  # a session command's figures are not collected: draw with run_code
        "cost": str(command.cost),
    }


async def _kept_session(action: CodeRunAction, kept: list[_KeptSession]) -> AsyncSession:
    """The server's one sandbox session, opened at the first call (again if it expired or closed)."""
    if not kept or kept[0].session.closed:
        lost = bool(kept)
        kept[:] = [_KeptSession(await action._sandbox.create(feature=action.feature))]
        kept[0].lost = lost
    return kept[0].session


async def _run_cell(
    action: CodeRunAction, kept: list[_KeptSession], arguments: Mapping[str, Any], on_output: Callable[..., None]
) -> dict[str, Any]:
    """Run the call as the next cell of the kept session's interpreter (``run_code``)."""
    extra = sorted(str(key) for key in arguments if key not in ("code", "files", "timeout"))
    if extra:
        raise SandboxError(errors.INVALID_OPTION, f"{CELL_TOOL}: unknown input {extra}; use code, files, timeout")
    code, _language, files = action.check_input({"code": arguments.get("code"), "files": arguments.get("files")})
    limits = action.input_limits(arguments)
    current = await _kept_session(action, kept)
    for path, text in files.items():
        await current.write(path, text)
    cell = await current.run_code(code, timeout=limits["timeout"] if limits else None, on_output=on_output)
    restarted, kept[0].lost = kept[0].lost, False  # the session itself had ended: its variables went with it
    return cell_action_result(cell, restarted)


async def _result_contents(action: CodeRunAction, results: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Rich results that are images as image content (the rest is in the structured result as text)."""
    content: list[Any] = []
    total = 0
    for entry in results:
        if entry["mime"] not in IMAGE_TYPES:
            continue
        if "base64" in entry:
            data = base64.b64decode(entry["base64"])
        elif "text" in entry:  # an SVG
            data = entry["text"].encode()
        elif entry["file"]["size"] <= MAX_INLINE_BYTES:
            data = await action.aread(entry["file"]["id"])
        else:
            continue  # named in the structured result, with its file id
        if total + len(data) > MAX_INLINE_TOTAL:
            break
        total += len(data)
        content.append(types.ImageContent(data=base64.b64encode(data).decode(), mime_type=entry["mime"]))
    return content


async def _file_contents(action: CodeRunAction, files: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The out files as MCP content: images as images, the rest as embedded resources, large ones as a note."""
    content: list[Any] = []
    total = 0
    too_large: list[str] = []
    for entry in files:
        if entry["size"] > MAX_INLINE_BYTES or total + entry["size"] > MAX_INLINE_TOTAL:
            too_large.append(f"{entry['name']} ({entry['size']} bytes, id {entry['id']})")
            continue
        data = await action.aread(entry["id"])
        total += len(data)
        mime = entry["mime"]
        if mime in IMAGE_TYPES:
            content.append(types.ImageContent(data=base64.b64encode(data).decode(), mime_type=mime))
            continue
        uri = f"mainsdk://files/{entry['id']}/{entry['name']}"
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            blob = base64.b64encode(data).decode()
            content.append(
                types.EmbeddedResource(resource=types.BlobResourceContents(uri=uri, mime_type=mime, blob=blob))
            )
        else:
            content.append(
                types.EmbeddedResource(resource=types.TextResourceContents(uri=uri, mime_type=mime, text=text))
            )
    if too_large:
        note = f"Out files too large to include here (over {MAX_INLINE_BYTES} bytes each, {MAX_INLINE_TOTAL} in all): "
        content.append(types.TextContent(text=note + ", ".join(too_large)))
    return content


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def serve_stdio(action: CodeRunAction, *, session: bool = False) -> None:
    """Serve ``action`` on stdin and stdout until the client closes them."""
    server = build_server(action, session=session)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)


def languages_option(values: Sequence[str] | None) -> list[str]:
    """The languages the served action allows (default: python)."""
    return list(values) if values else ["python"]
