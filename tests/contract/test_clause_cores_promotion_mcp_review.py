"""Clause: an MCP declaration change needs its exact, content-bound review token.

"an MCP declaration change needs a secret-safe security diff and a
content-bound ``mcp-review:<sha256>`` token". Without a token, and with a
stale one (the token of another change), the promotion is refused, recorded
with the security diff, and the ref stays; the token ``hostkit core diff``
shows (and the refusal returns) promotes exactly that change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hostkit.cores import review_token
from hostkit.errors import PromotionRefused
from hostkit.freeze import thaw
from hostkit.store import RuntimeStore
from tests.cores_support import commit, core_registry, live_of, make_core

pytestmark = pytest.mark.anyio

SECRET = "sk-live-abcdef0123456789SECRET"
BASE = "id: notes\nmodel: test\ninstructions: Take notes.\n"
WITH_MCP = (
    BASE
    + "capabilities:\n  'mcp.connect:docs': ask\n"
    + "mcp:\n  docs:\n    command: [docs-server, --stdio]\n"
    + f"    env: {{DOCS_TOKEN: {SECRET}}}\n"
)
OTHER_MCP = WITH_MCP.replace("ask", "allow")


async def test_an_mcp_change_is_refused_without_and_with_a_stale_token(
    tmp_path: Path, store: RuntimeStore
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=BASE)
    candidate = commit(path, {"agent.yaml": WITH_MCP}, "declare the docs server")
    registry = core_registry(tmp_path, store, {"notes": path})
    diff = await registry.diff("notes")
    assert diff.review is not None
    assert diff.security_diff["servers"]["docs"]["change"] == "added"

    with pytest.raises(PromotionRefused) as missing:
        await registry.promote("notes", actor="ops")
    assert missing.value.review == diff.review
    gate = {g.gate: g for g in missing.value.gates}["mcp_review"]
    assert not gate.passed
    assert "missing" in gate.detail
    assert diff.review in gate.detail

    stale = review_token("notes", first, candidate, {"servers": {"docs": {"change": "changed"}}})
    with pytest.raises(PromotionRefused) as refused:
        await registry.promote("notes", actor="ops", review=stale)
    assert "stale" in {g.gate: g for g in refused.value.gates}["mcp_review"].detail
    assert live_of(path) == first

    events = await registry.history("notes")
    assert [event.action for event in events] == ["refused", "refused", "promote"]
    assert thaw(events[0].security_diff) == thaw(diff.security_diff)
    shown = json.dumps([thaw(e.security_diff) for e in events]) + str(missing.value) + diff.patch
    assert SECRET not in shown
    assert "DOCS_TOKEN" in shown


async def test_the_right_token_promotes_exactly_that_change(
    tmp_path: Path, store: RuntimeStore
) -> None:
    path, _ = make_core(tmp_path, "notes", manifest=BASE)
    commit(path, {"agent.yaml": WITH_MCP}, "declare the docs server")
    registry = core_registry(tmp_path, store, {"notes": path})
    token = (await registry.diff("notes")).review
    # A newer change makes that token stale: it reviewed another diff.
    newer = commit(path, {"agent.yaml": OTHER_MCP}, "grant docs without asking")
    with pytest.raises(PromotionRefused) as refused:
        await registry.promote("notes", actor="ops", review=token)
    assert refused.value.review != token
    event = await registry.promote("notes", actor="ops", review=refused.value.review)
    assert event.action == "promote"
    assert live_of(path) == newer
    assert {g.gate: g for g in event.gates}["mcp_review"].passed
    assert event.security_diff["servers"]["docs"]["after"]["connect"] == "allow"
    # Unchanged declarations afterwards need no token.
    later = commit(path, {"notes.md": "unrelated\n"}, "docs only")
    assert (await registry.diff("notes")).review is None
    assert (await registry.promote("notes", actor="ops")).revision == later
