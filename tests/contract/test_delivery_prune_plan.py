"""A retention pass over delivered answers reads what it prunes, not every row it keeps.

Delivered intents stay a week (the tombstone horizon) and there is one per answer part,
so a pass that scanned the outbox would cost a week of answers every few minutes. Both of
its statements walk a partial index of delivered rows, oldest first (schema v24).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hostkit.store import RowStore, RuntimeStore
from hostkit.store._delivery_rows import _PRUNE_PAYLOADS, _PRUNE_ROWS

pytestmark = pytest.mark.anyio


async def test_both_prune_statements_walk_a_delivered_index_in_order(tmp_path: Path) -> None:
    async with await RuntimeStore.open(tmp_path / "hostkit.db") as store:
        assert isinstance(store, RowStore)

        def plans(conn: sqlite3.Connection) -> dict[str, list[str]]:
            return {
                name: [
                    str(row[3])
                    for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", [0.0] * sql.count("?"))
                ]
                for name, sql in (("rows", _PRUNE_ROWS), ("payloads", _PRUNE_PAYLOADS))
            }

        found = await store.read(plans)
    for name, index in (("rows", "outbox_delivered"), ("payloads", "outbox_delivered_payload")):
        lines = found[name]
        assert any(f"USING INDEX {index} " in line for line in lines), lines
        assert not any(line.startswith("SCAN outbox") and "INDEX" not in line for line in lines)
        assert not any("TEMP B-TREE" in line for line in lines), lines
