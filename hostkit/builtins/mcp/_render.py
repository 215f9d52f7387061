"""What the Host takes from a server's answers: bounded tool specs and rendered results."""

from __future__ import annotations

import json
from typing import Any

from mcp_types import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    Tool,
)

from hostkit.builtins.mcp._errors import (
    MAX_OUTPUT_CHARS,
    MAX_SCHEMA_BYTES,
    MAX_TOOL_DESCRIPTION_CHARS,
    MAX_TOOL_NAME_CHARS,
    McpProtocolError,
)
from hostkit.effects import McpToolSpec
from hostkit.errors import bounded
from hostkit.freeze import freeze

__all__ = ["render_result", "tool_spec"]

_ELLIPSIS = "…"


def tool_spec(server: str, tool: Tool) -> McpToolSpec:
    """The listed tool as a frozen spec; a name or schema the Host cannot use is refused.

    The description is cut to ``MAX_TOOL_DESCRIPTION_CHARS``; the input schema
    must be a JSON object schema (``"type": "object"``) of bounded size.
    """
    name = tool.name
    if not name or len(name) > MAX_TOOL_NAME_CHARS:
        raise McpProtocolError(f"server {server!r} lists a tool with an empty or over-long name")
    schema = tool.input_schema
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise McpProtocolError(
            f"server {server!r}: tool {bounded(name, 64)!r} has an input schema that is not "
            "a JSON object schema"
        )
    if len(json.dumps(schema, default=str)) > MAX_SCHEMA_BYTES:
        raise McpProtocolError(
            f"server {server!r}: tool {bounded(name, 64)!r} has an input schema over "
            f"{MAX_SCHEMA_BYTES // 1024} KiB"
        )
    description = _cut(tool.description or "", MAX_TOOL_DESCRIPTION_CHARS)
    return McpToolSpec(name=name, description=description, input_schema=freeze(schema))


def render_result(result: CallToolResult) -> tuple[Any, str]:
    """``(output, text)``: the structured content when there is one, else the joined text.

    Text parts are joined with newlines; images, audio and resources become
    short stand-ins (their bytes never reach the model). ``text`` is the
    joined text alone, for an error's reason.
    """
    text = _cut("\n".join(_part(block) for block in result.content), MAX_OUTPUT_CHARS)
    if result.structured_content is not None:
        return freeze(result.structured_content), text
    return text, text


def _part(block: object) -> str:
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ImageContent | AudioContent):
        kind = "image" if isinstance(block, ImageContent) else "audio"
        size = len(block.data) * 3 // 4
        return f"[{kind} {bounded(block.mime_type, 60)}, about {size} bytes]"
    if isinstance(block, ResourceLink):
        return f"[resource link {bounded(str(block.uri), 200)}]"
    if isinstance(block, EmbeddedResource):
        resource = block.resource
        if isinstance(resource, TextResourceContents):
            return f"[resource {bounded(str(resource.uri), 200)}]\n{resource.text}"
        return f"[binary resource {bounded(str(resource.uri), 200)}]"
    return "[content the Host does not render]"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + _ELLIPSIS
