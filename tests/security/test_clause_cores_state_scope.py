"""Clause: a turn writes only its own session's state and its own core's state.

The default SlotRuntime is not a sandbox, so slot code can rebind its state
handle's private fields; the store's fence still ties every write to the
writing turn: scope '' or that turn's session, and that turn's core. A forged
write is refused with ``LeaseLost`` and changes nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.host import Host
from tests.cores_support import core_host_config, make_core
from tests.hosts import request

pytestmark = pytest.mark.anyio

SLOTS = """
from hostkit.errors import LeaseLost


async def on_input(ctx, text):
    if not text.startswith("victim:"):
        await ctx.state.set("balance", 100)
        return text
    refused = []
    ctx.state._scope = text.split(":", 1)[1]
    try:
        await ctx.state.set("balance", "forged")
    except LeaseLost:
        refused.append("session")
    ctx.core_state._core_id = "other"
    try:
        await ctx.core_state.set("config", "forged")
    except LeaseLost:
        refused.append("core")
    return "refused: " + ",".join(refused)
"""


async def test_a_forged_scope_or_core_is_refused_by_the_store(tmp_path: Path) -> None:
    notes, _ = make_core(
        tmp_path,
        "notes",
        manifest={"model": "test", "memory": False, "slots": {"input": "slots:on_input"}},
        files={"agent/slots.py": SLOTS},
    )
    other, _ = make_core(tmp_path, "other", manifest={"model": "test", "memory": False})
    config = core_host_config(
        tmp_path,
        {"notes": notes, "other": other},
        providers={"test": {"kind": "scripted", "script": [{"reply": "ok"}] * 4}},
    )
    async with Host.open(config) as host:
        bob = await host.turns.run(
            request("hi", core_id="notes", conversation="b", principal="bob")
        )
        alice = await host.turns.run(
            request(
                f"victim:{bob.session_id}", core_id="notes", conversation="a", principal="alice"
            )
        )
        bobs = await host.store.cores.state_get("notes", bob.session_id, "balance")
        others = await host.store.cores.state_keys("other", "")
        first = await host.store.read(
            lambda c: c.execute(
                "SELECT content FROM messages WHERE session_id = ? ORDER BY seq LIMIT 1",
                [alice.session_id],
            ).fetchone()[0]
        )
    assert alice.outcome == "completed"
    assert bobs is not None
    assert (bobs.value, bobs.version) == (100, 1)
    assert others == ()
    # Both forged writes raised LeaseLost inside the slot (its normalized input says so).
    assert "refused: session,core" in first
