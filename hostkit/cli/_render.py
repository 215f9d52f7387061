"""Terminal rendering of turns and lists (Rich), shared by every command."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from hostkit.types import SessionRecord, TurnResult

__all__ = ["print_result", "sessions_table"]


def print_result(console: Console, result: TurnResult, *, database: str) -> None:
    """Outcome, effects, usage and where the state lives, after a streamed answer."""
    style = "green" if result.outcome == "completed" else "yellow"
    console.print(f"[bold {style}]outcome[/]: {result.outcome}", highlight=False)
    if result.error:
        console.print(f"[bold]error[/]: {result.error}", highlight=False)
    for effect in result.effects:
        console.print(f"  effect {effect.effect}: {effect.status}", highlight=False)
    usage = result.usage
    console.print(
        f"[bold]usage[/]: input {usage.input_tokens} tokens, output {usage.output_tokens} tokens"
        f" (cache read {usage.cache_read_tokens}, cache write {usage.cache_write_tokens})",
        highlight=False,
    )
    console.print(
        f"[bold]session[/]: {result.session_id}  [bold]turn[/]: {result.turn_id}", highlight=False
    )
    console.print(f"[bold]database[/]: {database}", highlight=False)


def sessions_table(sessions: Sequence[SessionRecord]) -> Table:
    table = Table("session", "created", "owner", "status", "title")
    for record in sessions:
        table.add_row(
            record.session_id,
            record.created_at,
            record.owner_kind,
            record.status,
            record.title or "",
        )
    return table
