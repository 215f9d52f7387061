"""Clause: session approvals end in every Host process, not only the one that ended them.

"Entries are invalidated on session end, authority or conversation-binding
change, policy/revision change, explicit revocation, or bounded expiry.
Session-scoped approval does not survive as ambient process-wide authority."

A Host (this test's process) holds alice's "approve for session" answer. The
end happens in another OS process on the same database: the operator's
``hostkit approvals revoke``, or a script that moves the conversation to a
fresh session and back. Alice's next call in the session is asked again. The
control (nothing happens elsewhere) keeps using the answer.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from hostkit.host import Host
from hostkit.testing import Reply, ScriptedModel, capabilities
from tests.cli import run_cli_async
from tests.contract.test_effects_approval_flow import ASK, Approver, Stamps, host_config, stamp_call
from tests.hosts import request

pytestmark = pytest.mark.anyio

ROOM = "room"

CONFIG = """
[host]
database = "hostkit.db"
workspace = "."

[providers.test]
kind = "scripted"

[agents.assistant]
provider = "test"
memory = false
"""

# Another process moves alice's conversation to a fresh session, then back to hers.
MOVE = """
import sys
import anyio
from hostkit.host import Host, load_config
from hostkit.types import ConversationFacts

async def main() -> None:
    alice = ConversationFacts("test", sys.argv[2], "alice")
    async with Host.open(load_config(sys.argv[1])) as host:
        fresh = await host.authority.for_conversation(alice, session="fresh")
        back = await host.authority.for_conversation(alice, session=sys.argv[3])
        assert fresh.session_id != back.session_id == sys.argv[3]

anyio.run(main)
"""

Elsewhere = Callable[[Path, str], Awaitable[None]]


async def run(*argv: str, cwd: Path) -> str:
    result = await anyio.run_process(
        list(argv),
        cwd=cwd,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200"},
    )
    out = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 0, out
    return out


async def nothing(tmp_path: Path, session_id: str) -> None:
    """The control: no other process does anything."""


async def operator_revokes(tmp_path: Path, session_id: str) -> None:
    out = await run(
        sys.executable, "-m", "hostkit", "approvals", "revoke", session_id, cwd=tmp_path
    )
    assert f"revoked: session approvals of {session_id}" in out


async def conversation_moved_and_back(tmp_path: Path, session_id: str) -> None:
    await run(
        sys.executable, "-c", MOVE, str(tmp_path / "hostkit.toml"), ROOM, session_id, cwd=tmp_path
    )


@pytest.mark.parametrize(
    ("elsewhere", "asked"),
    [(nothing, 1), (operator_revokes, 2), (conversation_moved_and_back, 2)],
    ids=["control", "cli_revoke", "binding_change"],
)
async def test_an_end_in_another_process_reaches_the_running_host(
    tmp_path: Path, elsewhere: Elsewhere, asked: int
) -> None:
    (tmp_path / "hostkit.toml").write_text(CONFIG)
    model = ScriptedModel([stamp_call("a"), Reply("one"), stamp_call("b"), Reply("two")])
    stamps = Stamps(tmp_path / "stamps.txt")
    approver = Approver("approve_session")
    async with Host.open(
        host_config(tmp_path, ASK),
        capabilities=capabilities(model, tools=[stamps.tool]),
        approver=approver,
    ) as host:
        first = await host.turns.run(request("first", conversation=ROOM, principal="alice"))
        assert first.outcome == "completed", first
        await elsewhere(tmp_path, first.session_id)
        second = await host.turns.run(request("second", conversation=ROOM, principal="alice"))
        assert second.outcome == "completed", second
        assert second.session_id == first.session_id
    assert stamps.lines() == ["a", "b"]
    assert len(approver.seen) == asked


async def test_a_session_that_is_not_the_operators_to_see_is_refused_and_nothing_changes(
    tmp_path: Path,
) -> None:
    (tmp_path / "hostkit.toml").write_text(CONFIG)
    result = await run_cli_async("approvals", "revoke", "ses_missing", cwd=tmp_path)
    err = result.stderr.decode()
    assert result.returncode != 0
    assert "session not found" in err
    assert "Traceback" not in err
