"""MCP servers as effect sources: the concrete client behind ``hostkit.effects.McpConnector``.

``McpClientConnector`` starts a declared stdio server in the agent's sandbox
(bubblewrap like ``terminal.run``: own PID namespace, no view of Host state,
network only when declared; its environment exactly the Host allowlist plus
the declared ``env``) or opens a streamable-HTTP server through the agent's
shared URL policy, and initializes the session with the official ``mcp``
SDK. The ``McpConnection`` it returns lists bounded tools and turns each
call into a ``ToolOutcome``. No message over ``MAX_MCP_MESSAGE_BYTES`` is
ever buffered: it breaks the connection instead (docs/effects.md, "MCP servers").

Inside, modules import one way only: ``_connector`` → ``_connection``,
``_http``, ``_stdio`` → ``_launch``, ``_render`` → ``_errors``.
"""

from hostkit.builtins.mcp._connector import McpClientConnector
from hostkit.builtins.mcp._errors import (
    MAX_MCP_MESSAGE_BYTES,
    MAX_TOOLS,
    McpCommandNotFound,
    McpConnectFailed,
    McpProtocolError,
)

__all__ = [
    "MAX_MCP_MESSAGE_BYTES",
    "MAX_TOOLS",
    "McpClientConnector",
    "McpCommandNotFound",
    "McpConnectFailed",
    "McpProtocolError",
]
