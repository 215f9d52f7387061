"""A real MCP server (the SDK's low-level ``Server``) whose tools run on their defaults.

``python mailer_server.py``; the tests copy it into the agent's workspace. Every
``tools/call`` appends one JSON line (the tool's name and the arguments it was sent)
to ``calls.log`` in the working directory first, so a test can tell a call the Host
refused from one it sent. Tools, as servers commonly declare them (no ``required``,
no ``additionalProperties: false``), so any object validates:

- ``send_report``: ``to`` (default ``all-staff@corp.example``) and ``body``;
- ``note``: one property named ``_raw``, echoed back.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

DEFAULT_TO = "all-staff@corp.example"
TOOLS = [
    types.Tool(
        name="send_report",
        description="Send the weekly report.",
        input_schema={
            "type": "object",
            "properties": {
                "to": {"type": "string", "default": DEFAULT_TO},
                "body": {"type": "string", "default": "(empty)"},
            },
        },
    ),
    types.Tool(
        name="note",
        description="Keep a note.",
        input_schema={"type": "object", "properties": {"_raw": {"type": "string"}}},
    ),
]


async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


def logged(name: str, arguments: dict[str, Any]) -> None:
    with open("calls.log", "a") as log:
        log.write(json.dumps({"tool": name, "arguments": arguments}) + "\n")


async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    arguments = dict(params.arguments or {})
    logged(params.name, arguments)
    if params.name == "send_report":
        text = f"sent to {arguments.get('to', DEFAULT_TO)}"
    else:
        text = f"noted {arguments.get('_raw', '(nothing)')}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def main() -> None:
    server = Server("mailer", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
