"""Small real MCP servers the MCP client's contract tests start (stdio and streamable HTTP)."""
