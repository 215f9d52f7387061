"""``hostkit mcp list``: each agent's declared MCP servers with what the Host last knew of them.

The agents listed are the ones the Host runs. ``[agents.*]`` declare their
servers in the configuration; an Agent Core declares them in the
``agent.yaml`` of its live revision, which only the Host's composition knows
(the store records which revision is live): with ``[cores]`` configured and
a database present, a Host is opened without checking providers, the way
``hostkit core status`` opens one, and its composed configuration is what is
listed. A core that is not available (never promoted, or a live revision
that cannot be loaded) is one warning naming why, not an error, and its
stored rows are not shown as ``removed``: its declarations are unknown.

No server is started and nothing is connected, so listing is safe while a
Host runs and on a database that has never seen a server (a missing database
is not created: then no core is live). Every cell is ``Text``: servers name
their own tools and write their own descriptions and errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from hostkit.cli._clock import shown_clock
from hostkit.cli._common import (
    ConfigOption,
    JsonOption,
    console,
    find_config,
    naming_config,
    open_host,
    print_json,
    run_command,
)
from hostkit.cli._render import Column, command_line, fit_table
from hostkit.host import (
    HostConfig,
    default_config,
    load_config,
    open_configured_store,
    store_exists,
)
from hostkit.inspect import McpServerRow, McpServerRows, mcp_server_rows, one_line, printable
from hostkit.types import McpServerStatus

__all__ = ["mcp", "print_servers", "servers_table", "state_text", "tools_table"]

DETAIL_CHARS = 300
TARGET_CHARS = 600
DESCRIPTION_CHARS = 200

mcp = typer.Typer(
    help="MCP servers: what each agent declares and what the Host last knew of them.",
    no_args_is_help=True,
)


def state_text(row: McpServerRow) -> str:
    """``failing until 13:48:03Z`` (``shown_clock``: UTC) for a failing server, else its state."""
    if row.state == "failing" and row.failing_until is not None:
        return f"failing until {shown_clock(row.failing_until)}"
    return row.state


def servers_table(rows: Sequence[McpServerRow], *, width: int) -> Table:
    """One agent's servers: state, transport, and the command (env names) or URL."""
    columns = (
        Column("server", whole=True),
        Column("state", cap=32),
        Column("via", cap=5, drop=2),
        Column("tools", cap=5, drop=1),
        Column("command / url", flexible=True, wrap=True),
    )
    cells = [
        (
            row.server,
            state_text(row) + (" (changed)" if row.changed else ""),
            row.transport,
            str(len(row.tools)),
            one_line(_target(row), TARGET_CHARS),
        )
        for row in rows
    ]
    return fit_table(columns, cells, width)


def tools_table(rows: Sequence[McpServerRow], *, width: int) -> Table:
    """One agent's discovered tools: effect name, the server's own name, provenance."""
    columns = (
        Column("effect", whole=True),
        Column("server's name", cap=24, drop=2),
        Column("from", cap=20, drop=3),
        Column("description", flexible=True, wrap=True, drop=1),
    )
    cells = [
        (
            one_line(tool.effect, 200),
            one_line(tool.name, 200),
            row.provenance,
            one_line(tool.description, DESCRIPTION_CHARS),
        )
        for row in rows
        for tool in row.tools
    ]
    return fit_table(columns, cells, width)


def _target(row: McpServerRow) -> str:
    extras = []
    if row.env:
        extras.append("env " + ", ".join(row.env))
    if row.network:
        extras.append("network")
    return row.target + "".join(f" [{extra}]" for extra in extras)


def print_servers(out: Console, rows: McpServerRows) -> None:
    """Per agent: a heading, its servers, each failure's detail, then its tools."""
    for agent, group in groupby(rows.servers, key=lambda row: row.agent):
        servers = list(group)
        out.print(Text(printable(f"agent {agent}"), style="bold"))
        out.print(servers_table(servers, width=out.width))
        for row in servers:
            if row.detail:
                detail = one_line(row.detail, DETAIL_CHARS)
                out.print(Text(f"  {printable(row.server)}: {detail}"))
        if any(row.tools for row in servers):
            out.print(tools_table(servers, width=out.width))


async def _statuses(config: HostConfig) -> tuple[McpServerStatus, ...]:
    """The stored statuses; none when the database does not exist yet (it is not created)."""
    if not await store_exists(config):
        return ()
    store = await open_configured_store(config)
    async with store:
        return await store.mcp_servers.mcp_statuses()


async def _running(
    declared: HostConfig,
) -> tuple[HostConfig, dict[str, str], tuple[McpServerStatus, ...]]:
    """The configuration the Host runs, why each core left out of it is, and the statuses.

    Without ``[cores]`` that is ``declared`` itself and no Host opens. With
    them, the Host's own composition (``host.config``: each core compiled from
    its live revision) and the reason it gave for each core it left out
    (``host.warnings``); those warnings are printed by the caller, with what
    they mean for the listing, not by ``open_host``. No database: nothing was
    ever promoted, so no core is live, and none is created to say so.
    """
    if not declared.cores:
        return declared, {}, await _statuses(declared)
    if not await store_exists(declared):
        return declared, {core_id: _not_live(core_id) for core_id in declared.cores}, ()

    def left_out(line: str) -> bool:
        # compose_cores words every "not available" warning so: "core '<id>' ..."
        # (a healed ref's warning is "core '<id>': ..." and is printed as usual).
        return any(line.startswith(f"core {core_id!r} ") for core_id in declared.cores)

    async with open_host(declared, check_providers=False, moot=left_out) as host:
        composed = host.config
        reasons = {
            core_id: next(
                (line for line in host.warnings if line.startswith(f"core {core_id!r} ")),
                f"core {core_id!r} is not available",
            )
            for core_id in composed.cores
            if core_id not in composed.agents
        }
        return composed, reasons, await host.store.mcp_servers.mcp_statuses()


def _not_live(core_id: str) -> str:
    """What the Host says at open of a core never promoted."""
    promote = command_line("core", "promote", core_id, reason="...")
    return f"core {core_id!r} has no live revision; run `{promote}`"


def _print_left_out(reasons: dict[str, str], agent: str | None, config: Path | None) -> None:
    """One warning line per core (of ``agent``, or all) whose servers are unknown, and why.

    The promote hint names ``-c`` when one was given: pasted, it acts on this project.
    """
    for core_id, reason in sorted(reasons.items()):
        if agent is not None and agent != core_id:
            continue
        if config is not None:
            reason = naming_config(reason, (core_id,), config)
        line = printable(" ".join(reason.split()))
        console.print(
            Text.assemble(("warning", "bold yellow"), f": {line} (its MCP servers are not listed)"),
            highlight=False,
            soft_wrap=True,
        )


async def _config(path: Path | None) -> HostConfig:
    if path is None:
        return default_config(base_dir=Path(await anyio.Path.cwd()))
    return await anyio.to_thread.run_sync(load_config, path)


@mcp.command("list")
def list_servers(
    agent: Annotated[str | None, typer.Option("--agent", "-a", help="only this agent")] = None,
    json_: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Each declared server's state, command or URL (env names only) and tools; connects nothing."""

    async def main() -> None:
        composed, left_out, statuses = await _running(await _config(await find_config(config)))
        # An unknown --agent is refused before any warning: one error line.
        rows = mcp_server_rows(composed, statuses, agent=agent)
        _print_left_out(left_out, agent, config)
        if json_:
            print_json(rows.servers)
            return
        if not rows.servers:
            if agent not in left_out:
                console.print("no MCP servers declared or recorded", highlight=False)
            return
        print_servers(Console(), rows)

    run_command(main)
