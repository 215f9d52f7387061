"""``hostkit memory list | forget``: one person's agent memory, as an operator sees and prunes it.

A full memory refuses every new item, and an item a steered model stored
keeps steering the agent: an operator lists what it holds (newest first, with
the session and turn that stored each item) and forgets an item or all of
them. Every subcommand acts with an audited operator scope on one agent
(``--agent``) and one principal (``--principal``; default the terminal user
``hostkit run`` talks as). ``forget`` always needs ``--reason``: it is recorded
in the ``memory.forgotten`` audit row written with the delete. Item text is
shown on one line, cut and with control characters escaped (a model wrote it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from hostkit.cli._clock import TIME_CHARS
from hostkit.cli._common import (
    ConfigOption,
    JsonOption,
    Operator,
    Reason,
    console,
    fail,
    operator_host,
    print_json,
    required_reason,
    run_command,
)
from hostkit.cli._render import READABLE, Column, fit_table, short_time
from hostkit.errors import InvalidValue
from hostkit.inspect import one_line, printable
from hostkit.store import MAX_MEMORY_LIST, MemoryItem

__all__ = ["memory", "memory_table"]

# The terminal user of ``hostkit run`` (channel cli, principal key local-user).
TERMINAL_USER = "cli:local-user"
TEXT_CHARS = 200
# The largest item id either store hands out.
_MAX_ID = 2**63 - 1

memory = typer.Typer(
    help="Agent memory of one person: list its items and where each came from, forget one "
    "or all (operator authority; audited).",
    no_args_is_help=True,
)

AgentOption = Annotated[str, typer.Option("--agent", "-a", help="the agent whose memory")]
PrincipalOption = Annotated[
    str,
    typer.Option(
        help="whose memory: a principal id such as telegram:12345 (default: the terminal user)"
    ),
]


def memory_table(items: Sequence[MemoryItem], *, width: int) -> Table:
    """One row per item, newest first; the id is never cut, the text is one bounded line."""
    columns = (
        Column("id", whole=True, justify="right"),
        Column("stored", cap=TIME_CHARS, drop=3),
        Column("session", whole=True, drop=2),
        Column("turn", whole=True, drop=1),
        Column("text", flexible=True, least=READABLE),
    )
    rows = [
        (
            str(item.item_id),
            short_time(item.created_at),
            item.session_id or "-",
            item.turn_id or "-",
            one_line(item.text, TEXT_CHARS),
        )
        for item in items
    ]
    return fit_table(columns, rows, width)


@memory.command("list")
def list_items(
    agent: AgentOption = "assistant",
    principal: PrincipalOption = TERMINAL_USER,
    limit: Annotated[int, typer.Option(min=1, max=MAX_MEMORY_LIST)] = 50,
    before: Annotated[
        int | None, typer.Option(min=1, help="only items older than this id (the next page)")
    ] = None,
    reason: Reason = None,
    json_: JsonOption = False,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """List a person's memory items, newest first: id, when, session, turn, text."""

    async def main() -> None:
        async with operator_host(config, operator, reason, reads_only=True) as (host, scope):
            items = await host.memory.list(
                scope, agent, principal=principal, limit=limit, before=before
            )
            # A full page may be all there is: one item past it says whether it was cut.
            truncated = len(items) == limit and bool(
                await host.memory.list(
                    scope, agent, principal=principal, limit=1, before=items[-1].item_id
                )
            )
        if json_:
            print_json({"items": items, "truncated": truncated})
            return
        if not items:
            console.print(
                f"no memory items of {printable(principal)} for agent {printable(agent)}",
                highlight=False,
                markup=False,
            )
            return
        out = Console()
        out.print(memory_table(items, width=out.width))
        if truncated:
            console.print(
                f"(the {limit} newest; --before {items[-1].item_id} shows older ones)",
                highlight=False,
            )

    run_command(main)


@memory.command("forget")
def forget(
    item: Annotated[
        str | None, typer.Argument(help="the item id (see hostkit memory list)", show_default=False)
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="every item of the person and agent")] = False,
    agent: AgentOption = "assistant",
    principal: PrincipalOption = TERMINAL_USER,
    reason: Annotated[
        str | None, typer.Option(help="why it is forgotten (required; recorded in the audit)")
    ] = None,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """Forget one memory item by id, or --all of them; the reason is audited."""
    if (item is not None) == all_:
        raise fail(InvalidValue("forget takes an item id or --all (not both, not neither)"))
    item_id = None if item is None else _item_id(item)
    reason = required_reason(reason, "say why this memory is forgotten")

    async def main() -> None:
        async with operator_host(config, operator, reason) as (host, scope):
            if item_id is None:
                count = await host.memory.forget_all(
                    scope, agent, principal=principal, reason=reason
                )
                said = f"forgot {count} memory item{'' if count == 1 else 's'}"
            else:
                found = await host.memory.forget(
                    scope, agent, item_id, principal=principal, reason=reason
                )
                said = (
                    f"forgot memory item {found.item_id} (stored {short_time(found.created_at)}"
                    f" in session {found.session_id or '-'}, turn {found.turn_id or '-'})"
                )
        console.print(
            printable(f"{said} of {principal} for agent {agent}"), highlight=False, markup=False
        )

    run_command(main)


def _item_id(text: str) -> int:
    """An item id as typed, or a one-line error (exit status 2) saying what one is."""
    shown = text.strip()
    digits = shown.isascii() and shown.isdigit() and len(shown) <= len(str(_MAX_ID))
    if not digits or not 1 <= int(shown) <= _MAX_ID:
        raise fail(
            InvalidValue(
                f"{printable(text[:40])!r} is not a memory item id: a positive number "
                "(see hostkit memory list)"
            )
        )
    return int(shown)
