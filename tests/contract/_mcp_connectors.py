"""The MCP connectors the pool clauses of ``test_clause_mcp_connections.py`` run against.

A clause that takes the ``kit`` fixture runs once per name in ``CONNECTORS``:

- ``recording``: ``RecordingConnector``, a test adapter behind the ``McpConnector`` seam
  that fails, hangs or sleeps on demand and counts connects and closes exactly;
- ``real``: ``McpClientConnector`` (the MCP SDK client) starting
  ``tests/mcp_servers/listing_server.py`` in its ``clock`` mode in the agent's
  bubblewrap sandbox: every connection is a real process tree, seen running or gone
  with psutil, and every start is counted by the server itself.

The two expose the same server: one tool, ``get_time`` ({"zone": string}), answering
``<server>:get_time:<zone>``, after a second for zone ``slow`` and never for ``hang``. A
test asks for behaviour through the kit (``connector(fail=...)``, ``change``) and
observes only what both can show: how often a server was started (``starts``) and which
of its connections still run (``running``), never the recording adapter's counters.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import psutil

from hostkit.builtins.mcp import McpClientConnector
from hostkit.builtins.process import SandboxPolicy, probe_bubblewrap
from hostkit.builtins.web import UrlPolicy
from hostkit.effects import (
    McpConnections,
    McpConnector,
    McpServerDeclaration,
    McpToolSpec,
    ToolOutcome,
)
from hostkit.freeze import freeze
from tests.parts import missing

__all__ = [
    "CONNECTORS",
    "SCHEMA",
    "Connection",
    "ConnectorKit",
    "RealKit",
    "RecordingConnector",
    "RecordingKit",
    "declared",
]

CONNECTORS = ("recording", "real")

# Frozen, as the SDK client hands schemas over (nested FrozenMaps, tuples for arrays).
SCHEMA = freeze(
    {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ("zone",)}
)
SERVER = Path(__file__).parent.parent / "mcp_servers" / "listing_server.py"
HOST_ENV = {
    "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "HOME": "/nonexistent-home",
}
_order = itertools.count()


@dataclass
class Connection:
    connector: RecordingConnector
    declaration: McpServerDeclaration
    closed: bool = False
    dead: bool = False
    # Opened in this order across every recording connector (a kit's connections, in order).
    seq: int = field(default_factory=lambda: next(_order))

    @property
    def alive(self) -> bool:
        return not self.closed and not self.dead

    async def list_tools(self) -> Sequence[McpToolSpec]:
        if self.connector.hang_list:
            await anyio.sleep(3600)
        specs = [
            McpToolSpec(
                name,
                self.connector.descriptions.get(name, f"{name} of {self.declaration.name}"),
                self.connector.schemas.get(name, SCHEMA),
            )
            for name in self.connector.tools
        ]
        refusals = self.connector.refusals
        return [
            replace(spec, refusal=refusals[spec.name]) if spec.name in refusals else spec
            for spec in specs
        ]

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        self.connector.calls.append((self.declaration.name, name, dict(arguments)))
        if arguments.get("zone") == "hang":
            await anyio.sleep(3600)
        if arguments.get("zone") == "slow":
            await anyio.sleep(1)
        if self.connector.output is not None:
            return ToolOutcome("succeeded", self.connector.output)
        return ToolOutcome("succeeded", f"{self.declaration.name}:{name}:{arguments['zone']}")

    async def aclose(self) -> None:
        await anyio.sleep(self.connector.close_delay_s)
        self.closed = True


@dataclass
class RecordingConnector:
    """Counts connects, their overlap and closes; fails or sleeps on demand."""

    tools: tuple[str, ...] = ("get_time",)
    delay_s: float = 0.0
    fail: str | None = None
    hang_list: bool = False
    approval_warning: str | None = None
    identity: str = "sandbox-a"
    close_delay_s: float = 0.0
    descriptions: dict[str, str] = field(default_factory=dict)
    schemas: dict[str, Any] = field(default_factory=dict)
    # Tools the connection refuses to call (their output schema failed its checks), and why.
    refusals: dict[str, str] = field(default_factory=dict)
    output: str | None = None
    connects: list[str] = field(default_factory=list)
    connections: list[Connection] = field(default_factory=list)
    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    running: int = 0
    peak: int = 0

    async def connect(self, declaration: McpServerDeclaration) -> Connection:
        self.connects.append(declaration.name)
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await anyio.sleep(self.delay_s)
            if self.fail is not None:
                raise RuntimeError(self.fail)
        finally:
            self.running -= 1
        connection = Connection(self, declaration)
        self.connections.append(connection)
        return connection


def declared(name: str, **changes: Any) -> McpServerDeclaration:
    base = McpServerDeclaration(name, "stdio", command=("mcp-server", name), connect_timeout_s=5)
    return replace(base, **changes)


class ConnectorKit(ABC):
    """Connectors of one kind for one test, what they started, and the pools to close.

    ``connector`` and ``change`` take the behaviour a clause needs of the next starts of
    a connector's servers: ``fail`` (a start fails with this text; None: starts work),
    ``delay_s`` (a start takes this long), ``hang_list`` (``tools/list`` never answers),
    ``close_delay_s`` (a close takes this long).
    """

    name: str

    def __init__(self) -> None:
        self._pools: list[McpConnections] = []

    def pool(self, pool: McpConnections) -> McpConnections:
        """``pool``, closed when the test ends (no server outlives it)."""
        self._pools.append(pool)
        return pool

    @abstractmethod
    async def connector(self, **options: Any) -> McpConnector: ...

    @abstractmethod
    async def change(self, connector: McpConnector, **options: Any) -> None: ...

    @abstractmethod
    def declared(self, name: str, **changes: Any) -> McpServerDeclaration:
        """A stdio declaration of server ``name`` this kit's connectors can start."""

    @abstractmethod
    def reidentified(self, connector: McpConnector) -> McpConnector:
        """A connector to the same servers under another identity (another sandbox)."""

    @abstractmethod
    async def observe(self) -> None:
        """Note the connections opened so far (called after every turn)."""

    @abstractmethod
    async def starts(self, name: str) -> int:
        """How many times server ``name`` was started (or connected), failed starts too."""

    @abstractmethod
    async def running(self, name: str) -> list[bool]:
        """For each connection to server ``name``, oldest first: whether it still runs."""

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


class RecordingKit(ConnectorKit):
    name = "recording"

    def __init__(self) -> None:
        super().__init__()
        self._made: list[RecordingConnector] = []

    async def connector(self, **options: Any) -> RecordingConnector:
        made = RecordingConnector(**options)
        self._made.append(made)
        return made

    async def change(self, connector: McpConnector, **options: Any) -> None:
        for option, value in options.items():
            setattr(connector, option, value)

    def declared(self, name: str, **changes: Any) -> McpServerDeclaration:
        return declared(name, **changes)

    def reidentified(self, connector: McpConnector) -> McpConnector:
        assert isinstance(connector, RecordingConnector)
        connector.identity += "-moved"
        return connector

    async def observe(self) -> None:
        """The recording connectors keep every connection they made."""

    async def starts(self, name: str) -> int:
        return sum(made.connects.count(name) for made in self._made)

    async def running(self, name: str) -> list[bool]:
        found = [c for made in self._made for c in made.connections]
        return [
            not c.closed for c in sorted(found, key=lambda c: c.seq) if c.declaration.name == name
        ]


@dataclass(frozen=True)
class _Started:
    pid: int
    created: float
    server: str


class RealKit(ConnectorKit):
    """Real stdio servers, one workspace per connector (the files there steer them)."""

    name = "real"

    def __init__(self, root: Path) -> None:
        """Blocking (it probes bubblewrap): build it off the event loop."""
        super().__init__()
        probe = probe_bubblewrap()
        if not probe.ok:
            missing("sandbox", probe.reason)  # a failure where make test requires it
        self._root = root
        self._workspaces: dict[McpClientConnector, Path] = {}
        self._seen: list[_Started] = []
        # Concurrent turns observe at once, each from a worker thread.
        self._scanning = threading.Lock()

    async def connector(self, **options: Any) -> McpClientConnector:
        workspace = self._root / f"ws{len(set(self._workspaces.values()))}"

        def prepare() -> None:
            workspace.mkdir(parents=True)
            shutil.copy(SERVER, workspace / "listing_server.py")
            _steer(workspace, options)

        await anyio.to_thread.run_sync(prepare)
        return self._connector(workspace, HOST_ENV)

    def _connector(self, workspace: Path, environ: Mapping[str, str]) -> McpClientConnector:
        made = McpClientConnector(
            workspace=workspace, sandbox=SandboxPolicy(), url_policy=UrlPolicy(), environ=environ
        )
        self._workspaces[made] = workspace
        return made

    async def change(self, connector: McpConnector, **options: Any) -> None:
        assert isinstance(connector, McpClientConnector)
        await anyio.to_thread.run_sync(_steer, self._workspaces[connector], options)

    def declared(self, name: str, **changes: Any) -> McpServerDeclaration:
        command = (sys.executable, "listing_server.py", "legacy", "clock", name)
        base = McpServerDeclaration(name, "stdio", command=command, connect_timeout_s=10)
        return replace(base, **changes)

    def reidentified(self, connector: McpConnector) -> McpConnector:
        assert isinstance(connector, McpClientConnector)
        moved = self._connector(self._workspaces[connector], {**HOST_ENV, "TZ": "Asia/Tokyo"})
        assert moved.identity != connector.identity
        return moved

    async def observe(self) -> None:
        await anyio.to_thread.run_sync(self._scan)

    def _scan(self) -> None:
        """Each new server tree: a child of this process (the tree's init) whose argv ends
        with the bubblewrapped ``listing_server.py`` of one of this kit's workspaces."""
        with self._scanning:
            known = {(s.pid, s.created) for s in self._seen}
            roots = {str(path) for path in self._workspaces.values()}
            found = []
            for child in psutil.Process().children():
                with contextlib.suppress(psutil.Error):
                    argv, created = child.cmdline(), child.create_time()
                    if "clock" not in argv or (child.pid, created) in known:
                        continue
                    if any(root in argv for root in roots):
                        found.append(_Started(child.pid, created, argv[argv.index("clock") + 1]))
            self._seen.extend(sorted(found, key=lambda s: (s.created, s.pid)))

    async def starts(self, name: str) -> int:
        def count() -> int:
            logs = [path / "starts" for path in set(self._workspaces.values())]
            lines = [line for log in logs if log.exists() for line in log.read_text().split()]
            return lines.count(name)

        return await anyio.to_thread.run_sync(count)

    async def running(self, name: str) -> list[bool]:
        await self.observe()
        return await anyio.to_thread.run_sync(
            lambda: [_runs(s) for s in self._seen if s.server == name]
        )

    async def aclose(self) -> None:
        await super().aclose()
        left = await anyio.to_thread.run_sync(self._settle)
        assert left == [], f"MCP server processes outlived their pool: {left}"

    def _settle(self, deadline_s: float = 10.0) -> list[int]:
        roots = {str(path) for path in self._workspaces.values()}

        def left() -> list[int]:
            pids = []
            for process in psutil.Process().children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    argv = process.cmdline()
                    if process.status() != psutil.STATUS_ZOMBIE and any(
                        root in argv for root in roots
                    ):
                        pids.append(process.pid)
            return pids

        deadline = time.monotonic() + deadline_s
        while left() and time.monotonic() < deadline:
            time.sleep(0.05)
        return left()


def _runs(started: _Started) -> bool:
    try:
        process = psutil.Process(started.pid)
        return process.create_time() == started.created and (
            process.status() != psutil.STATUS_ZOMBIE
        )
    except psutil.Error:
        return False


_FILES = {"fail": "fail", "delay_s": "delay", "hang_list": "hang_list", "close_delay_s": "linger"}


def _steer(workspace: Path, options: Mapping[str, Any]) -> None:
    """Write (or remove, for None, False or 0) the file that gives the next starts of the
    workspace's servers each option's behaviour (``listing_server.py``'s clock mode)."""
    for option, value in options.items():
        path = workspace / _FILES[option]
        if value is None or value is False or value == 0:
            path.unlink(missing_ok=True)
        else:
            path.write_text("" if value is True else str(value))
