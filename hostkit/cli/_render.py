"""Terminal rendering of turns and lists (Rich), shared by every command."""

from __future__ import annotations

import shlex
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hostkit.cli._clock import TIME_CHARS, shown_time
from hostkit.effects import PendingApproval
from hostkit.inspect import HIDDEN_NOTE, one_line, one_line_hides, printable, printable_text
from hostkit.store import INTERRUPTED, SessionActivity, approval_facts
from hostkit.types import PARTIAL_KEY, EffectSummary, TurnResult

__all__ = [
    "READABLE",
    "Column",
    "approval_hints",
    "approval_note",
    "approvals_table",
    "command_line",
    "dead_letter_hint",
    "fit_table",
    "print_pending",
    "print_result",
    "resume_hints",
    "sessions_note",
    "sessions_table",
    "short_time",
]

# The arguments column of ``hostkit approvals list``: enough to recognise the call.
ARGUMENTS_CHARS = 80
# The width it keeps before an optional column is shown at its cost.
ARGUMENTS_LEAST = 30
# What begins the arguments of a call the table does not show whole (``approval_hints``).
HIDDEN_MARK = "! "
# What a printed command puts where the reader writes their own reason.
REASON_PLACEHOLDER = "..."


def command_line(
    *words: str,
    reason: str | None = None,
    config: Path | None = None,
    agent: str | None = None,
) -> str:
    """``hostkit WORDS [--reason "REASON"] [-c CONFIG] [--agent AGENT]``, to copy and paste.

    Every word, path and id is shell-quoted (a config in ``my project/`` or an
    id with a quote pastes as the same arguments). ``reason`` is a fixed text
    of ours (a placeholder such as ``...``), shown in double quotes as the
    reader would type their own.
    """
    argv = ["hostkit", *words]
    line = shlex.join(argv)
    if reason is not None:
        if any(ch in reason for ch in '"\\$`!'):
            raise ValueError(f"a reason shown in a hint is plain text: {reason!r}")
        line += f' --reason "{reason}"'
    if config is not None:
        line += " " + shlex.join(["-c", str(config)])
    if agent is not None:
        line += " " + shlex.join(["--agent", agent])
    return line


def dead_letter_hint(
    words: tuple[str, str], dead: Sequence[str], placeholder: str, config: Path | None
) -> str:
    """What to type for the dead letters listed: the command of the one shown, pasted as
    printed; with several, the command with ``placeholder`` for one from the table."""
    one = len(dead) == 1
    which = dead[0] if one else placeholder
    command = command_line(*words, which, reason=REASON_PLACEHOLDER, config=config)
    verb = words[1]
    return f"{verb} it: {command}" if one else f"{verb} a dead letter: {command}"


def print_result(console: Console, result: TurnResult, *, database: str) -> None:
    """Outcome, effects, usage and where the state lives, after a streamed answer.

    A turn paused for an approval is not an error: its last line says which
    approval it waits for (``print_pending`` then says how to answer it).
    """
    style = "green" if result.outcome == "completed" else "yellow"
    console.print(f"[bold {style}]outcome[/]: {result.outcome}", highlight=False)
    waiting = result.pending_approval if result.outcome == "needs_user" else None
    error = result.error
    if waiting is not None and error:
        # The stored error says it waits for the approval; only what it adds is news
        # (the Host stopped while it was asked).
        error = error.removeprefix(f"waiting for approval {waiting}").strip(" ()")
    if error:
        label = "note" if waiting is not None else "error"
        console.print(f"[bold]{label}[/]: {escape(printable_text(error))}", highlight=False)
    if result.truncated:
        console.print("[bold yellow]truncated[/]: the answer hit the output limit", highlight=False)
    for effect in result.effects:
        console.print(f"  {_effect_line(effect)}", highlight=False, markup=False)
    usage = result.usage
    console.print(
        f"[bold]usage[/]: input {usage.input_tokens} tokens, output {usage.output_tokens} tokens"
        f" (cache read {usage.cache_read_tokens}, cache write {usage.cache_write_tokens})",
        highlight=False,
    )
    # Unwrapped: ids and the path are copied into the next command, so none is split.
    console.print(
        f"[bold]session[/]: {escape(result.session_id)}  [bold]turn[/]: {escape(result.turn_id)}",
        highlight=False,
        soft_wrap=True,
    )
    console.print(f"[bold]database[/]: {escape(database)}", highlight=False, soft_wrap=True)
    if waiting is not None:
        console.print(
            f"[bold yellow]waiting for approval[/]: {escape(waiting)}",
            highlight=False,
            soft_wrap=True,
        )


def print_pending(
    console: Console, approval_id: str, *, config: Path | None = None, agent: str | None = None
) -> None:
    """The two commands that answer a paused turn's approval, each unwrapped to be copied.

    Printed under ``print_result``'s ``waiting for approval`` line. ``agent``
    is the ``module:attribute`` of a Python agent: its continuation needs it.
    """
    for verb in ("approve", "deny"):
        command = command_line(
            "approvals",
            verb,
            approval_id,
            reason=REASON_PLACEHOLDER,
            config=config,
            agent=agent,
        )
        console.print(f"  {verb:<8} {command}", highlight=False, markup=False, soft_wrap=True)


@dataclass(frozen=True, slots=True)
class Column:
    """A table column for ``fit_table``: ids are ``whole`` (never cut, never wrapped).

    ``cap`` bounds a column's width (cells beyond it end in an ellipsis);
    ``flexible`` takes what the others leave, and ``wrap`` lets its long cells
    run over several lines instead of being cut; ``drop`` orders the columns
    left out first when even that does not fit (1 first; 0 never);
    ``justify="right"`` lines numbers up. A flexible column narrower than
    ``least`` is not worth showing: the optional columns make room first
    (an error of ``code: message`` wrapped at ten characters is unreadable);
    with ``least_upto``, only those whose ``drop`` is at most that (the rest are
    worth more than its width beyond ten characters).
    """

    header: str
    whole: bool = False
    cap: int | None = None
    flexible: bool = False
    wrap: bool = False
    drop: int = 0
    justify: Literal["left", "right"] = "left"
    least: int = 10
    least_upto: int | None = None


# The width of a column whose words an operator reads (an error, a failure).
READABLE = 20
# Narrower than this a flexible column is not worth showing: it is left out instead.
_SHOWN = 10
# Between two columns: padding, the (blank) divider, padding.
_GAP = 3


def fit_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> Table:
    """Rows as a table at most ``width`` columns wide whose ``whole`` cells are never cut.

    An id is what a reader copies into the next command, so it stays on one
    line even at 80 columns: the flexible column gives up its width first,
    then the optional columns are left out, least useful first. A flexible
    column that keeps a width against some of them (``least_upto``: the
    arguments an approver reads) never shrinks as ``width`` grows: it takes the
    spare room only once no optional column is left out for it; any other gives
    the room it does not need to the columns that fit.
    """
    natural = [
        min(
            max([len(c.header), *(len(row[i]) for row in rows)]),
            c.cap if c.cap is not None and not c.whole else 10**6,
        )
        for i, c in enumerate(columns)
    ]
    # An optional column with nothing in it (no approval has a note) gives its room away.
    shown = [
        i
        for i, column in enumerate(columns)
        if not (column.drop and rows and all(not row[i] for row in rows))
    ]

    def fixed_width() -> int:
        fixed = sum(natural[i] for i in shown if not columns[i].flexible)
        return fixed + _GAP * (len(shown) - 1)

    def flexible_room() -> int:
        return width - fixed_width()

    def wanted(flexible: Column, drop: int) -> int:
        """What ``flexible`` keeps before the optional column ``drop`` is left out for it."""
        if flexible.least_upto is None or drop <= flexible.least_upto:
            return flexible.least
        return min(flexible.least, _SHOWN)

    droppable = sorted((c.drop, i) for i, c in enumerate(columns) if c.drop and i in shown)
    # The drop number of the last column left out for room (0: none was).
    last_dropped = 0
    while droppable:
        room = flexible_room()
        upto = droppable[0][0]
        cramped = any(
            columns[i].flexible and room < min(wanted(columns[i], upto), natural[i]) for i in shown
        )
        if fixed_width() <= width and not cramped:
            break
        # A flexible column is itself left out only when it is not worth showing at all.
        if columns[droppable[0][1]].flexible and fixed_width() <= width and room >= _SHOWN:
            break
        last_dropped, index = droppable.pop(0)
        shown.remove(index)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for i in shown:
        column = columns[i]
        size = natural[i]
        if column.flexible:
            size = max(min(_SHOWN, size), min(size, flexible_room()))
            if last_dropped and column.least_upto is not None:
                # Held at what it kept before the last column left out for it: that column,
                # let back in a little wider, would take more than the room that was spare,
                # and a wider terminal would then show less of it.
                size = min(size, max(wanted(column, last_dropped), min(_SHOWN, natural[i])))
        if column.wrap:
            table.add_column(column.header, width=size, overflow="fold", justify=column.justify)
        else:
            table.add_column(
                column.header,
                width=size,
                no_wrap=True,
                overflow="ellipsis",
                justify=column.justify,
            )
    for row in rows:
        # Text, not markup, and escaped: ids, titles and arguments come from the database or
        # a model, and Rich writes a cell's ESC and OSC to the terminal as they are.
        table.add_row(*(Text(printable(row[i])) for i in shown))
    return table


def short_time(stamp: str | None) -> str:
    """``2026-12-01T13:48:03.120Z`` as ``2026-12-01 13:48Z`` (``shown_time``: UTC, marked)."""
    return shown_time(stamp or None)


def sessions_table(sessions: Sequence[SessionActivity], *, width: int) -> Table:
    """One row per session, most recent activity first; the id is never cut."""
    columns = (
        Column("session", whole=True),
        Column("agent", cap=16, drop=5),
        Column("last activity", cap=TIME_CHARS),
        Column("turns", cap=6, drop=3),
        Column("outcome", cap=13, drop=4),
        Column("owner", cap=12, drop=1),
        Column("title", flexible=True, drop=2),
    )
    rows = [
        (
            row.session.session_id,
            row.agent or "",
            short_time(row.last_activity),
            str(row.turns),
            row.last_outcome or "",
            row.session.owner_kind,
            row.session.title or "",
        )
        for row in sessions
    ]
    return fit_table(columns, rows, width)


def sessions_note(sessions: Sequence[SessionActivity]) -> str | None:
    """What an ``interrupted`` outcome means, for a listing that shows one (else None).

    A view writes nothing, so it leaves the turn's end to recovery: it only says the
    turn no longer runs, and where its end will be recorded.
    """
    if not any(row.last_outcome == INTERRUPTED for row in sessions):
        return None
    return (
        f"{INTERRUPTED}: still recorded running, but its holder is gone (its process died, "
        "or its lease lapsed a lease's length ago); a Host that next opens ends it"
    )


def approvals_table(approvals: Sequence[PendingApproval], *, width: int) -> Table:
    """One row per approval; the arguments are the stored redacted view, cut short.

    Arguments not all shown (cut, or masked as secret-looking text) begin
    with ``HIDDEN_MARK``: a model can shape a call so the part that runs is
    the part left out. Arguments the column is too narrow for end in Rich's
    ``…`` (at 80 columns ``{"content": "milk\\n", "path":…``), as those cut at
    ``ARGUMENTS_CHARS`` do, and a JSON object shown whole ends in ``}``. The
    note says what to do next (an answered approval whose continuation never
    ran: resume it) or why a void one will never run; what the view says
    beside the arguments, and the full resume command, are printed under the
    table (``approval_hints``, ``resume_hints``), where no width cuts them.
    """
    columns = (
        Column("approval", whole=True),
        Column("created", cap=TIME_CHARS, drop=2),
        Column("agent", cap=12, drop=1),
        Column("effect", cap=20),
        Column("status", cap=13),  # "indeterminate", the longest, whole
        # Enough of the call to recognise it before created and agent are kept at its cost.
        # (A void approval's note still outranks that width.)
        Column("arguments", flexible=True, drop=4, least=ARGUMENTS_LEAST, least_upto=2),
        # Why it will never run is a sentence: wrapped, never cut mid-way.
        Column("note", cap=40, wrap=True, drop=3),
    )
    rows = [
        (
            approval.approval_id,
            short_time(approval.created_at),
            approval.core_id,
            approval.effect,
            approval.status,
            (HIDDEN_MARK if _hides_call(approval) else "")
            + one_line(approval.view.get("arguments", {}), ARGUMENTS_CHARS),
            approval_note(approval),
        )
        for approval in approvals
    ]
    return fit_table(columns, rows, width)


def _hides_call(approval: PendingApproval) -> bool:
    """Whether the table and its lines leave part of the call out: the stored view says it
    is partial, the cell cuts or masks it, or its target or file diff is not shown whole."""
    view = approval.view
    arguments = view.get("arguments", {})
    return (
        bool(view.get(PARTIAL_KEY))
        or one_line_hides(arguments, ARGUMENTS_CHARS)
        or approval_facts(view).hides
    )


def approval_hints(approvals: Sequence[PendingApproval]) -> list[str]:
    """Under the table, one line per approval with something to say beside its arguments.

    ``! apr_…: HIDDEN_NOTE`` for a call not shown whole (the mark in the table
    could be cut off with its column at a narrow width), then the view's facts
    as a channel's prompt says them (``approval_facts``: the tool's warning,
    the secrets it binds, its target, that it replaces a file). They are not
    a table column: one would cost the arguments their width and still be
    left out at 80 columns.
    """
    hints = []
    for approval in approvals:
        hides = _hides_call(approval)
        said = [HIDDEN_NOTE] if hides else []
        said += [f"{name}: {value}" for name, value in approval_facts(approval.view).facts]
        if said:
            mark = HIDDEN_MARK if hides else ""
            hints.append(f"{mark}{approval.approval_id}: " + "; ".join(said))
    return hints


def approval_note(approval: PendingApproval) -> str:
    """The next step for an approval, or the reason it is void ("" when there is none)."""
    if approval.awaiting_continuation:
        return f"answered ({approval.decision}), not run yet: resume it"
    if approval.void_reason:
        return one_line(approval.void_reason, ARGUMENTS_CHARS * 2)
    return ""


def resume_hints(
    approvals: Sequence[PendingApproval],
    *,
    config: Path | None = None,
    agents: Collection[str] | None = None,
) -> list[str]:
    """The command that finishes each answered approval whose call has not run yet.

    An approval of an agent that is not among ``agents`` (the configured ones)
    was asked by a Python agent: its continuation runs only with that agent's
    ``--agent``, whose module path the store does not keep, so the line says to
    add it (after a ``#``: the line still pastes as a command).
    """
    hints = []
    for approval in approvals:
        if not approval.awaiting_continuation:
            continue
        hint = command_line("approvals", "resume", approval.approval_id, config=config)
        if agents is not None and approval.core_id not in agents:
            hint += (
                f"  # add --agent MODULE:ATTRIBUTE of the Agent named {approval.core_id!r}"
                " (defined in Python)"
            )
        hints.append(hint)
    return hints


# The part of an effect's reason shown on its line (the whole is in `hostkit effects`).
_REASON_CHARS = 300


def _effect_line(effect: EffectSummary) -> str:
    """``effect NAME: STATUS``, with why when it did not succeed: the person who wrote the
    tool needs the exception it raised, not only the model that was told it."""
    line = printable(f"effect {effect.effect}: {effect.status}")
    if effect.status == "succeeded":
        return line
    reason = printable(effect.summary.removeprefix(f"[{effect.status}]").strip())
    if not reason:
        return line
    if len(reason) > _REASON_CHARS:
        reason = reason[: _REASON_CHARS - 1] + "…"
    return f"{line}: {reason}"
