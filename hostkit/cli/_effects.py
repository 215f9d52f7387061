"""``hostkit effects runs | audit``: what effects really did, from the durable records.

``runs`` lists background ``terminal.run`` records (state, exit code, stream
sizes; an ``orphaned`` run's reason says which Host died). ``audit`` shows a
session's persisted audit views: a terminal run's working directory,
environment names, executable and launcher; a fetch's origin and validated
addresses per hop. Both act with an audited operator scope. Every cell is
``Text``: the values come from the database.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from hostkit.cli._clock import TIME_CHARS
from hostkit.cli._common import (
    ConfigOption,
    JsonOption,
    Operator,
    Reason,
    chosen_session,
    console,
    operator_host,
    print_json,
    run_command,
)
from hostkit.cli._render import READABLE, Column, fit_table, short_time
from hostkit.errors import bounded
from hostkit.freeze import thaw
from hostkit.inspect import (
    EffectAuditRows,
    TerminalRunRows,
    effect_audit_rows,
    one_line,
    terminal_run_rows,
)

__all__ = ["audit_table", "effects", "runs_table"]

MAX_LIST = 499
VIEW_CHARS = 400  # the audit view column, wrapped
_WHOLE_ID = len("run_id=run_") + 28  # an id's prefix and its 28 hex digits
_HEADER = frozenset({"turn_id", "call_id", "outcome"})
# What a reader looks for first: where it ran and what ran; where a fetch went.
_FIRST = ("cwd_resolved", "executable", "launcher", "sandbox", "target", "hops", "env_keys")

effects = typer.Typer(
    help="What effects did: background terminal runs and audit views (operator; audited).",
    no_args_is_help=True,
)


def runs_table(rows: TerminalRunRows, *, width: int) -> Table:
    columns = (
        Column("run", whole=True),
        Column("session", whole=True, drop=4),
        Column("program", cap=24, drop=3),
        Column("state", cap=13),
        Column("exit", cap=4),
        Column("stdout", cap=12, drop=2),
        Column("stderr", cap=12, drop=1),
        Column("reason", flexible=True, wrap=True, drop=5, least=READABLE),
    )
    cells = [
        (
            run.run_id,
            run.session_id,
            f"{run.program} ({_arguments(run.argc - 1)})",
            run.state,
            "" if run.exit_code is None else str(run.exit_code),
            f"{run.stdout.total_bytes} B{' cut' if run.stdout.truncated else ''}",
            f"{run.stderr.total_bytes} B{' cut' if run.stderr.truncated else ''}",
            run.reason or "",
        )
        for run in rows.runs
    ]
    return fit_table(columns, cells, width)


def audit_table(rows: EffectAuditRows, *, width: int) -> Table:
    columns = (
        Column("at", cap=TIME_CHARS, drop=2),
        Column("effect", cap=16),
        Column("call", whole=True, drop=1),
        Column("outcome", cap=13),
        # Wide enough for its longest id (``run_id=run_…``) to wrap whole at a space: the
        # optional columns make room first.
        Column("view", flexible=True, wrap=True, least=_WHOLE_ID),
    )
    cells = []
    for record in rows.audits:
        detail = thaw(record.detail)
        cells.append(
            (
                short_time(record.at),
                record.kind.removeprefix("effect."),
                record.subject or "",
                str(detail.get("outcome", "")),
                _view_line(detail),
            )
        )
    return fit_table(columns, cells, width)


def _view_line(detail: dict[str, Any]) -> str:
    keys = [key for key in _FIRST if key in detail]
    keys += sorted(key for key in detail if key not in _HEADER and key not in keys)
    return bounded(" ".join(f"{key}={one_line(detail[key], 120)}" for key in keys), VIEW_CHARS)


@effects.command("runs")
def list_runs(
    reason: Reason = None,
    session: Annotated[str | None, typer.Option(help="only this session's runs")] = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_LIST)] = 50,
    json_: JsonOption = False,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """Background terminal runs, newest first, with how each ended."""

    async def main() -> None:
        async with operator_host(config, operator, reason, reads_only=True) as (host, scope):
            rows = await terminal_run_rows(host, scope, session_id=session, limit=limit)
            if json_:
                print_json(rows)
                return
            if not rows.runs:
                console.print("no background terminal runs")
                return
            out = Console()
            out.print(runs_table(rows, width=out.width))
            if rows.truncated:
                console.print(f"(the {limit} newest; --limit shows more)", highlight=False)

    run_command(main)


@effects.command("audit")
def show_audit(
    session_id: Annotated[
        str | None, typer.Argument(help="the session (default: the most recently active)")
    ] = None,
    reason: Reason = None,
    turn: Annotated[str | None, typer.Option(help="only this turn's calls")] = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_LIST)] = 100,
    json_: JsonOption = False,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """The persisted audit views of a session's newest effect calls, in order."""

    async def main() -> None:
        async with operator_host(config, operator, reason, reads_only=True) as (host, scope):
            chosen = await chosen_session(host, scope, session_id)
            rows = await effect_audit_rows(host, scope, chosen, turn_id=turn, limit=limit)
            if json_:
                print_json(rows)
                return
            if not rows.audits:
                console.print("no effect audit views")
                return
            out = Console()
            out.print(audit_table(rows, width=out.width))
            if rows.truncated:
                console.print(f"(the {limit} newest; --limit shows more)", highlight=False)

    run_command(main)


def _arguments(count: int) -> str:
    """How many arguments a program got (its argv less the program itself)."""
    return "1 argument" if count == 1 else f"{count} arguments"
