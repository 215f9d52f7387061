"""kill -9 of a process holding a compaction lease: the next worker takes the lease at once."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.context._compaction import SessionCompactor
from hostkit.store import LeaseOwner, RuntimeStore
from hostkit.types import ModelMessage
from tests.support import facts, sigkill_when

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CHILD = textwrap.dedent(
    """
    import json
    import sys
    import anyio
    from pathlib import Path
    from hostkit.context._compaction import SessionCompactor
    from hostkit.store import LeaseOwner, RuntimeStore
    from hostkit.types import ModelMessage

    database, session_id, marker = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    pairs = [(seq, ModelMessage(role, text)) for seq, role, text in json.loads(sys.argv[4])]

    class Stuck:
        name = "stuck"

        async def summarize(self, previous, messages, *, max_tokens):
            await anyio.Path(marker).write_text("inside the summarizer")
            await anyio.sleep_forever()

    async def main():
        async with await RuntimeStore.open(database) as store:
            owner = await anyio.to_thread.run_sync(LeaseOwner.current, "child-host")
            compactor = SessionCompactor(
                store, owner=owner, lease_ttl_s=3600.0, summarize_timeout_s=3600.0
            )
            await compactor.compact(
                session_id, messages=pairs, expected_cutoff=None, summarizer=Stuck()
            )

    anyio.run(main)
    """
)


async def test_sigkill_while_summarizing_frees_the_lease_for_the_next_worker_at_once(
    tmp_path: Path,
) -> None:
    database = tmp_path / "hostkit.db"
    marker = anyio.Path(tmp_path / "marker")
    async with await RuntimeStore.open(database) as store:
        async with AuthorityResolver.bind(store) as authority:
            scope = await authority.for_conversation(facts("c"))
        session_id = scope.session_id or ""
        pairs = []
        for i in range(5):
            message = ModelMessage("user" if i % 2 == 0 else "assistant", f"message {i}")
            record = await store.append_message(
                scope, session_id, role=message.role, content=message.to_json()
            )
            pairs.append((record.seq, message))
        wire = json.dumps([[seq, m.role, m.content] for seq, m in pairs])

        argv = [sys.executable, "-c", CHILD, str(database), session_id, str(marker), wire]
        await sigkill_when(argv, marker.exists, what="summarizing")

        lease = (await store.context.compaction_state(session_id)).lease
        assert lease is not None
        assert lease.lease_id is not None
        held = LeaseOwner.decode(lease.owner or "")
        assert held is not None
        assert held.instance == "child-host"
        assert lease.expires_at is not None
        assert lease.expires_at > time.time() + 3000, "the child's lease is nowhere near expiry"

        owner = await anyio.to_thread.run_sync(LeaseOwner.current, "restarted-host")
        compactor = SessionCompactor(store, owner=owner, wait_s=60.0)

        class Quick:
            name = "quick"

            async def summarize(self, previous, messages, *, max_tokens):  # type: ignore[no-untyped-def]
                return "summary after the crash"

        with anyio.fail_after(10):  # far below the child's TTL and below wait_s
            outcome = await compactor.compact(
                session_id, messages=pairs, expected_cutoff=None, summarizer=Quick()
            )
        assert outcome.kind == "committed"
        assert outcome.summary is not None

        after = await store.context.compaction_state(session_id)
        assert after.summary is not None
        assert (
            after.summary.summary,
            after.summary.cutoff_seq,
            after.summary.summarized_messages,
        ) == ("summary after the crash", pairs[-1][0], len(pairs))
        assert after.lease is not None
        assert (after.lease.lease_id, after.lease.owner, after.lease.expires_at) == (
            None,
            None,
            None,
        )
        # The SQLite file itself survived the kill intact.
        integrity = await store.read(  # type: ignore[attr-defined]
            lambda c: c.execute("PRAGMA integrity_check").fetchone()[0]
        )
        assert integrity == "ok"
