"""Clause: `hostkit inbox show|dlq` and `hostkit delivery list|retry`, as a script runs them.

The rows are real: three routed turns run through a Host with a scripted
model, so each commits a delivery intent with its terminal record; the
DeliveryStore then records one delivered, one dead-lettered at once (a
permanent failure quoting a secret and a control character) and one waiting
for its retry. The inbox gets a completed inbound naming the first turn and
a dead letter, through ``ChannelInbox.on_store``. The CLI runs on the same
database as a subprocess where the terminal output is the point, and as the
same typer app in-process (``CliRunner``, one interpreter start-up less per
call) for the rest.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from rich.console import Console
from typer.testing import CliRunner

from hostkit.authority import AuthorityResolver
from hostkit.cli import app
from hostkit.cli._delivery import intents_table
from hostkit.cli._inbox import records_table
from hostkit.inbox import ChannelInbox
from hostkit.store import RuntimeStore
from hostkit.testing import Reply, ScriptedModel
from hostkit.types import (
    ClaimedDelivery,
    DeliveryFailure,
    DeliveryIntent,
    InboundEnvelope,
    InboundFailure,
    InboundRecord,
    InboundResult,
)
from tests.cli import run_cli_async
from tests.hosts import open_host, request

pytestmark = pytest.mark.anyio

CONFIG = """
[host]
database = "hostkit.db"

[providers.p]
kind = "scripted"

[agents.assistant]
provider = "p"
"""
SECRET = "sk-live-0123456789abcdef"
REASON = "the channel token was rotated"
NOW = 1_800_000_000.0


async def hostkit(*args: str, cwd: Path, columns: int = 80) -> tuple[int, str, str]:
    """The CLI as a script runs it (no terminal on stdin), ``columns`` wide."""
    result = await run_cli_async(*args, cwd=cwd, env={**os.environ, "COLUMNS": str(columns)})
    return result.returncode, result.stdout.decode(), result.stderr.decode()


def invoke(*args: str, cwd: Path, columns: int = 80) -> tuple[int, str, str]:
    """The same typer app in this process (no interpreter start-up per refused call)."""
    argv = [*args, "--config", str(cwd / "hostkit.toml")]
    result = CliRunner().invoke(app, argv, env={"COLUMNS": str(columns)})
    return result.exit_code, result.stdout, result.stderr


async def run_here(*args: str, cwd: Path, columns: int = 80) -> tuple[int, str, str]:
    """``invoke`` in a worker thread: the command runs its own event loop, as it does alone."""
    return await anyio.to_thread.run_sync(lambda: invoke(*args, cwd=cwd, columns=columns))


@dataclass(frozen=True)
class Project:
    dir: Path
    turn: str  # the turn the completed inbound ran
    completed: str  # an inbound completed by that turn
    dead_inbound: str  # an inbound dead-lettered at once
    delivered: str  # intents by what happened to them
    dead: str
    waiting: str


def envelope(key: str) -> InboundEnvelope:
    return InboundEnvelope(
        channel_instance_id="chat",
        platform_event_key=key,
        conversation_key=f"T1:C1:{key}",  # one conversation each: claimed together
        principal_key="U1",
        authenticated_by="hmac-sha256",
        received_at=NOW,
        payload=f"the private words of {key}",
    )


@pytest.fixture
async def project(tmp_path: Path) -> Project:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    model = ScriptedModel([Reply("answer one"), Reply("answer two"), Reply("answer three")])
    async with open_host(tmp_path, model) as host:
        turns = []
        for n in range(3):
            # Three conversations: one session's intents are claimed one at a time.
            chat = f"c{n + 1}"
            route = {"channel": "chat", "conversation": chat, "reply": {"conversation": chat}}
            result = await host.turns.run(request(f"question {n}", conversation=chat, route=route))
            assert result.outcome == "completed"
            turns.append(result)
        store = host.store
        claims = {c.intent.turn_id: c for c in await _claim(store)}
        assert len(claims) == 3
        one, two, three = (claims[t.turn_id] for t in turns)
        await store.delivery.delivered(one, now=NOW)
        refused = DeliveryFailure(
            "permanent", "channel_not_found", f"slack said no \x1b[31m token={SECRET}"
        )
        await store.delivery.failed(two, refused, retry_at=None, now=NOW)
        busy = DeliveryFailure("transient", "http_503", "the platform answered 503")
        await store.delivery.failed(three, busy, retry_at=NOW + 3600, now=NOW)

        inbox = ChannelInbox.on_store(store)
        completed = (await inbox.accept(envelope("evt-1"))).inbound_id
        dead = (await inbox.accept(envelope("evt-2"))).inbound_id
        held = {c.inbound_id: c for c in await inbox.claim_batch(2)}
        await inbox.complete(held[completed], InboundResult("turn", turns[0].turn_id, "completed"))
        poison = InboundFailure("permanent", "unreadable", "cannot parse the body")
        await inbox.fail(held[dead], poison)
    return Project(
        tmp_path,
        turns[0].turn_id,
        completed,
        dead,
        one.intent.intent_id,
        two.intent.intent_id,
        three.intent.intent_id,
    )


async def _claim(store: RuntimeStore) -> tuple[ClaimedDelivery, ...]:
    return await store.delivery.claim(
        owner="suite", limit=10, lease_s=30.0, max_attempts=3, now=NOW
    )


async def test_inbox_show_prints_one_record_with_its_turn_and_never_its_payload(
    project: Project,
) -> None:
    code, out, err = await hostkit("inbox", "show", project.completed, cwd=project.dir)
    assert code == 0, err
    pairs = (line.split(None, 1) for line in out.splitlines() if line.strip())
    fields = {name: value.strip() for name, value in pairs}
    assert fields["inbound"] == project.completed
    assert fields["channel"] == "chat"
    assert fields["state"] == "completed"
    assert fields["attempt"] == "1"
    assert fields["result"] == "turn"
    assert fields["turn"] == project.turn
    assert fields["event"] == "evt-1"
    assert fields["payload"] == "kept (never shown here)"
    assert "private words" not in out + err

    code, out, err = await run_here(
        "inbox", "show", project.dead_inbound, "--json", cwd=project.dir
    )
    assert code == 0, err
    record = json.loads(out)
    assert (record["state"], record["failure_code"]) == ("dead_lettered", "unreadable")
    assert record["turn_id"] is None
    assert "payload" not in record
    assert "private words" not in out


async def test_inbox_dlq_lists_only_dead_letters_with_their_failure(project: Project) -> None:
    code, out, err = await run_here("inbox", "dlq", cwd=project.dir)
    assert code == 0, err
    assert project.dead_inbound in out
    assert project.completed not in out
    assert "unreadable" in out  # the failure is the last column given up
    assert all(len(line) <= 80 for line in out.splitlines())
    # One dead letter: its own command, pasted as printed (no placeholder to fill in).
    assert f'requeue it: hostkit inbox requeue {project.dead_inbound} --reason "..."' in err
    assert "INBOUND_ID" not in err
    code, out, err = await run_here("inbox", "show", project.dead_inbound, cwd=project.dir)
    assert f"hostkit inbox requeue {project.dead_inbound}" in err
    code, out, err = await run_here("inbox", "dlq", "--channel", "mail", cwd=project.dir)
    assert (code, out) == (0, "")
    assert "no dead letters of channel mail" in err


async def test_delivery_list_shows_each_intent_status_attempts_and_error_never_payload(
    project: Project,
) -> None:
    code, out, err = await run_here("delivery", "list", "--json", cwd=project.dir)
    assert code == 0, err
    listing = json.loads(out)
    # A listing that takes --limit is an object with its rows and truncated, never a list.
    assert set(listing) == {"intents", "truncated"}
    assert listing["truncated"] is False
    rows = {row["intent_id"]: row for row in listing["intents"]}
    assert set(rows) == {project.delivered, project.dead, project.waiting}
    assert rows[project.delivered]["status"] == "delivered"
    # Every time in one --json reads the same way: ISO-8601 UTC, as created_at is stored.
    assert rows[project.delivered]["delivered_at"] == "2027-01-15T08:00:00.000Z"  # NOW
    assert rows[project.delivered]["created_at"].endswith("Z")
    dead = rows[project.dead]
    assert (dead["status"], dead["attempts"], dead["channel"]) == ("dead_lettered", 1, "chat")
    assert dead["last_error"].startswith("channel_not_found: slack said no")
    waiting = rows[project.waiting]
    assert (waiting["status"], waiting["next_attempt_at"]) == (
        "pending",
        "2027-01-15T09:00:00.000Z",
    )
    assert waiting["last_error"] == "http_503: the platform answered 503"
    assert SECRET not in out  # redacted when the failure was recorded
    assert "answer " not in out  # the payload is the user's answer: never shown
    assert rows[project.delivered]["turn_id"] == project.turn

    code, out, err = await run_here(
        "delivery", "list", "--status", "dead_lettered", cwd=project.dir
    )
    assert code == 0, err
    assert all(len(line) <= 80 for line in out.splitlines())
    assert project.dead in out
    assert project.delivered not in out
    assert project.waiting not in out
    assert "\x1b" not in out
    assert SECRET not in out
    assert "channel_not_found" in out
    assert f'retry it: hostkit delivery retry {project.dead} --reason "..."' in err


async def test_delivery_list_json_says_when_older_intents_were_left_out(
    project: Project,
) -> None:
    code, out, err = await run_here("delivery", "list", "--json", "--limit", "2", cwd=project.dir)
    assert code == 0, err
    listing = json.loads(out)
    assert (len(listing["intents"]), listing["truncated"]) == (2, True)


async def test_delivery_retry_sends_a_dead_letter_again_and_audits_the_reason(
    project: Project,
) -> None:
    code, out, err = await hostkit(
        "delivery", "retry", project.dead, "--reason", REASON, "--operator", "ops-ada",
        cwd=project.dir,
    )  # fmt: skip
    assert code == 0, err
    assert out == ""
    assert f"retrying {project.dead}: pending, attempts 0, retried 1 time" in err
    async with RuntimeStore.open(project.dir / "hostkit.db") as store:
        intent = await store.delivery.intent(project.dead)
        assert intent is not None
        assert (intent.status, intent.attempts, intent.requeues) == ("pending", 0, 1)
        async with AuthorityResolver.bind(store) as resolver:
            reader = await resolver.operator_issuer().issue("test", reason="read the audit")
            audits = await store.read_audit(reader, kind="delivery.retry")
    assert len(audits) == 1
    assert audits[0].reason == REASON
    assert audits[0].principal_id == "operator:ops-ada"
    assert project.dead in json.dumps([audits[0].subject, dict(audits[0].detail)])


REFUSED = [
    (("delivery", "retry", "missing", "--reason", REASON), "error: delivery intent not found"),
    (
        ("delivery", "retry", "delivered", "--reason", REASON),
        "is delivered, not dead_lettered: only a dead letter can be retried",
    ),
    (("delivery", "retry", "waiting", "--reason", REASON), "is pending, not dead_lettered"),
    (("delivery", "retry", "dead", "--reason", "   "), "reason"),
    (("delivery", "retry", "dead"), "error: --reason is required: say why this dead letter"),
    (("delivery", "retry", "x" * 300, "--reason", REASON), "an intent id has 1 to 80"),
    (("delivery", "list", "--status", "lost"), "status must be one of pending, sending,"),
    (("inbox", "show", "missing"), "error: inbound not found"),
    (("inbox", "show", "x" * 300), "an inbound id has 1 to 80 characters"),
]


async def test_a_command_that_cannot_be_done_is_one_error_line_and_changes_nothing(
    project: Project,
) -> None:
    ids = {"delivered": project.delivered, "waiting": project.waiting, "dead": project.dead}
    for args, says in REFUSED:
        missing = "inb_" if args[0] == "inbox" else "out_"
        named = ids | {"missing": missing + "000000000000ffffffffffffffff"}
        argv = [named.get(arg, arg) for arg in args]
        code, out, err = await run_here(*argv, cwd=project.dir)
        assert (code, out) == (2, ""), args
        assert err.startswith("error: ")
        assert len(err.strip().splitlines()) == 1
        assert says in err
        assert len(err) < 300
        async with RuntimeStore.open(project.dir / "hostkit.db") as store:
            intents = await store.delivery.intents(limit=10)
            dead = await ChannelInbox.on_store(store).record(project.dead_inbound)
        assert all(i.requeues == 0 for i in intents)
        assert sorted(i.status for i in intents) == ["dead_lettered", "delivered", "pending"]
        assert dead is not None
        assert dead.state == "dead_lettered"


def test_the_delivery_table_says_what_each_intent_answers() -> None:
    """A turn's intent names its turn; a command's reply names the inbound it answers."""
    route = {"channel": "slack-acme"}
    answer = DeliveryIntent("out_a", "turn_1", "ses_1", route, {"text": "hi"}, "pending")
    reply = DeliveryIntent(
        "out_b", None, "ses_1", route, {"text": "No pending"}, "pending", inbound_id="inb_2"
    )
    console = Console(width=200, record=True)
    console.print(intents_table([answer, reply], width=200))
    lines = console.export_text().splitlines()
    assert lines[0].split()[:3] == ["intent", "for", "channel"]
    assert lines[2].split()[:2] == ["out_a", "turn_1"]
    assert lines[3].split()[:2] == ["out_b", "inb_2"]


def test_a_requeued_message_that_completed_lists_no_failure() -> None:
    """Its failure is an earlier attempt's: `inbox list` shows what is wrong now, and a
    dead letter still shows why it ended."""
    common = {
        "channel_instance_id": "hooks",
        "kind": "message",
        "conversation_key": "c",
        "received_at": 1.0,
        "accepted_at": 1.0,
        "updated_at": 2.0,
        "failure_code": "turn_rejected",
        "failure_message": "turn rejected: no agent named 'x'",
        "requeues": 1,
    }
    done = InboundRecord(
        "inb_done", platform_event_key="e1", state="completed", attempt=1, **common
    )
    dead = InboundRecord(
        "inb_dead", platform_event_key="e2", state="dead_lettered", attempt=1, **common
    )
    console = Console(width=200, record=True)
    console.print(records_table([done, dead], width=200))
    lines = console.export_text().splitlines()
    (done_line,) = [line for line in lines if "inb_done" in line]
    (dead_line,) = [line for line in lines if "inb_dead" in line]
    assert "turn_rejected" not in done_line
    assert "turn_rejected: turn rejected" in dead_line
