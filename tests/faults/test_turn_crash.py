"""kill -9 of a real Host process in the middle of a turn: the turn is lost, nothing replays."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import textwrap
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from hostkit.host import Host
from hostkit.store import INTERRUPTED
from hostkit.testing import Reply, ScriptedModel, capabilities
from tests.cli import run_cli_async
from tests.hosts import config, event_kinds, request, turn_rows
from tests.support import sigkill_when

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CHILD = textwrap.dedent(
    """
    import sys
    import anyio
    from pathlib import Path
    from hostkit.host import Host, parse_config
    from hostkit.testing import ScriptedModel, capabilities
    from hostkit.types import ConversationFacts, TurnRequest

    root, marker = Path(sys.argv[1]), Path(sys.argv[2])

    async def blocked(request):
        await anyio.Path(marker).write_text("inside the provider call")
        await anyio.sleep_forever()

    async def main():
        config = parse_config(
            {
                "host": {"database": str(root / "hostkit.db"), "workspace": str(root)},
                "providers": {"test": {"kind": "scripted"}},
                "agents": {"assistant": {"provider": "test", "memory": False}},
            },
            base_dir=root,
        )
        async with Host.open(config, capabilities=capabilities(ScriptedModel([blocked]))) as host:
            await host.turns.run(
                TurnRequest(
                    input="hello",
                    principal=ConversationFacts(
                        channel="test", conversation_key="c1", principal_key="alice"
                    ),
                    request_id="req-crash",
                )
            )

    anyio.run(main)
    """
)


async def test_sigkill_mid_turn_leaves_one_lost_terminal_record_and_no_replay(
    tmp_path: Path,
) -> None:
    marker = anyio.Path(tmp_path / "marker")
    argv = [sys.executable, "-c", CHILD, str(tmp_path), str(marker)]
    await sigkill_when(argv, marker.exists, what="the turn started")

    model = ScriptedModel([Reply("after restart")])
    async with Host.open(config(tmp_path), capabilities=capabilities(model)) as host:
        rows = await turn_rows(host)
        assert [status for _, status in rows] == ["lost"]
        turn_id = rows[0][0]
        kinds = await event_kinds(host, turn_id)
        assert kinds[0] == "turn.started"
        assert [k for k in kinds if k.startswith("turn.") and k != "turn.started"] == ["turn.lost"]
        roles = await host.store.read(
            lambda c: c.execute("SELECT role FROM messages WHERE turn_id = ?", [turn_id]).fetchall()
        )
        assert roles == [("user",)]
        assert model.requests == [], "recovery never replays the provider step"
        # The same request id answers with the recorded terminal result, still without replay.
        repeat = await host.turns.run(request("hello", request_id="req-crash"))
        assert (repeat.turn_id, repeat.outcome) == (turn_id, "lost")
        assert model.requests == []
        # The session is usable again: its admission was not left held.
        follow = await host.turns.run(request("hello again"))
        assert follow.outcome == "completed"


# The crashed child's database, as the command line's views open it.
VIEW_CONFIG = """
[host]
database = "hostkit.db"
workspace = "."

[providers.test]
kind = "scripted"

[agents.assistant]
provider = "test"
memory = false
"""


async def view(root: Path, *args: str) -> tuple[str, str]:
    """A read-only view of ``hostkit`` run as its own process: its stdout and stderr."""
    result = await run_cli_async(*args, cwd=root, env={**os.environ, "COLUMNS": "200"})
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode(), result.stderr.decode()


def recorded_statuses(database: Path) -> list[str]:
    with closing(sqlite3.connect(database)) as conn:
        return [row[0] for row in conn.execute("SELECT status FROM turns ORDER BY id")]


async def test_a_read_only_view_shows_a_killed_hosts_turn_interrupted_and_writes_nothing(
    tmp_path: Path,
) -> None:
    """The views open ``reads_only`` and recover nothing, yet never call a turn whose
    holder died "running": it shows ``interrupted`` until a Host that writes ends it."""
    marker = anyio.Path(tmp_path / "marker")
    argv = [sys.executable, "-c", CHILD, str(tmp_path), str(marker)]
    await sigkill_when(argv, marker.exists, what="the turn started")
    (tmp_path / "hostkit.toml").write_text(VIEW_CONFIG)

    listed, _ = await view(tmp_path, "sessions", "--json")
    assert [row["last_outcome"] for row in json.loads(listed)["sessions"]] == [INTERRUPTED]
    table, note = await view(tmp_path, "sessions")
    assert "interrupted" in table
    assert "running" not in table
    assert "a Host that next opens ends it" in " ".join(note.split())
    context, _ = await view(tmp_path, "context")
    assert "status interrupted" in context
    assert "this interrupted turn's holder is gone" in " ".join(context.split())
    budget, _ = await view(tmp_path, "budget")
    assert "(interrupted, no usage)" in budget
    # A view ends nothing: the turn is still recorded running, for recovery to end.
    assert recorded_statuses(tmp_path / "hostkit.db") == ["running"]

    async with Host.open(config(tmp_path), capabilities=capabilities(ScriptedModel([]))):
        pass
    assert recorded_statuses(tmp_path / "hostkit.db") == ["lost"]
