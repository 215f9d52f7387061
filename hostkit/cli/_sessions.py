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

sessions = typer.Typer(
    help="List sessions, most recent activity first; erase one session's content "
    "(operator authority; audited).",
)


@sessions.callback(invoke_without_command=True)
def list_sessions(
    ctx: typer.Context,
    reason: Reason = None,
    limit: Annotated[int, typer.Option(min=1, max=499)] = 50,
    json_: JsonOption = False,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """List sessions, most recent activity first: agent, turns, last outcome.

    Operator authority; the reason is audited.
    """
    if ctx.invoked_subcommand is not None:
        return

    async def main() -> None:
        async with operator_host(config, operator, reason, reads_only=True) as (host, scope):
            rows = await activity_rows(host, scope, limit=limit)
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
            if rows.truncated:
                console.print(f"(the {limit} most recent; --limit shows more)", highlight=False)

    run_command(main)


@sessions.command("erase")
def erase(
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
    reason = required_reason(reason, "say why this session is erased")
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
