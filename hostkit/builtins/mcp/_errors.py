"""The MCP client's bounds and typed failures, below every module that raises them."""

from __future__ import annotations

from hostkit.errors import RuntimeFailure, UserError

__all__ = [
    "MAX_MCP_MESSAGE_BYTES",
    "MAX_OUTPUT_CHARS",
    "MAX_TOOLS",
    "MAX_TOOL_DESCRIPTION_CHARS",
    "STDERR_TAIL_BYTES",
    "McpCommandNotFound",
    "McpConnectFailed",
    "McpProtocolError",
]

# One JSON-RPC message (a stdout line, a JSON body, an SSE event): a longer one breaks
# the connection instead of being buffered.
MAX_MCP_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_TOOLS = 128
MAX_TOOL_DESCRIPTION_CHARS = 1024
MAX_TOOL_NAME_CHARS = 128
MAX_SCHEMA_BYTES = 64 * 1024
# What a call's rendered text keeps; the runtime bounds the model's view further.
MAX_OUTPUT_CHARS = 200_000
STDERR_TAIL_BYTES = 4096


class McpCommandNotFound(UserError):
    """A stdio server's command does not exist, or lives where its sandbox cannot see it."""


class McpConnectFailed(RuntimeFailure):
    """The server did not come up: it exited, or the handshake failed (bounded detail)."""


class McpProtocolError(RuntimeFailure):
    """The server answered outside the bounds the Host accepts (too many tools, a bad schema)."""
