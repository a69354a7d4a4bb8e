"""``mainsdk sandbox mcp``: the code-runner action as a tool over the Model Context Protocol (stdio).

Needs the ``mcp`` package (``pip install 'mainsdk[mcp]'``). The tool's input
schema is the action's own; a call the action refuses (a language it does not
allow, empty code) comes back as a tool error the model can read and correct.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from mainsdk import __version__
from mainsdk.action import CodeRunAction
from mainsdk.errors import SandboxError


def build_server(action: CodeRunAction) -> Server[Any]:
    """An MCP server exposing ``action`` as one tool."""

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        tool = types.Tool(name=action.tool_name(), description=action.description, input_schema=action.input_schema)
        return types.ListToolsResult(tools=[tool])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name != action.tool_name():
            return _error(f"no tool named {params.name!r}; this server has {action.tool_name()!r}")
        try:
            result = await action.arun(params.arguments or {})
        except SandboxError as exc:
            return _error(str(exc))
        text = json.dumps(result, indent=2)
        return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=result)

    return Server("mainsdk-sandbox", version=__version__, on_list_tools=list_tools, on_call_tool=call_tool)


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def serve_stdio(action: CodeRunAction) -> None:
    """Serve ``action`` on stdin and stdout until the client closes them."""
    server = build_server(action)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)


def languages_option(values: Sequence[str] | None) -> list[str]:
    """The languages the served action allows (default: python)."""
    return list(values) if values else ["python"]
