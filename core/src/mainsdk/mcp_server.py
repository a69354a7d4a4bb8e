"""``mainsdk sandbox mcp``: the code-runner action as a tool over the Model Context Protocol (stdio).

Needs the ``mcp`` package (``pip install 'mainsdk[mcp]'``). The tool's input
schema is the action's own; a call the action refuses (a language it does not
allow, empty code) comes back as a tool error the model can read and correct.

While a run goes on the server sends progress notifications to a client that
gave a progress token: one a second, and the output as it comes, as the
notifications' ``message`` (``_meta`` says which stream). MCP's logging
(``logging/setLevel``, ``notifications/message``), which carried the output
before, is deprecated from protocol 2026-07-28 (SEP-2577) with no in-protocol
successor; progress is the per-request channel that is not. Out files come back as content
MCP clients render: images (PNG, JPEG, SVG) as image content, other files as
embedded resources, each up to ``MAX_INLINE_BYTES``; a larger one is named in a
note. A Python run's figures (``results``) come back as image content too.
Every tool takes code of at most ``MAX_CODE_BYTES`` (UTF-8), in both modes.
Every JSON-RPC request gets an answer: a line that is no JSON is ``-32700``, a
message that is no valid request ``-32600`` (JSON-RPC 2.0), answered here,
before the SDK, which drops them (``serve_stdio``).
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
import fcntl
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import anyio
import mcp_types as types
import pydantic
from mcp.server.lowlevel import Server
from mcp.shared.message import SessionMessage

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
OUTPUT_CHUNK_CHARS = 8_000  # output is sent as progress messages of at most this many characters
STREAM_META_KEY = "mainsdk/stream"  # in a progress notification's _meta: the stream its message came from
# Code longer than this would not fit the argv a session command is run with (Linux caps one argument at
# 128 KiB); one bound for every tool and mode, so that a call that works in one works in the other.
MAX_CODE_BYTES = ARGV_CODE_LIMIT
CODE_RULE = f"At most {MAX_CODE_BYTES:,} bytes of UTF-8."

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
        "code": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_CODE_BYTES,
            "description": f"The Python code of the cell. {CODE_RULE}",
        },
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
    sandbox = action.sandbox
    open_world = bool(sandbox.config.sandbox.network)
    kept: list[_KeptSession] = []

    def tool() -> types.Tool:
        description = f"{action.description} Code: {CODE_RULE[0].lower()}{CODE_RULE[1:]}"
        if session:
            description += " Files in the working folder stay there from one call to the next."
        return types.Tool(
            name=action.tool_name(),
            description=description,
            input_schema=_code_rule_schema(action.input_schema),
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
                "expression's value and every matplotlib figure come back as results (figures as images). "
                f"Code: {CODE_RULE[0].lower()}{CODE_RULE[1:]}"
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

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        names = [action.tool_name(), CELL_TOOL] if cells else [action.tool_name()]
        if params.name not in names:
            return _error(f"no tool named {params.name!r}; this server has {', '.join(map(repr, names))}")
        arguments = params.arguments or {}
        live = _LiveReport(ctx)
        try:
            _check_code_size(params.name, arguments)
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

    return Server("mainsdk-sandbox", version=__version__, on_list_tools=list_tools, on_call_tool=call_tool)


def _code_rule_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The action's input schema with the server's bound on ``code`` (``maxLength`` counts characters: a
    necessary bound; the bytes are checked at the call).
    """
    properties = dict(schema["properties"])
    code = dict(properties["code"])
    code["maxLength"] = MAX_CODE_BYTES
    code["description"] = f"{code.get('description', '')} {CODE_RULE}".strip()
    properties["code"] = code
    return {**schema, "properties": properties}


def _check_code_size(tool: str, arguments: Mapping[str, Any]) -> None:
    code = arguments.get("code")
    if isinstance(code, str) and len(code.encode("utf-8", "surrogatepass")) > MAX_CODE_BYTES:
        raise SandboxError(
            errors.INVALID_OPTION,
            f"{tool}: code is {len(code.encode('utf-8', 'surrogatepass')):,} bytes; at most {MAX_CODE_BYTES:,} "
            "bytes of UTF-8 are taken: put data in files, not in the code",
        )


class _LiveReport:
    """While a run goes on: progress every PROGRESS_EVERY seconds, and its output as progress messages.

    Progress is the per-request channel MCP keeps (logging is deprecated, SEP-2577); a client that gave no
    progress token gets neither (the SDK sends nothing then).
    """

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._token = (ctx.meta or {}).get("progress_token")
        self._pending: list[tuple[str, bytes]] = []
        self._wake = asyncio.Event()
        self._started = time.monotonic()
        self._last = -1.0  # progress must grow with every notification

    def on_output(self, stream: str, data: bytes) -> None:
        if self._token is not None:
            self._pending.append((stream, data))
            self._wake.set()

    async def _progress(self, message: str, stream: str | None = None) -> None:
        if self._token is None:
            return
        progress = max(time.monotonic() - self._started, self._last + 1e-6)
        self._last = progress
        notification = types.ProgressNotification(
            params=types.ProgressNotificationParams(
                progress_token=self._token,
                progress=progress,
                message=message,
                _meta={STREAM_META_KEY: stream} if stream else None,
            )
        )
        await self._ctx.session.send_notification(notification, related_request_id=self._ctx.request_id)

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
                await self._progress(f"running for {now - self._started:.0f}s")
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
            for start in range(0, len(text), OUTPUT_CHUNK_CHARS):
                await self._progress(text[start : start + OUTPUT_CHUNK_CHARS], stream)


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
        kept[:] = [_KeptSession(await action.sandbox.create(feature=action.feature))]
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
        async with json_rpc_stdio() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)


def _error_reply(ident: object, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}


def read_frame(line: bytes) -> tuple[types.JSONRPCMessage | None, Any]:
    """What one line from the client is: ``(message, None)`` to pass on, or ``(None, reply)`` to answer at once.

    JSON-RPC 2.0 (https://www.jsonrpc.org/specification, sections 4 to 6) as MCP narrows it: a line that is no
    JSON is -32700 with id null; a request object that is not one (``jsonrpc`` not "2.0", an ``id`` that is no
    string or integer, a ``method`` that is no string, ``params`` that are no object) is -32600 with its id
    when it has a valid one, else null; a batch (MCP has none since 2025-06-18; the SDK reads none) gets one
    -32600 per request in it, in an array. A notification is never answered, nor a response of the client's;
    ``(None, None)`` is such a line, or a blank one. The SDK's own reader dropped all of these unanswered, and
    took a request with a bad id for a notification: the client waited for ever.
    """
    if not line.strip():
        return None, None
    try:
        value = json.loads(line.decode("utf-8"))  # MCP's stdio is UTF-8: json.loads(bytes) would guess UTF-16 too
    except (ValueError, RecursionError) as exc:  # ValueError: bad JSON or bad UTF-8
        reason = (
            exc.msg
            if isinstance(exc, json.JSONDecodeError)
            else "nested too deeply"
            if isinstance(exc, RecursionError)
            else str(exc)
        )
        return None, _error_reply(None, types.PARSE_ERROR, f"Parse error: {reason}")
    if isinstance(value, list):
        if not value:
            return None, _error_reply(None, types.INVALID_REQUEST, "Invalid Request: an empty batch")
        replies = [reply for reply in map(_batch_reply, value) if reply is not None]
        return None, replies or None
    return _read_message(value)


def _is_text(value: object) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _batch_reply(value: object) -> dict[str, Any] | None:
    message, reply = _read_message(value)
    if isinstance(message, types.JSONRPCRequest):
        return _error_reply(
            message.id,
            types.INVALID_REQUEST,
            "Invalid Request: MCP takes no batches (since protocol 2025-06-18); send each request on its own line",
        )
    return reply if isinstance(reply, dict) else None


def _read_message(value: object) -> tuple[types.JSONRPCMessage | None, dict[str, Any] | None]:
    if not isinstance(value, dict):
        return None, _error_reply(None, types.INVALID_REQUEST, "Invalid Request: a message is a JSON object")
    if "method" not in value and ("result" in value or "error" in value):
        # A response to a request of the server's: never answered. This server sends none; the SDK drops it.
        try:
            return types.jsonrpc_message_adapter.validate_python(value), None
        except pydantic.ValidationError:
            return None, None
    ident = value.get("id")
    good_id = isinstance(ident, str) or (isinstance(ident, int) and not isinstance(ident, bool))
    reply_id = ident if good_id and _is_text(ident) else None
    if not _is_text(value):
        # An escaped lone surrogate ("\\ud800") is JSON but no Unicode text: it cannot be written back in
        # UTF-8, and echoed in an id it ended the server.
        problem = "a string holds a lone surrogate (no Unicode text)"
    elif value.get("jsonrpc") != "2.0":
        problem = 'jsonrpc must be "2.0"'
    elif "id" in value and not good_id:
        problem = "id must be a string or an integer"  # MCP: never null
    elif not isinstance(value.get("method"), str):
        problem = "method must be a string"
    elif "params" in value and not isinstance(value["params"], dict):
        problem = "params must be an object"
    else:
        model = types.JSONRPCRequest if "id" in value else types.JSONRPCNotification
        try:
            return model.model_validate(value), None
        except pydantic.ValidationError as exc:
            problem = exc.errors()[0]["msg"] if exc.errors() else "not a request"
    return None, _error_reply(reply_id, types.INVALID_REQUEST, f"Invalid Request: {problem}")


@contextlib.asynccontextmanager
async def json_rpc_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """The MCP stdio transport, with every line checked by ``read_frame`` first (the SDK's answers none).

    As the SDK's ``stdio_server`` does, fd 0 reads the null device and fd 1 goes to stderr while serving, so
    that nothing the server starts reads the client's messages or writes into them; both are restored after.
    """
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    # closefd=False: a worker thread may still block in a read of it when the server ends.
    reader = anyio.wrap_file(os.fdopen(wire_in, "rb", closefd=False))
    writer = os.fdopen(wire_out, "wb", closefd=False)
    lock = anyio.Lock()

    async def put(text: str) -> None:
        def write() -> None:
            writer.write(text.encode("utf-8", "replace") + b"\n")
            writer.flush()

        async with lock:  # one line at a time: the SDK's messages and this reader's answers never interleave
            await anyio.to_thread.run_sync(write)

    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_lines() -> None:
        async with read_send:
            async for line in reader:
                message, reply = read_frame(line)
                if message is not None:
                    await read_send.send(SessionMessage(message))
                elif reply is not None:
                    await put(json.dumps(reply, separators=(",", ":")))

    async def write_lines() -> None:
        async with write_receive:
            async for session_message in write_receive:
                message = session_message.message
                try:
                    text = message.model_dump_json(by_alias=True, exclude_unset=True)
                    text.encode()
                except ValueError:  # pydantic's serialization error, or UnicodeEncodeError
                    # A reply that cannot be written still ends its request: the client must not wait for ever.
                    if not isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
                        continue
                    text = json.dumps(_error_reply(message.id, types.INTERNAL_ERROR, "the reply could not be encoded"))
                await put(text)

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read_lines)
            tasks.start_soon(write_lines)
            yield read_receive, write_send
            tasks.cancel_scope.cancel()
    finally:
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)


def languages_option(values: Sequence[str] | None) -> list[str]:
    """The languages the served action allows (default: python)."""
    return list(values) if values else ["python"]
