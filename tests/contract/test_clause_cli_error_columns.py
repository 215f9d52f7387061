"""CLI clause: an error column stays readable at 80 columns, and shows only what is wrong now.

``hostkit delivery list`` (and the inbox listings, whose channel goes too when a
failure needs its room) give their optional columns up before an error would wrap
every few characters (``connection_ref`` / ``used:``);
a delivered intent shows no error, since the one it keeps is an earlier
attempt's (as a completed inbound shows no failure).
"""

from __future__ import annotations

import dataclasses
import io

from rich.console import Console
from rich.table import Table

from hostkit.cli._delivery import intents_table
from hostkit.cli._inbox import dead_letters_table, records_table
from hostkit.cli._render import READABLE
from hostkit.types import DeliveryIntent, InboundRecord

ERROR = "connection_refused: ConnectError: the platform could not be reached"


def intent(n: int, status: str, error: str | None, *, channel: str = "hooks") -> DeliveryIntent:
    return DeliveryIntent(
        intent_id=f"out_01a2419b0000000000000000000{n}",
        turn_id=f"turn_01a2419b000000000000000000{n}",
        session_id="ses_1",
        route={"channel": channel},
        payload={"text": "the answer"},
        status=status,  # type: ignore[arg-type]
        attempts=4,
        next_attempt_at=None,
        last_error=error,
    )


def shown(*intents: DeliveryIntent, width: int = 80) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(intents_table(intents, width=width))
    return out.getvalue()


def test_the_error_is_readable_at_80_columns_and_ids_stay_whole() -> None:
    text = shown(intent(1, "pending", ERROR))
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "out_01a2419b00000000000000000001" in text
    words = text.split()
    assert "connection_refused:" in words, text  # never folded inside a word
    assert "ConnectError:" in words


def test_a_delivered_intent_shows_no_error_of_an_earlier_attempt() -> None:
    text = shown(intent(1, "delivered", ERROR), intent(2, "pending", "http_503: busy"))
    assert "connection_refused" not in text
    assert "http_503: busy" in text


def test_no_table_cell_writes_a_control_character_to_the_terminal() -> None:
    """Rich writes a cell's ESC and OSC as they are: every cell of ``fit_table`` is escaped
    (a session title an embedder set, an agent name, an error text)."""
    from hostkit.cli._render import Column, fit_table

    hostile = "title \x1b]0;pwned\x07 \x1b[2J \u202e end"
    table = fit_table(
        [Column("id", whole=True), Column("title", flexible=True)], [("s1", hostile)], 80
    )
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(table)
    text = out.getvalue()
    assert "\x1b" not in text
    assert "\u202e" not in text
    assert "\\x1b]0;pwned" in text


def test_an_optional_column_nobody_filled_gives_its_room_to_the_arguments() -> None:
    """`hostkit approvals list` at 80 columns: no approval has a note, so the arguments a
    person decides on get that room instead of an empty column."""
    from hostkit.cli._render import Column, fit_table

    columns = (
        Column("approval", whole=True),
        Column("arguments", flexible=True, drop=4),
        Column("note", cap=40, drop=3),
    )
    arguments = '{"name": "old.log", "reason": "rotated"}'
    out = io.StringIO()
    table = fit_table(columns, [("apr_01a242f015f3889ceedfe6ab37b4", arguments, "")], 80)
    Console(file=out, width=80, color_system=None).print(table)
    text = out.getvalue()
    assert "note" not in text
    assert arguments in text
    noted = io.StringIO()
    table = fit_table(columns, [("apr_1", "{}", "resume it")], 80)
    Console(file=noted, width=80, color_system=None).print(table)
    assert "note" in noted.getvalue()


def assert_readable_at_80(table: Table, header: str, *, whole: str, word: str) -> None:
    """Drawn at 80 columns: no line wider, the id ``whole`` never cut, the column ``header``
    at least ``READABLE`` wide, and ``word`` never folded inside itself."""
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(table)
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert whole in text
    (column,) = [column for column in table.columns if column.header == header]
    assert column.width is not None
    assert column.width >= READABLE, text
    assert word in text.split(), text


def dead_inbound(channel: str) -> InboundRecord:
    return InboundRecord(
        inbound_id="inb_01a24366d45f3e9feead04625e2e",
        channel_instance_id=channel,
        platform_event_key="update-1002",
        kind="message",
        conversation_key="chat-42",
        state="dead_lettered",
        attempt=1,
        received_at=1_800_000_000.0,
        accepted_at=1_800_000_000.0,
        updated_at=1_800_000_000.0,
        failure_code="turn_rejected",
        failure_message="turn rejected: no agent named 'support' (agents here: notes)",
    )


def test_an_inbox_failure_keeps_a_readable_width_at_80_columns_beside_a_long_channel() -> None:
    """`hostkit inbox list` and `dlq` at COLUMNS=80: the optional columns, then the
    channel, make room before the failure would wrap every ten characters."""
    records = [dead_inbound("telegram.support")]
    for table in (records_table(records, width=80), dead_letters_table(records, width=80)):
        assert_readable_at_80(
            table, "failure", whole="inb_01a24366d45f3e9feead04625e2e", word="turn_rejected:"
        )


def test_the_dead_letters_keep_a_short_channel_at_80_columns() -> None:
    """The channel is given up only when the failure needs its room."""
    table = dead_letters_table([dead_inbound("demo.chat")], width=80)
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(table)
    assert "demo.chat" in out.getvalue()
    assert [column.header for column in table.columns][:2] == ["inbound", "channel"]


def test_a_delivery_error_keeps_a_readable_width_at_80_columns_beside_a_long_channel() -> None:
    """`hostkit delivery list` at COLUMNS=80: the optional columns, then the channel,
    make room before the last error would wrap every few characters."""
    table = intents_table([intent(1, "dead_lettered", ERROR, channel="telegram.support")], width=80)
    assert_readable_at_80(
        table, "last error", whole="out_01a2419b00000000000000000001", word="connection_refused:"
    )


def test_a_delivery_list_keeps_a_short_channel_at_80_columns() -> None:
    """The channel is given up only when the error needs its room."""
    table = intents_table([intent(1, "pending", ERROR)], width=80)
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(table)
    assert "hooks" in out.getvalue()
    assert "channel" in [column.header for column in table.columns]


def test_an_approvals_status_and_the_reason_it_never_runs_are_shown_whole() -> None:
    """`hostkit approvals list`: "indeterminate" is the longest status, and the note saying
    why an approval will never run is a sentence a person reads to its end."""
    from hostkit.cli._render import approvals_table
    from hostkit.store import PendingApproval

    reason = (
        "the Host claimed the call and stopped before its result was recorded; "
        "it will not run again"
    )
    approval = PendingApproval(
        approval_id="apr_01a247d00af2c0ffee0000000001",
        session_id="ses_1",
        turn_id="turn_1",
        principal_id="cli:local-user",
        core_id="slowj",
        core_revision="r",
        effect="slow_delete",
        call_id="call_1",
        view={"arguments": {"name": "x"}},
        policy_fingerprint="apf_1",
        rule_key="slow_delete",
        status="indeterminate",
        decision="approve_once",
        decided_by="cli",
        continuation_turn_id="turn_2",
        created_at="2026-01-01T00:00:00Z",
        decided_at="2026-01-01T00:01:00Z",
        void_reason=reason,
    )
    for width in (120, 200):
        out = io.StringIO()
        console = Console(file=out, width=width, color_system=None)
        console.print(approvals_table([approval], width=width))
        text = out.getvalue()
        assert "indeterminate" in text.split(), text
        assert " ".join(text.split()).count("recorded; it will not run again") == 1, text


def test_a_wider_terminal_never_shows_less_of_an_approvals_arguments() -> None:
    """`hostkit approvals list` showed `{"content": "buy mil…` at 80 columns and
    `{"content"…` at 90: created and agent came back at the arguments' cost. The
    arguments keep a readable width before those are shown, and never shrink as the
    terminal widens."""
    from hostkit.cli._render import ARGUMENTS_LEAST, approvals_table
    from hostkit.store import PendingApproval

    approval = PendingApproval(
        approval_id="apr_01a247d00af2c0ffee0000000001",
        session_id="ses_1",
        turn_id="turn_1",
        principal_id="cli:local-user",
        core_id="janitor",
        core_revision="r",
        effect="files.write",
        call_id="call_1",
        view={"arguments": {"content": "buy milk, eggs, bread and butter", "path": "a.md"}},
        policy_fingerprint="apf_1",
        rule_key="files.write",
        status="pending",
        decision=None,
        decided_by=None,
        continuation_turn_id=None,
        created_at="2026-01-01T00:00:00Z",
        decided_at=None,
    )
    void = dataclasses.replace(
        approval, status="stale", void_reason="the agent's policy changed since it was asked"
    )
    for approvals in ([approval], [approval, void]):
        shown_before = 0
        for width in range(80, 141):
            table = approvals_table(approvals, width=width)
            headers = [column.header for column in table.columns]
            arguments = table.columns[headers.index("arguments")].width
            assert arguments is not None
            assert arguments >= shown_before, (width, arguments, shown_before)
            shown_before = arguments
            if "created" in headers or "agent" in headers:
                assert arguments >= ARGUMENTS_LEAST, (width, headers)
        wide = [column.header for column in approvals_table(approvals, width=200).columns]
        assert {"agent", "created"} <= set(wide)  # back once there is room
