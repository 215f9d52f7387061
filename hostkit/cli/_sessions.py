"""``hostkit sessions [erase]``: the sessions listing, and erasing one session's content.

``hostkit sessions`` lists sessions, most recent activity first. ``erase``
deletes what one session holds (transcript, turn results and event details,
context summary and bootstrap snapshot, outbox and inbound payloads, approvals'
arguments, attachments) and keeps id-only tombstones, through the store's one
transaction (``RuntimeStore.erase_session``). It needs ``--reason``, recorded in
the ``session.erased`` audit row as ``memory forget``'s is, and it cannot be
undone: on a terminal it asks first, elsewhere ``--yes`` says the caller meant it.
A session with a turn still running is refused; erase it once the turn ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

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
    stdin_is_a_terminal,
)
from hostkit.cli._render import sessions_note, sessions_table
from hostkit.errors import InvalidValue
from hostkit.inspect import activity_rows, printable

__all__ = ["sessions"]

# Rows listed unless --limit says otherwise.
_LIMIT = 50


@dataclass(frozen=True, slots=True)
class _Given:
    """The options said before a subcommand (``hostkit sessions -c X erase ...``)."""

    config: Path | None
    operator: str
    reason: str | None


sessions = typer.Typer(
    help="List sessions, most recent activity first; erase one session's content "
    "(operator authority; audited).",
)


@sessions.callback(invoke_without_command=True)
def list_sessions(
    ctx: typer.Context,
    reason: Reason = None,
    limit: Annotated[int, typer.Option(min=1, max=499)] = _LIMIT,
    before: Annotated[
        str | None,
        typer.Option(help="only sessions less recently active than this (the next page; listed)"),
    ] = None,
    json_: JsonOption = False,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """List sessions, most recent activity first: agent, turns, last outcome.

    Operator authority; the reason is audited.
    """
    if ctx.invoked_subcommand is not None:
        # Said before the subcommand, these are its: a config or operator given there and
        # dropped would erase another project's session, or audit the wrong operator.
        if limit != _LIMIT or before is not None or json_:
            raise fail(InvalidValue("--limit, --before and --json list sessions; erase takes none"))
        ctx.obj = _Given(config=config, operator=operator, reason=reason)
        return

    async def main() -> None:
        async with operator_host(config, operator, reason, reads_only=True) as (host, scope):
            rows = await activity_rows(host, scope, limit=limit, before=before)
            if json_:
                print_json(rows)
                return
            if not rows.sessions:
                # As the approvals listing says it: a header over nothing reads as a fault.
                console.print("no sessions yet (`hostkit run` starts one)", highlight=False)
                return
            out = Console()
            out.print(sessions_table(rows.sessions, width=out.width))
            if (note := sessions_note(rows.sessions)) is not None:
                console.print(note, highlight=False)
            if rows.next_before is not None:
                console.print(
                    f"(the {limit} most recent; --before {rows.next_before} shows older ones)",
                    highlight=False,
                )

    run_command(main)


@sessions.command("erase")
def erase(
    ctx: typer.Context,
    session_id: Annotated[
        str, typer.Argument(help="the session (see hostkit sessions)", show_default=False)
    ],
    reason: Annotated[
        str | None, typer.Option(help="why it is erased (required; recorded in the audit)")
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", help="erase without asking (it cannot be undone)")
    ] = False,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """Erase a session's content, keeping id-only tombstones; the reason is audited."""
    given = ctx.obj if isinstance(ctx.obj, _Given) else _Given(None, "cli", None)
    config = config if config is not None else given.config
    operator = operator if operator != "cli" else given.operator
    reason = required_reason(reason or given.reason, "say why this session is erased")
    shown = printable(session_id[:80])
    if not yes:
        if not stdin_is_a_terminal():
            raise fail(InvalidValue("erasing cannot be undone: add --yes to erase off a terminal"))
        if not typer.confirm(f"erase everything session {shown} holds? It cannot be undone"):
            raise typer.Exit(1)

    async def main() -> None:
        async with operator_host(config, operator, reason) as (host, scope):
            erased = await host.store.erase_session(scope, session_id, reason)
        console.print(
            f"erased session {shown}: {erased.turns} turns, {erased.messages} messages, "
            f"{erased.intents} delivery intents, {erased.approvals} approvals, "
            f"{erased.attachments} attachments (audit row {erased.audit_id})",
            highlight=False,
            markup=False,
        )

    run_command(main)
