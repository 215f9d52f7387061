"""MCP through hostkit against the bare official ``mcp`` SDK, on a real PyPI server.

The server is ``mcp-server-time`` (``python -m mcp_server_time --local-timezone
UTC``), started over stdio by both sides in the same run; its tool
``get_current_time {"timezone": "UTC"}`` is answered from the server's own
clock, so a call is one JSON-RPC round trip and little else.

Connect: wall time from nothing to an initialized session with its tool list
(spawn, ``initialize``, ``tools/list``), p50/p99 in ms over ``--connects``
connects per path, the paths taken in turn so drift on a shared machine hits
them alike; closing (the process tree gone) is timed separately. Nearly all
of a connect is the server's own Python start-up (about 1.5 s on 2 cores),
the same on every path. Paths: the
SDK's ``stdio_client`` + ``ClientSession``; hostkit's ``McpClientConnector``
in a bubblewrap sandbox (as a Host runs it); the same connector with
``sandbox = "none"``, so the sandbox's own cost is visible apart from the
client's. One untimed connect per path (``--quick``: only the first) pays
the cold imports first.

Call: p50/p99 of ``get_current_time`` over ``--calls`` calls on warm
connections, again in turn. Paths: the SDK's ``session.call_tool``;
``EffectRuntime.execute`` with ``McpConnections`` (the whole pipeline a
model's call takes: catalog binding, capability snapshot, argument
validation against the server's schema, policy, deadline, bounded views);
hostkit's connection ``call_tool`` alone, in the sandbox and without it.

Why: an agent pays the connect once per session and the call on every tool
use; the ratios say what hostkit's sandbox, client and pipeline add on top of
the SDK it is built on. At the end every server process must be gone.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import math
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import psutil
from mcp import ClientSession, StdioServerParameters, stdio_client

from hostkit.authority import AuthorityResolver
from hostkit.builtins.mcp import McpClientConnector
from hostkit.builtins.process import SandboxPolicy, probe_bubblewrap
from hostkit.builtins.web import UrlPolicy
from hostkit.effects import (
    EffectPolicy,
    EffectRuntime,
    McpConnection,
    McpConnections,
    McpServer,
    McpServerDeclaration,
    Toolset,
    mcp_call_grant,
    mcp_connect_grant,
)
from hostkit.store import RuntimeStore
from hostkit.types import ConversationFacts, EffectRequest, TurnExecutionContext, TurnToken, new_id

SERVER = "time"
ARGV = (sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC")
TOOL = "get_current_time"
ARGUMENTS = {"timezone": "UTC"}
SETTLE_S = 10.0
Connect = Callable[[], Awaitable[tuple[float, float]]]
Call = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Figures:
    """Latency percentiles of one path, in ms."""

    p50_ms: float
    p99_ms: float

    @classmethod
    def of(cls, seconds: list[float]) -> Figures:
        return cls(_percentile(seconds, 0.50) * 1000, _percentile(seconds, 0.99) * 1000)


def _percentile(samples: list[float], fraction: float) -> float:
    """Nearest rank: the p99 of 300 samples is the 297th smallest."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(len(ordered) * fraction) - 1)]


def _check_time(value: Any, path: str) -> None:
    """A real answer: the server's structured result for UTC."""
    if not isinstance(value, Mapping) or value.get("timezone") != "UTC" or "datetime" not in value:
        raise RuntimeError(f"{path}: unexpected get_current_time result {value!r}")


def _check_tools(names: list[str], path: str) -> None:
    if TOOL not in names:
        raise RuntimeError(f"{path}: {TOOL} is not listed ({names})")


@asynccontextmanager
async def bare_session() -> AsyncIterator[ClientSession]:
    """The SDK's own way: spawn over stdio, enter a session, initialize."""
    params = StdioServerParameters(command=ARGV[0], args=list(ARGV[1:]))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def declaration() -> McpServerDeclaration:
    return McpServerDeclaration(SERVER, "stdio", command=ARGV)


def connector(workspace: Path, mode: str) -> McpClientConnector:
    sandbox = SandboxPolicy() if mode == "bubblewrap" else SandboxPolicy(mode="none")
    return McpClientConnector(workspace=workspace, sandbox=sandbox, url_policy=UrlPolicy())


async def connect_bare() -> tuple[float, float]:
    started = time.perf_counter()
    async with bare_session() as session:
        listed = await session.list_tools()
        opened = time.perf_counter() - started
        _check_tools([tool.name for tool in listed.tools], "bare SDK")
        closing = time.perf_counter()
    return opened, time.perf_counter() - closing


def connect_hostkit(client: McpClientConnector) -> Connect:
    async def connect() -> tuple[float, float]:
        started = time.perf_counter()
        connection = await client.connect(declaration())
        try:
            tools = await connection.list_tools()
            opened = time.perf_counter() - started
            _check_tools([tool.name for tool in tools], "hostkit connector")
        finally:
            closing = time.perf_counter()
            await connection.aclose()
        return opened, time.perf_counter() - closing

    return connect


async def bench_connect(
    paths: list[tuple[str, Connect]], rounds: int, *, warm_each: bool
) -> list[tuple[str, Figures, Figures]]:
    """``warm_each``: one untimed connect per path first, else only the first path's (the
    server's imports are then in the page cache for every path)."""
    for _, connect in paths if warm_each else paths[:1]:
        await connect()
    opened: dict[str, list[float]] = {label: [] for label, _ in paths}
    closed: dict[str, list[float]] = {label: [] for label, _ in paths}
    for _ in range(rounds):
        for label, connect in paths:
            open_s, close_s = await connect()
            opened[label].append(open_s)
            closed[label].append(close_s)
    return [(label, Figures.of(opened[label]), Figures.of(closed[label])) for label, _ in paths]


async def bench_calls(paths: list[tuple[str, Call]], calls: int) -> list[tuple[str, Figures]]:
    for _ in range(max(20, calls // 10)):
        for _, call in paths:
            await call()
    samples: dict[str, list[float]] = {label: [] for label, _ in paths}
    for _ in range(calls):
        for label, call in paths:
            started = time.perf_counter()
            await call()
            samples[label].append(time.perf_counter() - started)
    return [(label, Figures.of(samples[label])) for label, _ in paths]


@dataclass
class OneServer:
    """The toolset provider of a Host agent declaring the time server, nothing else."""

    server: McpServer
    workspace: Path

    async def toolset(self, context: TurnExecutionContext) -> Toolset:
        # The catch-all allow is no approval to start a server: the connect is named.
        policy = EffectPolicy(allow=("*", mcp_connect_grant(SERVER)))
        return Toolset((), policy, self.workspace, mcp_servers=(self.server,))


async def turn_context(root: Path) -> TurnExecutionContext:
    """A turn's context with a real principal scope, as ``effects_bench`` builds it."""
    async with await RuntimeStore.open(root / "bench.db") as store:
        scope = await AuthorityResolver.bind(store).for_conversation(
            ConversationFacts(channel="bench", conversation_key="c", principal_key="p")
        )
    session = scope.session_id or ""

    def token(kind: str) -> TurnToken:
        return TurnToken(kind, "req", "turn", session, new_id("n"))  # type: ignore[arg-type]

    return TurnExecutionContext(
        request_id="req",
        turn_id="turn",
        principal=scope,
        session_id=session,
        core_id="bench",
        core_revision="r",
        capability_snapshot={"effects": (mcp_connect_grant(SERVER), mcp_call_grant(SERVER))},
        workspace_scope=str(root),
        route_token=token("route"),
        admission_lease_token=token("admission"),
        cancellation_token=token("cancellation"),
        trace_ids=("t",),
        interaction_metadata={},
    )


def client_call(connection: McpConnection) -> Call:
    async def call() -> None:
        outcome = await connection.call_tool(TOOL, ARGUMENTS)
        if outcome.status != "succeeded":
            raise RuntimeError(f"hostkit connection: {outcome}")
        _check_time(outcome.output, "hostkit connection")

    return call


async def open_pipeline(
    stack: AsyncExitStack, root: Path, mode: str
) -> tuple[EffectRuntime, EffectRequest, TurnExecutionContext]:
    """A runtime with ``McpConnections`` that has discovered the server: one turn's catalog."""
    pool = McpConnections()
    stack.push_async_callback(pool.aclose)
    runtime = EffectRuntime(
        toolsets=OneServer(McpServer(declaration(), connector(root, mode)), root), mcp=pool
    )
    context = await turn_context(root)
    catalog = await runtime.prepare_catalog(context)
    stack.push_async_callback(runtime.close_catalog, catalog)
    ref = catalog.resolve(f"mcp_{SERVER}_{TOOL}")
    if ref is None:
        raise RuntimeError(f"the pipeline did not connect: {catalog.discoveries}")
    return runtime, EffectRequest("call", ref, ARGUMENTS), context


async def open_calls(
    stack: AsyncExitStack, root: Path, *, sandboxed: bool
) -> list[tuple[str, Call]]:
    """Every call path on a warm connection; ``stack`` closes them all.

    hostkit's servers start at once (set-up only: nothing is timed until all are up).
    """
    mode = "bubblewrap" if sandboxed else "none"
    client_modes = ("bubblewrap", "none") if sandboxed else ("none",)
    pipelines: list[tuple[EffectRuntime, EffectRequest, TurnExecutionContext]] = []
    connections: dict[str, McpConnection] = {}

    async def connect(client_mode: str) -> None:
        connection = await connector(root, client_mode).connect(declaration())
        stack.push_async_callback(connection.aclose)
        connections[client_mode] = connection

    async def pipeline_up() -> None:
        pipelines.append(await open_pipeline(stack, root, mode))

    # The SDK's session has task groups inside: entered here, outside the one below.
    session = await stack.enter_async_context(bare_session())
    async with anyio.create_task_group() as group:
        group.start_soon(pipeline_up)
        for client_mode in client_modes:
            group.start_soon(connect, client_mode)

    async def bare() -> None:
        result = await session.call_tool(TOOL, ARGUMENTS)
        if result.is_error:
            raise RuntimeError(f"bare SDK: {result}")
        _check_time(result.structured_content, "bare SDK")

    [(runtime, request, context)] = pipelines

    async def pipeline() -> None:
        result = await runtime.execute(request, context)
        if result.status != "succeeded" or '"UTC"' not in str(result.views.model):
            raise RuntimeError(f"EffectRuntime.execute: {result}")

    paths: list[tuple[str, Call]] = [
        ("bare SDK session.call_tool", bare),
        (f"hostkit execute(), {mode}", pipeline),
    ]
    for client_mode in client_modes:
        paths.append((f"hostkit call_tool, {client_mode}", client_call(connections[client_mode])))
    return paths


def server_processes() -> set[int]:
    """This process's descendants running the time server (sandboxed or not)."""
    found: set[int] = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if "mcp_server_time" in " ".join(child.cmdline()):
                found.add(child.pid)
        except psutil.Error:
            continue
    return found


async def leftovers() -> set[int]:
    """The server processes still alive after giving closed trees time to go."""
    for _ in range(int(SETTLE_S / 0.05)):
        if not await anyio.to_thread.run_sync(server_processes):
            break
        await anyio.sleep(0.05)
    return await anyio.to_thread.run_sync(server_processes)


def _ratio(value: float, bare: float) -> str:
    return f"{value / bare:>8.2f}x"


async def main(args: argparse.Namespace) -> None:
    connects = args.connects or (2 if args.quick else 10)
    calls = args.calls or (60 if args.quick else 300)
    versions = ", ".join(
        f"{name} {importlib.metadata.version(name)}"
        for name in ("hostkit", "mcp", "mcp-server-time", "anyio")
    )
    print(f"Python {sys.version.split()[0]}, {versions}; {os.cpu_count()} CPUs")
    probe = await anyio.to_thread.run_sync(probe_bubblewrap)
    sandboxed = probe.ok
    if not sandboxed:
        print(f"bubblewrap unavailable, sandboxed rows skipped: {probe.reason}")
    print(f"server: {' '.join(ARGV[1:])} over stdio; ratios are hostkit over bare (1.00x = same)\n")
    with tempfile.TemporaryDirectory(prefix="hostkit-mcp-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        connect_paths: list[tuple[str, Connect]] = [("bare SDK stdio_client", connect_bare)]
        for mode in ("bubblewrap", "none") if sandboxed else ("none",):
            connect_paths.append(
                (f"hostkit connector, {mode}", connect_hostkit(connector(root, mode)))
            )
        rows = await bench_connect(connect_paths, connects, warm_each=not args.quick)
        header = (
            f"{'path':<30}{'p50 ms':>9}{'p99 ms':>9}{'p50/bare':>10}{'p99/bare':>10}"
            f"{'close p50':>11}"
        )
        warm = "the first path" if args.quick else "each path"
        print(f"connect + initialize + list_tools, {connects} per path (+1 untimed, {warm})")
        print(header)
        print("-" * len(header))
        bare_open = rows[0][1]
        for label, opened, closed in rows:
            print(
                f"{label:<30}{opened.p50_ms:>9.1f}{opened.p99_ms:>9.1f}"
                f"{_ratio(opened.p50_ms, bare_open.p50_ms)}"
                f"{_ratio(opened.p99_ms, bare_open.p99_ms)}"
                f"{closed.p50_ms:>11.1f}"
            )

        async with AsyncExitStack() as stack:
            call_rows = await bench_calls(await open_calls(stack, root, sandboxed=sandboxed), calls)
        header = f"{'path':<30}{'p50 ms':>9}{'p99 ms':>9}{'p50/bare':>10}{'p99/bare':>10}"
        print(f"\n{TOOL} {{'timezone': 'UTC'}}, {calls} calls per path on warm connections")
        print(header)
        print("-" * len(header))
        bare_call = call_rows[0][1]
        for label, figures in call_rows:
            print(
                f"{label:<30}{figures.p50_ms:>9.3f}{figures.p99_ms:>9.3f}"
                f"{_ratio(figures.p50_ms, bare_call.p50_ms)}"
                f"{_ratio(figures.p99_ms, bare_call.p99_ms)}"
            )
        pipeline, client = call_rows[1][1], call_rows[2][1]
        print(
            f"pipeline over client-only at p50: {pipeline.p50_ms - client.p50_ms:+.3f} ms "
            f"({pipeline.p50_ms / client.p50_ms:.2f}x)"
        )
    left = await leftovers()
    print(f"\nserver processes left running after close: {len(left)}")
    if left:
        raise SystemExit(f"MCP server processes outlived their connections: {sorted(left)}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="hostkit vs the bare mcp SDK, mcp-server-time")
    parser.add_argument("--quick", action="store_true", help="2 connects and 60 calls per path")
    parser.add_argument("--connects", type=int, default=0, help="connects per path (default 10)")
    parser.add_argument("--calls", type=int, default=0, help="calls per path (default 300)")
    parser.add_argument("--dir", default=None, help="parent directory for the temporary files")
    return parser.parse_args()


if __name__ == "__main__":
    anyio.run(main, parse_args())
