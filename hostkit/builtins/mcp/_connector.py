"""``McpClientConnector``: one agent's way to start or open its declared MCP servers."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio.to_thread

from hostkit._lazy import load_off_loop
from hostkit.builtins.mcp._launch import plan_launch
from hostkit.builtins.process import DEFAULT_ENV_ALLOWLIST, SandboxPolicy
from hostkit.builtins.web import UrlPolicy
from hostkit.effects import McpConnection, McpServerDeclaration
from hostkit.freeze import FrozenMap

__all__ = ["McpClientConnector"]

# The halves that use the MCP SDK. Importing it takes about a second, so it happens on
# the first connect (in a worker thread, off the event loop), not whenever hostkit is
# imported: `hostkit --help`, every CLI command and every Host without an MCP server
# start without it.
_SDK_MODULES = (
    "hostkit.builtins.mcp._connection",
    "hostkit.builtins.mcp._http",
    "hostkit.builtins.mcp._stdio",
)


_UNSANDBOXED_NOTE = 'UNSANDBOXED (sandbox = "none"): the MCP server runs with the Host\'s rights.'


class McpClientConnector:
    """Starts stdio servers in the agent's sandbox and opens HTTP servers under its URL policy.

    One connector per agent, built like its terminal tools and ``web.extract``:
    ``workspace`` is the agent's workspace (a stdio child's working directory
    and only writable place), ``sandbox`` its process policy (mode, limits,
    Host state to hide; the network comes from each declaration's
    ``network``), ``url_policy`` the policy an HTTP server's URL and every
    request must pass. ``environ`` is the Host environment the allowlisted
    values (and ``PATH`` for finding a command) come from: ``os.environ`` when
    None. ``hidden`` adds Host state paths to mask on top of the policy's;
    ``env_allowlist`` and ``bwrap`` are ``TerminalRuns``'s (tests name a
    missing bwrap to see the refusal).
    """

    def __init__(
        self,
        *,
        workspace: Path,
        sandbox: SandboxPolicy,
        url_policy: UrlPolicy,
        environ: Mapping[str, str] | None = None,
        hidden: Sequence[Path] = (),
        env_allowlist: Sequence[str] = DEFAULT_ENV_ALLOWLIST,
        bwrap: str = "bwrap",
    ) -> None:
        self._workspace = workspace
        self._sandbox = sandbox
        self._url_policy = url_policy
        self._environ = FrozenMap(dict(os.environ if environ is None else environ))
        self._hidden = tuple(hidden)
        self._allowlist = tuple(env_allowlist)
        self._bwrap = bwrap

    @property
    def approval_warning(self) -> str | None:
        return None if self._sandbox.sandboxed else _UNSANDBOXED_NOTE

    @property
    def identity(self) -> str:
        """Digest of what a server is reached under: the sandbox (mode, limits, Host state
        masked), workspace, URL policy, allowlisted environment values and launcher. A
        connection made under another identity is not reused (hostkit.effects)."""
        allowed = {name: self._environ.get(name) for name in self._allowlist}
        payload = json.dumps(
            [
                repr(self._sandbox),
                str(self._workspace),
                [str(path) for path in self._hidden],
                repr(self._url_policy),
                sorted(allowed.items(), key=lambda item: item[0]),
                self._bwrap,
            ],
            default=str,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:24]

    async def connect(self, declaration: McpServerDeclaration) -> McpConnection:
        """Start or open ``declaration``'s server and initialize the session.

        Raises ``McpCommandNotFound``, ``SandboxUnavailable`` or ``UrlDenied``
        (all ``UserError``) before anything starts, ``McpConnectFailed`` when
        the server did not come up. The caller's deadline cancels it cleanly.
        """
        await load_off_loop(*_SDK_MODULES)
        from hostkit.builtins.mcp._connection import ClientConnection
        from hostkit.builtins.mcp._http import HttpLink
        from hostkit.builtins.mcp._stdio import StdioLink

        if declaration.transport == "stdio":
            launch = await anyio.to_thread.run_sync(
                lambda: plan_launch(
                    declaration,
                    workspace=self._workspace,
                    sandbox=self._sandbox,
                    environ=self._environ,
                    allowlist=self._allowlist,
                    hidden=self._hidden,
                    bwrap=self._bwrap,
                )
            )
            secrets = list(declaration.secret_values().values())
            link: StdioLink | HttpLink = StdioLink(launch, secrets=secrets)
        else:
            assert declaration.url is not None
            from hostkit.builtins.web import PinnedConnections  # HTTP loads with its first server

            connections = await PinnedConnections.open(self._url_policy)
            try:
                await connections.admit(declaration.url)
            except BaseException:
                await connections.aclose()
                raise
            link = HttpLink(declaration.url, connections)
        return await ClientConnection.open(declaration, link)
