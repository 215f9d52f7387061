"""`hostkit inbox counts | list | requeue` as a subprocess, over a real SQLite inbox.

The rows are made through ``ChannelInbox.on_store`` with a moved clock:
one completed, one waiting for its retry, one dead-lettered after its two
attempts (a transient failure each time), one dead-lettered at once (a
permanent failure whose message quotes a secret and a control character),
and one never claimed, on two channel instances.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.errors import ConfigError
from hostkit.host import Host
from hostkit.inbox import ChannelInbox, RetryPolicy
from hostkit.store import RuntimeStore
from hostkit.types import InboundEnvelope, InboundFailure, InboundResult
from tests.cli import run_cli_async

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
REASON = "the upstream outage is over"


async def hostkit(*args: str, cwd: Path, columns: int = 80) -> tuple[int, str, str]:
    """The CLI as a script runs it (no terminal on stdin), ``columns`` wide."""
    result = await run_cli_async(*args, cwd=cwd, env={**os.environ, "COLUMNS": str(columns)})
    return result.returncode, result.stdout.decode(), result.stderr.decode()


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def envelope(channel: str, key: str) -> InboundEnvelope:
    return InboundEnvelope(
        channel_instance_id=channel,
        platform_event_key=key,
        conversation_key=f"room-{key}",  # one conversation each: claimed together
        principal_key="ada",
        authenticated_by="test",
        received_at=1_800_000_000.0,
        payload=f"payload of {key}",
    )


@pytest.fixture
async def project(tmp_path: Path) -> dict[str, str]:
    """The project directory, and each made row's inbound id by what happened to it."""
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    clock = Clock()
    policy = RetryPolicy(max_attempts=2, base_delay_s=1.0, jitter=0.0, lease_s=30.0)
    ids: dict[str, str] = {"dir": str(tmp_path)}
    async with RuntimeStore.open(tmp_path / "hostkit.db") as store:
        inbox = ChannelInbox.on_store(store, policy=policy, clock=clock)
        for name, channel in (
            ("completed", "demo.chat"),
            ("retrying", "demo.chat"),
            ("exhausted", "demo.chat"),
            ("poison", "demo.mail"),
            ("waiting", "demo.mail"),
        ):
            ids[name] = (await inbox.accept(envelope(channel, f"evt-{name}"))).inbound_id
            clock.now += 1  # newest first is then one order on every adapter
        claimed = {c.inbound_id: c for c in await inbox.claim_batch(5)}
        assert len(claimed) == 5
        await inbox.complete(claimed[ids["completed"]], InboundResult("ignored"))
        busy = InboundFailure("transient", "model_busy", "the model answered 529")
        await inbox.fail(claimed[ids["retrying"]], busy)
        await inbox.fail(claimed[ids["exhausted"]], busy)
        poison = InboundFailure("permanent", "unreadable", f"cannot parse \x1b[31m token={SECRET}")
        await inbox.fail(claimed[ids["poison"]], poison)
        await inbox.release(claimed[ids["waiting"]])
        clock.now += 10  # past the retry time of both transient failures
        again = {c.inbound_id: c for c in await inbox.claim_batch(5)}
        await inbox.fail(again[ids["exhausted"]], busy)  # its second and last attempt
        await inbox.release(again[ids["retrying"]])
        await inbox.release(again[ids["waiting"]])
    return ids


async def listed(ids: dict[str, str], *args: str) -> list[dict[str, object]]:
    code, out, err = await hostkit("inbox", "list", "--json", *args, cwd=Path(ids["dir"]))
    assert code == 0, err
    listing = json.loads(out)
    assert set(listing) == {"inbounds", "truncated"}  # an object, never a bare list
    rows: list[dict[str, object]] = listing["inbounds"]
    return rows


async def test_counts_are_by_state_per_channel_instance_with_totals(
    project: dict[str, str],
) -> None:
    code, out, err = await hostkit("inbox", "counts", "--json", cwd=Path(project["dir"]))
    assert code == 0, err
    counts = json.loads(out)
    assert counts["channels"] == [
        {
            "channel_instance_id": "demo.chat",
            "ready": 1,
            "claimed": 0,
            "completed": 1,
            "dead_lettered": 1,
            "unanswered": 0,
        },
        {
            "channel_instance_id": "demo.mail",
            "ready": 1,
            "claimed": 0,
            "completed": 0,
            "dead_lettered": 1,
            "unanswered": 0,
        },
    ]
    assert counts["totals"] == {
        "channel_instance_id": "all",
        "ready": 2,
        "claimed": 0,
        "completed": 1,
        "dead_lettered": 2,
        "unanswered": 0,
    }
    code, out, err = await hostkit("inbox", "counts", cwd=Path(project["dir"]))
    assert code == 0, err
    lines = [line.split() for line in out.splitlines()]
    assert ["demo.chat", "1", "0", "1", "0", "1"] in lines
    assert ["demo.mail", "1", "0", "0", "0", "1"] in lines
    assert ["all", "2", "0", "1", "0", "2"] in lines


async def test_the_dead_letter_list_shows_failure_attempts_and_requeues_never_payload(
    project: dict[str, str],
) -> None:
    rows = await listed(project, "--state", "dead_lettered")
    by_id = {row["inbound_id"]: row for row in rows}
    assert set(by_id) == {project["exhausted"], project["poison"]}
    exhausted, poison = by_id[project["exhausted"]], by_id[project["poison"]]
    assert (exhausted["failure_code"], exhausted["attempt"], exhausted["requeues"]) == (
        "model_busy",
        2,
        0,
    )
    assert exhausted["failure_message"] == "the model answered 529"
    assert (poison["failure_code"], poison["attempt"]) == ("unreadable", 1)
    assert SECRET not in json.dumps(rows)  # redacted when the failure was recorded
    assert all("payload" not in row for row in rows)
    assert [row["inbound_id"] for row in rows] == [project["poison"], project["exhausted"]]


async def test_list_filters_by_channel_and_state_and_shows_every_row_newest_first(
    project: dict[str, str],
) -> None:
    everything = await listed(project)
    order = ["waiting", "poison", "exhausted", "retrying", "completed"]
    assert [row["inbound_id"] for row in everything] == [project[n] for n in order]
    # Times read as the store's other instants: ISO-8601 UTC, never bare epoch seconds.
    assert {row["received_at"] for row in everything} == {"2027-01-15T08:00:00.000Z"}
    assert all(row["accepted_at"].endswith("Z") for row in everything)
    chat = await listed(project, "--channel", "demo.chat")
    assert {row["channel_instance_id"] for row in chat} == {"demo.chat"}
    assert len(chat) == 3
    ready_mail = await listed(project, "--channel", "demo.mail", "--state", "ready")
    assert [row["inbound_id"] for row in ready_mail] == [project["waiting"]]
    assert await listed(project, "--channel", "nowhere") == []
    limited = await listed(project, "--limit", "2")
    assert [row["inbound_id"] for row in limited] == [project["waiting"], project["poison"]]


async def test_list_and_dlq_json_are_an_object_that_says_whether_rows_were_left_out(
    project: dict[str, str],
) -> None:
    where = Path(project["dir"])
    for command, total in ((("inbox", "list"), 5), (("inbox", "dlq"), 2)):
        code, out, err = await hostkit(*command, "--json", "--limit", "1", cwd=where)
        assert code == 0, err
        page = json.loads(out)
        assert (len(page["inbounds"]), page["truncated"]) == (1, True), command
        code, out, err = await hostkit(*command, "--json", "--limit", str(total), cwd=where)
        assert code == 0, err
        page = json.loads(out)
        assert (len(page["inbounds"]), page["truncated"]) == (total, False), command


async def test_the_table_fits_80_columns_with_ids_whole_and_no_control_characters(
    project: dict[str, str],
) -> None:
    code, out, err = await hostkit("inbox", "list", cwd=Path(project["dir"]), columns=80)
    assert code == 0, err
    assert all(len(line) <= 80 for line in out.splitlines())
    for name in ("waiting", "poison", "exhausted", "retrying", "completed"):
        assert project[name] in out
    assert "\x1b" not in out
    assert SECRET not in out
    assert "unreadable" in out  # the failure is the last column given up
    assert "hostkit inbox requeue INBOUND_ID" in err
    code, out, err = await hostkit("inbox", "list", cwd=Path(project["dir"]), columns=160)
    assert code == 0, err
    header = out.splitlines()[0].split()
    assert header == [
        "inbound",
        "channel",
        "state",
        "attempts",
        "requeues",
        "due",
        "event",
        "failure",
    ]
    row = next(line for line in out.splitlines() if project["exhausted"] in line)
    assert row.split()[:5] == [project["exhausted"], "demo.chat", "dead_lettered", "2", "0"]
    assert "model_busy: the model answered 529" in row


async def test_list_and_dlq_call_the_attempts_column_by_one_name(
    project: dict[str, str],
) -> None:
    headers = []
    for command in (("inbox", "list"), ("inbox", "dlq")):
        code, out, err = await hostkit(*command, cwd=Path(project["dir"]), columns=200)
        assert code == 0, err
        headers.append(out.splitlines()[0].split())
    assert all("attempts" in header and "attempt" not in header for header in headers)


async def test_requeue_sends_a_dead_letter_round_again_and_audits_the_reason(
    project: dict[str, str], tmp_path: Path
) -> None:
    code, _, err = await hostkit(
        "inbox",
        "requeue",
        project["exhausted"],
        "--reason",
        REASON,
        "--operator",
        "ops-ada",
        cwd=tmp_path,
    )
    assert code == 0, err
    assert f"requeued {project['exhausted']}: ready, attempt 0, requeued 1 time" in err
    async with RuntimeStore.open(tmp_path / "hostkit.db") as store:
        record = await ChannelInbox.on_store(store).record(project["exhausted"])
        assert record is not None
        assert (record.state, record.attempt, record.requeues) == ("ready", 0, 1)
        async with AuthorityResolver.bind(store) as resolver:
            reader = await resolver.operator_issuer().issue("test", reason="read the audit")
            audits = await store.read_audit(reader, kind="inbox.requeue")
    assert len(audits) == 1
    assert audits[0].reason == REASON
    assert audits[0].principal_id == "operator:ops-ada"
    assert project["exhausted"] in json.dumps([audits[0].subject, dict(audits[0].detail)])


@pytest.mark.parametrize(
    ("target", "reason", "says"),
    [
        ("missing", REASON, "not found"),
        ("retrying", REASON, "is ready, not dead_lettered"),
        ("completed", REASON, "is completed, not dead_lettered"),
        ("exhausted", "   ", "reason"),
    ],
)
async def test_a_requeue_that_cannot_be_done_is_one_error_line_and_changes_nothing(
    project: dict[str, str], tmp_path: Path, target: str, reason: str, says: str
) -> None:
    inbound_id = project.get(target, "inb_000000000000ffffffffffffffff")
    code, out, err = await hostkit("inbox", "requeue", inbound_id, "--reason", reason, cwd=tmp_path)
    assert code == 2
    assert out == ""
    assert err.startswith("error: ")
    assert len(err.strip().splitlines()) == 1
    assert says in err
    async with RuntimeStore.open(tmp_path / "hostkit.db") as store:
        records = await ChannelInbox.on_store(store).records(limit=10)
    assert all(r.requeues == 0 for r in records)
    assert sum(r.state == "dead_lettered" for r in records) == 2


async def test_requeue_without_a_reason_is_refused_before_anything_opens(
    project: dict[str, str], tmp_path: Path
) -> None:
    code, _, err = await hostkit("inbox", "requeue", project["exhausted"], cwd=tmp_path)
    assert code == 2
    # One line, as every refusal: not click's usage box.
    assert err.strip().splitlines() == [
        "error: --reason is required: say why this dead letter is sent round again"
    ]
    code, _, err = await hostkit("inbox", "requeue", "x" * 500, "--reason", REASON, cwd=tmp_path)
    assert code == 2
    assert "an inbound id has 1 to 80 characters" in err
    assert len(err) < 300


async def test_an_unknown_state_is_one_error_line_naming_the_states(
    project: dict[str, str], tmp_path: Path
) -> None:
    code, out, err = await hostkit("inbox", "list", "--state", "lost", cwd=tmp_path)
    assert (code, out) == (2, "")
    assert "state must be one of ready, claimed, completed, dead_lettered" in err


async def test_an_empty_inbox_says_so(tmp_path: Path) -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    code, out, err = await hostkit("inbox", "counts", cwd=tmp_path)
    assert (code, out) == (0, "")
    assert "the inbox is empty" in err
    code, out, err = await hostkit("inbox", "list", "--state", "dead_lettered", cwd=tmp_path)
    assert (code, out) == (0, "")
    assert "no inbounds in state dead_lettered" in err


# What a platform may put in an event key: ESC, a C1 CSI, a bidi override, a line separator.
HOSTILE_KEYS = ("evt-\x1b[2J\x1b]0;pwned\x07", "evt-\x9b31mC1", "evt-\u202eevil", "evt-\u2028x")


async def test_list_json_escapes_every_unprintable_character_and_keeps_each_value(
    tmp_path: Path,
) -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    async with RuntimeStore.open(tmp_path / "hostkit.db") as store:
        inbox = ChannelInbox.on_store(store)
        for key in HOSTILE_KEYS:
            await inbox.accept(envelope("demo.chat", key))
    code, out, err = await hostkit("inbox", "list", "--json", cwd=tmp_path)
    assert code == 0, err
    assert out.replace("\n", "").isprintable()  # nothing a terminal would act on
    assert "\\u009b31mC1" in out
    assert "\\u202eevil" in out
    assert "\\u2028x" in out
    rows = json.loads(out)["inbounds"]
    assert sorted(row["platform_event_key"] for row in rows) == sorted(HOSTILE_KEYS)


@pytest.mark.parametrize(
    "channel", ["Demo.chat", "demo\x1b[2J", "demo\u202echat", "-demo", "a" * 65, ""]
)
async def test_a_malformed_channel_is_one_error_line_exit_2(
    project: dict[str, str], channel: str
) -> None:
    code, out, err = await hostkit("inbox", "list", "--channel", channel, cwd=Path(project["dir"]))
    assert (code, out) == (2, "")
    assert err.startswith("error: a channel instance id is 1 to 64 characters")
    assert len(err.strip().splitlines()) == 1
    assert err.isascii()  # the refused value is not echoed


async def test_a_channel_served_by_a_python_agent_does_not_lock_the_operator_out(
    tmp_path: Path,
) -> None:
    """A channel may name a Python agent only ``hostkit serve --agent`` has: the inbox
    commands serve no channel, so they open and say once what they cannot serve; a Host
    that would serve the channel still refuses to open without that agent."""
    config = CONFIG + (
        '\n[channels.hooks]\nkind = "webhook"\nagent = "helpdesk"\nsecret_env = "HOOKS_SECRET"\n'
    )
    await anyio.Path(tmp_path / "hostkit.toml").write_text(config)
    code, out, err = await hostkit("inbox", "counts", cwd=tmp_path)
    assert code == 0, err
    assert "the inbox is empty" in out + err
    assert err.count("channels.hooks.agent names 'helpdesk'") == 1
    assert "this command serves no channel" in err
    with pytest.raises(ConfigError, match=r"channels\.hooks\.agent names 'helpdesk'"):
        async with Host.open(tmp_path / "hostkit.toml"):
            pass


async def test_a_host_that_warned_of_a_channel_it_lacks_the_agent_for_refuses_to_serve_it(
    tmp_path: Path,
) -> None:
    """Opened to serve no channel, the Host only warned; serving would fail every message
    of that channel, so ``serve()`` refuses, naming the key."""
    config = CONFIG + (
        '\n[channels.hooks]\nkind = "webhook"\nagent = "helpdesk"\nsecret_env = "HOOKS_SECRET"\n'
    )
    await anyio.Path(tmp_path / "hostkit.toml").write_text(config)
    async with Host.open(tmp_path / "hostkit.toml", check_providers=False) as host:
        assert any("channels.hooks.agent names 'helpdesk'" in w for w in host.warnings)
        with pytest.raises(ConfigError, match=r"channels\.hooks\.agent names 'helpdesk'"):
            host.serve(env={"HOOKS_SECRET": "s" * 32})
