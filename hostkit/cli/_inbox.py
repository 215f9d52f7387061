"""``hostkit inbox counts | list | show | dlq | requeue``: the ChannelInbox as an operator sees it.

Every subcommand opens the Host with an audited operator scope, as
``hostkit sessions`` does (``--reason`` optional on a database the local
user owns). ``requeue`` always needs ``--reason``: it is the reason recorded
in the ``inbox.requeue`` audit row. Rows never show a payload; a failure's
message was redacted and bounded when it was recorded and is cut again here,
with control characters escaped (it may quote what a platform sent).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hostkit.cli._clock import CLOCK_CHARS, shown_clock, shown_time
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
from hostkit.cli._render import READABLE, Column, dead_letter_hint, fit_table
from hostkit.errors import InvalidValue, NotFoundOrUnauthorized
from hostkit.inbox import ChannelInbox
from hostkit.inspect import (
    INBOX_STATES,
    InboxCounts,
    inbox_counts,
    inbox_of,
    inbox_rows,
    one_line,
    printable,
)
from hostkit.store import MAX_INBOX_LIST
from hostkit.types import InboundRecord

__all__ = ["counts_table", "dead_letters_table", "inbox", "record_table", "records_table"]

FAILURE_CHARS = 200
# An inbound id is ``inb_`` and a few dozen characters; anything longer is not one.
_MAX_ID = 80

inbox = typer.Typer(
    help="The channel inbox: counts by state, the rows, and requeueing a dead letter "
    "(operator authority; audited).",
    no_args_is_help=True,
)


def counts_table(counts: InboxCounts, *, width: int) -> Table:
    """One row per channel instance, then the totals; the channel id is never cut."""
    columns = (
        Column("channel", whole=True),
        Column("ready", cap=8),
        Column("claimed", cap=8),
        Column("completed", cap=10),
        Column("unanswered", cap=10),
        Column("dead-lettered", cap=14),
    )
    rows = [
        (
            c.channel_instance_id,
            str(c.ready),
            str(c.claimed),
            str(c.completed),
            str(c.unanswered),
            str(c.dead_lettered),
        )
        for c in (*counts.channels, counts.totals)
    ]
    return fit_table(columns, rows, width)


def records_table(records: Sequence[InboundRecord], *, width: int) -> Table:
    """One row per inbound, newest first; the inbound id is never cut.

    On a narrow terminal the event key, due time, requeues, attempts and then
    the channel are left out, in that order, before the failure is squeezed
    below a readable width (``--json`` has them all): at 80 columns an id and
    a state leave room for a failure or a channel, not both. A completed
    message shows no failure: one it has is an earlier attempt's.
    """
    columns = (
        Column("inbound", whole=True),
        Column("channel", cap=24, drop=5),
        Column("state", cap=13),
        Column("attempts", cap=8, drop=4),
        Column("requeues", cap=8, drop=3),
        Column("due", cap=CLOCK_CHARS, drop=2),
        Column("event", cap=24, drop=1),
        Column("failure", flexible=True, wrap=True, drop=6, least=READABLE),
    )
    rows = [
        (
            r.inbound_id,
            r.channel_instance_id,
            r.state,
            str(r.attempt),
            str(r.requeues),
            _clock(r.due_at),
            one_line(r.platform_event_key, 200),
            # A completed message's failure is an earlier attempt's (before a requeue or
            # a retry): history `inbox show` keeps, not what is wrong with it now.
            "" if r.state == "completed" else failure_text(r),
        )
        for r in records
    ]
    return fit_table(columns, rows, width)


def dead_letters_table(records: Sequence[InboundRecord], *, width: int) -> Table:
    """The dead letters: what failed and how often it was tried; the inbound id is never cut.

    On a narrow terminal the event key, the requeues, the attempts and then
    the channel are left out, in that order, before the failure is squeezed
    below a readable width.
    """
    columns = (
        Column("inbound", whole=True),
        Column("channel", cap=24, drop=4),
        Column("attempts", cap=8, drop=3),
        Column("requeues", cap=8, drop=2),
        Column("event", cap=24, drop=1),
        Column("failure", flexible=True, wrap=True, drop=5, least=READABLE),
    )
    rows = [
        (
            r.inbound_id,
            r.channel_instance_id,
            str(r.attempt),
            str(r.requeues),
            one_line(r.platform_event_key, 200),
            failure_text(r),
        )
        for r in records
    ]
    return fit_table(columns, rows, width)


def record_table(record: InboundRecord) -> Table:
    """One inbound, field by field: its states, attempts, times, turn and last failure.

    The payload itself is never shown (only whether retention removed it):
    operator views carry ids, states and failures, not what a user wrote.
    """
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    payload = (
        "pruned by retention"
        if record.payload_pruned
        else "none (the channel accepted the event without its text)"
        if record.unprocessable
        else "kept (never shown here)"
    )
    fields = (
        ("inbound", record.inbound_id),
        ("channel", record.channel_instance_id),
        ("kind", one_line(record.kind, 40)),
        ("state", record.state),
        ("attempt", str(record.attempt)),
        ("requeues", str(record.requeues)),
        ("event", one_line(record.platform_event_key, 200)),
        ("conversation", one_line(record.conversation_key, 200)),
        ("received", _when(record.received_at)),
        ("accepted", _when(record.accepted_at)),
        ("updated", _when(record.updated_at)),
        ("due", _when(record.due_at)),
        ("result", record.result_kind or ""),
        ("turn", record.turn_id or ""),
        ("failure", failure_text(record)),
        ("payload", payload),
    )
    for name, value in fields:
        # Text, not markup, and escaped: keys and failures come from a platform.
        table.add_row(name, Text(printable(value or "-")))
    return table


def failure_text(record: InboundRecord) -> str:
    """``code: message`` of the last failure, one bounded line ("" when none)."""
    if not record.failure_code:
        return ""
    text = record.failure_code
    if record.failure_message:
        text += ": " + record.failure_message
    return one_line(text, FAILURE_CHARS)


def _clock(at: float | None) -> str:
    return shown_clock(at)


def _when(at: float | None) -> str:
    return shown_time(at, seconds=True)


@inbox.command("counts")
def counts(
    reason: Reason = None,
    json_: JsonOption = False,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """How many inbounds each channel instance has in each state, and the totals."""

    async def main() -> None:
        async with operator_host(config, operator, reason, reads_only=True) as (host, _):
            found = await inbox_counts(inbox_of(host))
            if json_:
                print_json({"channels": found.channels, "totals": found.totals})
                return
            if not found.channels:
                console.print("the inbox is empty", highlight=False)
                return
            out = Console()
            out.print(counts_table(found, width=out.width))

    run_command(main)


@inbox.command("list")
def list_inbounds(
    state: Annotated[
        str | None, typer.Option(help=f"only this state: {', '.join(INBOX_STATES)}")
    ] = None,
    channel: Annotated[str | None, typer.Option(help="only this channel instance")] = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_INBOX_LIST - 1)] = 50,
    reason: Reason = None,
    json_: JsonOption = False,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """Inbounds newest first: state, attempt, requeues, next due time, last failure.

    Never the payload.
    """

    async def main() -> None:
        async with operator_host(config, operator, reason, reads_only=True) as (host, _):
            rows = await inbox_rows(
                inbox_of(host), state=state, channel_instance_id=channel, limit=limit
            )
            if json_:
                print_json({"inbounds": rows.records, "truncated": rows.truncated})
                return
            if not rows.records:
                console.print("no inbounds" + _filters(state, channel), highlight=False)
                return
            out = Console()
            out.print(records_table(rows.records, width=out.width))
            if rows.truncated:
                console.print(f"(the {limit} newest; --limit shows more)", highlight=False)
            dead = [r.inbound_id for r in rows.records if _requeueable(r)]
            if dead:
                _requeue_hint(dead, config)

    run_command(main)


@inbox.command("show")
def show(
    inbound_id: Annotated[str, typer.Argument(help="the inbound (inb_...)")],
    reason: Reason = None,
    json_: JsonOption = False,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """One inbound: state, attempts, due time, turn, last failure (never the payload)."""
    _check_id(inbound_id)

    async def main() -> None:
        async with operator_host(config, operator, reason, reads_only=True) as (host, _):
            record = await inbox_of(host).record(inbound_id)
            if record is None:
                raise NotFoundOrUnauthorized("inbound")
            if json_:
                print_json(record)
                return
            Console().print(record_table(record))
            if _requeueable(record):
                _requeue_hint([record.inbound_id], config)

    run_command(main)


@inbox.command("dlq")
def dead_letters(
    channel: Annotated[str | None, typer.Option(help="only this channel instance")] = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_INBOX_LIST - 1)] = 50,
    reason: Reason = None,
    json_: JsonOption = False,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """The dead letters, newest first: attempts, requeues and the failure that ended them."""

    async def main() -> None:
        async with operator_host(config, operator, reason, reads_only=True) as (host, _):
            rows = await inbox_rows(
                inbox_of(host), state="dead_lettered", channel_instance_id=channel, limit=limit
            )
            if json_:
                print_json({"inbounds": rows.records, "truncated": rows.truncated})
                return
            if not rows.records:
                console.print("no dead letters" + _filters(None, channel), highlight=False)
                return
            out = Console()
            out.print(dead_letters_table(rows.records, width=out.width))
            if rows.truncated:
                console.print(f"(the {limit} newest; --limit shows more)", highlight=False)
            requeueable = [r.inbound_id for r in rows.records if _requeueable(r)]
            if requeueable:
                _requeue_hint(requeueable, config)

    run_command(main)


@inbox.command("requeue")
def requeue(
    inbound_id: Annotated[str, typer.Argument(help="the dead-lettered inbound (inb_...)")],
    reason: Annotated[
        str | None,
        typer.Option(help="why it is sent round again (required; recorded in the audit)"),
    ] = None,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """Send a dead letter round again: ready now, attempts from zero; the reason is audited.

    One accepted without its text is refused (it would dead-letter again at once).
    """
    _check_id(inbound_id)
    reason = required_reason(reason, "say why this dead letter is sent round again")

    async def main() -> None:
        async with operator_host(config, operator, reason) as (host, scope):
            channel_inbox = inbox_of(host)
            await _check_dead_letter(channel_inbox, inbound_id)
            record = await channel_inbox.requeue(scope, inbound_id, reason=reason)
            console.print(
                f"requeued {escape(record.inbound_id)}: {record.state}, attempt {record.attempt},"
                f" requeued {record.requeues} time{'' if record.requeues == 1 else 's'}",
                highlight=False,
            )

    run_command(main)


def _check_id(inbound_id: str) -> None:
    """An id no inbound can have is refused before anything opens (and never echoed)."""
    if not inbound_id or len(inbound_id) > _MAX_ID:
        raise fail(InvalidValue(f"an inbound id has 1 to {_MAX_ID} characters"))


def _requeueable(record: InboundRecord) -> bool:
    """A dead letter a requeue can help: not one that would dead-letter again at once."""
    return record.state == "dead_lettered" and not record.unprocessable


def _requeue_hint(dead: Sequence[str], config: Path | None) -> None:
    line = dead_letter_hint(("inbox", "requeue"), dead, "INBOUND_ID", config)
    console.print(line, highlight=False, markup=False, soft_wrap=True)


async def _check_dead_letter(channel_inbox: ChannelInbox, inbound_id: str) -> None:
    """A clear error before the (atomic, re-checked) requeue: unknown, or not a dead letter."""
    found = await channel_inbox.record(inbound_id)
    if found is None:
        raise NotFoundOrUnauthorized("inbound")
    if found.state != "dead_lettered":
        raise InvalidValue(
            f"inbound {found.inbound_id} is {found.state}, not dead_lettered: "
            "only a dead letter can be requeued"
        )


def _filters(state: str | None, channel: str | None) -> str:
    said = [f"in state {state}" if state else "", f"of channel {channel}" if channel else ""]
    text = " ".join(part for part in said if part)
    return f" {escape(one_line(text, 200))}" if text else ""
