"""CLI clause: a dead letter accepted without its text is not offered a requeue.

A channel accepts an event it cannot store whole (too long, a NUL) without
its text, as kind ``unprocessable``, so the platform stops retrying; the
worker dead-letters it at once. A requeue would dead-letter it again at
once: ``inbox list``/``dlq``/``show`` print no requeue command for it (they
still do for the others), ``inbox show`` says there is no text, not
"kept", and ``inbox requeue`` refuses it in one line.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import anyio
import pytest

from hostkit.inbox import ChannelInbox, RetryPolicy
from hostkit.store import RuntimeStore
from hostkit.types import UNPROCESSABLE, InboundFailure
from tests.contract.test_cli_inbox import CONFIG, Clock, envelope, hostkit

pytestmark = pytest.mark.anyio


@pytest.fixture
async def dead(tmp_path: Path) -> dict[str, str]:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    clock = Clock()
    ids = {"dir": str(tmp_path)}
    async with RuntimeStore.open(tmp_path / "hostkit.db") as store:
        inbox = ChannelInbox.on_store(store, policy=RetryPolicy(max_attempts=2), clock=clock)
        textless = dataclasses.replace(
            envelope("demo.chat", "evt-long"), kind=UNPROCESSABLE, payload=""
        )
        ids["textless"] = (await inbox.accept(textless)).inbound_id
        ids["poison"] = (await inbox.accept(envelope("demo.chat", "evt-poison"))).inbound_id
        claimed = {c.inbound_id: c for c in await inbox.claim_batch(5)}
        await inbox.fail(
            claimed[ids["textless"]],
            InboundFailure("permanent", UNPROCESSABLE, "the event's text is too long"),
        )
        await inbox.fail(
            claimed[ids["poison"]], InboundFailure("permanent", "unreadable", "cannot parse")
        )
    return ids


async def test_no_requeue_is_offered_for_a_dead_letter_without_its_text(
    dead: dict[str, str],
) -> None:
    where = Path(dead["dir"])
    for command in (("inbox", "dlq"), ("inbox", "list")):
        code, out, err = await hostkit(*command, cwd=where, columns=200)
        assert code == 0, err
        assert dead["textless"] in out  # still listed
        assert f"requeue it: hostkit inbox requeue {dead['poison']}" in err
        assert f"requeue {dead['textless']}" not in err
    code, out, err = await hostkit("inbox", "show", dead["textless"], cwd=where, columns=200)
    assert code == 0, err
    assert "without its text" in out
    assert "kept (never shown here)" not in out
    assert "requeue" not in err
    code, out, err = await hostkit("inbox", "show", dead["poison"], cwd=where, columns=200)
    assert "kept (never shown here)" in out
    assert f"hostkit inbox requeue {dead['poison']}" in err


async def test_requeue_of_a_dead_letter_without_its_text_is_one_error_line_and_changes_nothing(
    dead: dict[str, str],
) -> None:
    where = Path(dead["dir"])
    requeue = ("inbox", "requeue", dead["textless"], "--reason", "try again")
    code, out, err = await hostkit(*requeue, cwd=where, columns=200)
    assert code == 2, err
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"error: inbound {dead['textless']} cannot be requeued")
    assert "without its text" in line
    assert "dead-lettered again at once" in line
    code, out, err = await hostkit("inbox", "show", dead["textless"], "--json", cwd=where)
    assert code == 0, err
    assert (json.loads(out)["state"], json.loads(out)["requeues"]) == ("dead_lettered", 0)
    code, _, err = await hostkit(
        "inbox", "requeue", dead["poison"], "--reason", "parser fixed", cwd=where, columns=200
    )
    assert code == 0, err
    assert f"requeued {dead['poison']}: ready" in err
