"""Terminal rendering of turns and lists (Rich), shared by every command."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hostkit.effects import PendingApproval
from hostkit.errors import bounded
from hostkit.freeze import thaw
from hostkit.types import SessionRecord, TurnResult

__all__ = [
    "approval_note",
    "approvals_table",
    "one_line",
    "print_pending",
    "print_result",
    "sessions_table",
]

# The arguments column of ``hostkit approvals list``: enough to recognise the call.
ARGUMENTS_CHARS = 80


def print_result(console: Console, result: TurnResult, *, database: str) -> None:
    """Outcome, effects, usage and where the state lives, after a streamed answer."""
    style = "green" if result.outcome == "completed" else "yellow"
    console.print(f"[bold {style}]outcome[/]: {result.outcome}", highlight=False)
    if result.error:
        console.print(f"[bold]error[/]: {escape(result.error)}", highlight=False)
    for effect in result.effects:
        console.print(f"  effect {effect.effect}: {effect.status}", highlight=False, markup=False)
    usage = result.usage
    console.print(
        f"[bold]usage[/]: input {usage.input_tokens} tokens, output {usage.output_tokens} tokens"
        f" (cache read {usage.cache_read_tokens}, cache write {usage.cache_write_tokens})",
        highlight=False,
    )
    console.print(
        f"[bold]session[/]: {result.session_id}  [bold]turn[/]: {result.turn_id}", highlight=False
    )
    console.print(f"[bold]database[/]: {escape(database)}", highlight=False)


def print_pending(console: Console, approval_id: str, *, config: Path | None = None) -> None:
    """How to answer a paused turn's approval (printed unwrapped, so it can be copied)."""
    suffix = f" -c {config}" if config is not None else ""
    console.print(
        f"[bold yellow]waiting for approval[/]: {escape(approval_id)}",
        highlight=False,
        soft_wrap=True,
    )
    for verb in ("approve", "deny"):
        command = f'hostkit approvals {verb} {approval_id} --reason "..."{suffix}'
        console.print(f"  {verb:<8} {command}", highlight=False, markup=False, soft_wrap=True)


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


def approvals_table(approvals: Sequence[PendingApproval]) -> Table:
    """One row per approval; the arguments are the stored redacted view, cut short.

    The note says what to do next (an answered approval whose continuation
    never ran: resume it) or why a void one will never run.
    """
    table = Table("approval", "created", "agent", "effect", "status", "arguments", "note")
    # An id is what the reader copies into `approve`: wrapped if it must be, never cut.
    table.columns[0].overflow = "fold"
    for approval in approvals:
        cells = (
            approval.approval_id,
            approval.created_at,
            approval.core_id,
            approval.effect,
            approval.status,
            one_line(approval.view.get("arguments", {}), ARGUMENTS_CHARS),
            approval_note(approval),
        )
        # Text, not markup: the arguments were chosen by a model.
        table.add_row(*(Text(cell) for cell in cells))
    return table


def approval_note(approval: PendingApproval) -> str:
    """The next step for an approval, or the reason it is void ("" when there is none)."""
    if approval.awaiting_continuation:
        return (
            f"answered ({approval.decision}), not run yet: "
            f"hostkit approvals resume {approval.approval_id}"
        )
    if approval.void_reason:
        return one_line(approval.void_reason, ARGUMENTS_CHARS * 2)
    return ""


def one_line(value: Any, limit: int) -> str:
    """A view value as one bounded, redacted line with control characters escaped.

    Strings pass through ``bounded`` (which also redacts ``api_key=...``-style
    assignments and bearer tokens); anything else is shown as compact JSON.
    Escaping control and format characters (ESC, bidi overrides) keeps a
    model-chosen value from repainting the terminal.
    """
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(thaw(value), ensure_ascii=False, sort_keys=True, default=str)
    text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in bounded(text, limit))
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"
