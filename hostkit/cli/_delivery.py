"""``hostkit delivery list | retry``: the outbox as an operator sees and acts on it.

Every subcommand opens the Host with an audited operator scope, as
``hostkit inbox`` does. ``retry`` always needs ``--reason``: it is recorded
in the ``delivery.retry`` audit row written with the retry. Rows never show
the payload (the answer a user was sent); the last error was redacted and
bounded when it was recorded and is cut again here, control characters
escaped (it may quote what a platform answered).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hostkit.cli._clock import CLOCK_CHARS, shown_clock
from hostkit.cli._common import (
    ConfigOption,
    JsonOption,
    Operator,
    Reason,
    console,
    fail,
    iso_instant,
    operator_host,
    print_json,
    required_reason,
    run_command,
)
from hostkit.cli._render import READABLE, Column, dead_letter_hint, fit_table
from hostkit.errors import HostkitError
from hostkit.inspect import (
    delivery_rows,
    intent_id,
    one_line,
    retry_delivery,
)
from hostkit.store import MAX_DELIVERY_LIST
from hostkit.types import DELIVERY_STATUSES, DeliveryIntent

__all__ = ["delivery", "intents_table"]

ERROR_CHARS = 200

delivery = typer.Typer(
    help="Delivery of answers and approval prompts: the outbox intents, and retrying a "
    "dead letter (operator authority; audited).",
    no_args_is_help=True,
)


def intents_table(intents: Sequence[DeliveryIntent], *, width: int) -> Table:
    """One row per intent, newest first; the intent id is never cut.

    On a narrow terminal the next attempt time, what it is for, the attempts and
    then the channel are left out, in that order, before the last error is
    squeezed below a readable width (``--json`` has them all): at 80 columns an
    id and a status leave room for an error or a long channel, not both. A
    delivered intent shows no error: one it has is an earlier attempt's.
    """
    columns = (
        Column("intent", whole=True),
        Column("for", cap=34, drop=2),
        Column("channel", cap=24, drop=4),
        Column("status", cap=13),
        Column("attempts", cap=8, drop=3),
        Column("next", cap=CLOCK_CHARS, drop=1),
        Column("last error", flexible=True, wrap=True, drop=5, least=READABLE),
    )
    rows = [
        (
            i.intent_id,
            i.turn_id or i.inbound_id or "-",
            one_line(i.channel or "-", 64),
            i.status,
            str(i.attempts),
            _clock(i.next_attempt_at),
            # A delivered intent's error is an earlier attempt's: history, not news.
            "" if i.status == "delivered" else one_line(i.last_error or "", ERROR_CHARS),
        )
        for i in intents
    ]
    return fit_table(columns, rows, width)


def _clock(at: float | None) -> str:
    return shown_clock(at)


@delivery.command("list")
def list_intents(
    status: Annotated[
        str | None, typer.Option(help=f"only this status: {', '.join(DELIVERY_STATUSES)}")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_DELIVERY_LIST - 1)] = 50,
    reason: Reason = None,
    json_: JsonOption = False,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """Intents newest first: turn, channel, status, attempts, next attempt, last error.

    Never the payload.
    """

    async def main() -> None:
        async with operator_host(config, operator, reason, reads_only=True) as (host, _):
            rows = await delivery_rows(host, status=status, limit=limit)
            if json_:
                print_json(
                    {"intents": [_json_row(i) for i in rows.intents], "truncated": rows.truncated}
                )
                return
            if not rows.intents:
                said = f" with status {escape(status)}" if status else ""
                console.print(f"no delivery intents{said}", highlight=False)
                return
            out = Console()
            out.print(intents_table(rows.intents, width=out.width))
            if rows.truncated:
                console.print(f"(the {limit} newest; --limit shows more)", highlight=False)
            dead = [i.intent_id for i in rows.intents if i.status == "dead_lettered"]
            if dead:
                line = dead_letter_hint(("delivery", "retry"), dead, "INTENT_ID", config)
                console.print(line, highlight=False, markup=False, soft_wrap=True)

    run_command(main)


@delivery.command("retry")
def retry(
    intent: Annotated[str, typer.Argument(help="the dead-lettered intent (out_...)")],
    reason: Annotated[
        str | None, typer.Option(help="why it is sent again (required; recorded in the audit)")
    ] = None,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """Send a dead letter again: pending now, attempts from zero; the reason is audited."""
    try:
        intent_id(intent)
    except HostkitError as exc:
        raise fail(exc) from None
    reason = required_reason(reason, "say why this dead letter is sent again")

    async def main() -> None:
        async with operator_host(config, operator, reason) as (host, scope):
            found = await retry_delivery(host, scope, intent, reason=reason)
            console.print(
                f"retrying {escape(found.intent_id)}: {found.status}, attempts {found.attempts},"
                f" retried {found.requeues} time{'' if found.requeues == 1 else 's'}",
                highlight=False,
            )

    run_command(main)


def _json_row(intent: DeliveryIntent) -> dict[str, object]:
    """Every field an operator may see: the payload only as whether it prompts an approval
    and whether retention (or an erased session) removed it."""
    return {
        "intent_id": intent.intent_id,
        "turn_id": intent.turn_id,
        "inbound_id": intent.inbound_id,
        "session_id": intent.session_id,
        "channel": intent.channel,
        "status": intent.status,
        "attempts": intent.attempts,
        "next_attempt_at": iso_instant(intent.next_attempt_at),
        "created_at": intent.created_at,
        "last_error": intent.last_error,
        "delivered_at": iso_instant(intent.delivered_at),
        "requeues": intent.requeues,
        "approval_prompt": intent.approval is not None,
        "payload_pruned": intent.payload_pruned,
    }
