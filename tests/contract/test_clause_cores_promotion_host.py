"""Clause: a promotion or rollback through the Host drops that core's session approvals
and builds a new generation; the next turn runs the new revision.

"promotion and rollback invalidate that core's session approvals" and
"make a core promotion ... build generation N+1; new turns use it".
``host.cores`` is the registry over the Host's ``[cores]``; its manifest gate
compiles the candidate against the Host's configuration (a model that is no
provider is refused, naming agent.yaml's line).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.effects import ApprovalKey
from hostkit.errors import PromotionRefused
from hostkit.host import Host
from tests.cores_support import commit, core_host_config, live_of, make_core, manifest_text
from tests.hosts import request

pytestmark = pytest.mark.anyio

PROVIDERS = {"test": {"kind": "scripted", "script": [{"reply": "noted"}] * 8}}


def manifest(core_id: str, instructions: str, model: str = "test") -> dict[str, object]:
    return {"id": core_id, "model": model, "instructions": instructions, "memory": False}


def session_key(core_id: str) -> ApprovalKey:
    return ApprovalKey("principal", "session", "fingerprint", "files.write", core_id=core_id)


async def test_promote_and_rollback_move_new_turns_and_drop_session_approvals(
    tmp_path: Path,
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=manifest("notes", "v1"))
    other, _ = make_core(tmp_path, "other", manifest=manifest("other", "other"))
    config = core_host_config(tmp_path, {"notes": path, "other": other}, providers=PROVIDERS)
    async with Host.open(config) as host:
        before = await host.turns.run(request(core_id="notes"))
        assert before.core_revision == first
        cache = host.approvals.runtime
        await cache.remember(session_key("notes"), since=await cache.refresh())
        await cache.remember(session_key("other"), since=await cache.refresh())
        generation = host.generation

        second = commit(path, {"agent.yaml": manifest_text(manifest("notes", "v2"))}, "v2")
        event = await host.cores.promote("notes", actor="ops", reason="v2")
        assert event.revision == second
        assert host.generation == generation + 1
        assert not cache.cached(session_key("notes"))
        assert cache.cached(session_key("other"))
        after = await host.turns.run(request(core_id="notes"))
        assert after.core_revision == second
        status = await host.cores.status("notes")
        assert (status.live, status.head, status.path) == (second, second, path)

        await cache.remember(session_key("notes"), since=await cache.refresh())
        back = await host.cores.rollback("notes", actor="ops", reason="v2 was wrong")
        assert back.revision == first
        assert host.generation == generation + 2
        assert not cache.cached(session_key("notes"))
        again = await host.turns.run(request(core_id="notes"))
        assert again.core_revision == first
        log = await host.cores.log("notes")
        assert [(r.sha, r.live) for r in log] == [(second, False), (first, True)]


async def test_the_manifest_gate_compiles_against_the_hosts_configuration(
    tmp_path: Path,
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=manifest("notes", "v1"))
    config = core_host_config(tmp_path, {"notes": path}, providers=PROVIDERS)
    async with Host.open(config) as host:
        commit(path, {"agent.yaml": manifest_text(manifest("notes", "v2", "gpt-x"))}, "v2")
        generation = host.generation
        with pytest.raises(PromotionRefused) as refused:
            await host.cores.promote("notes", actor="ops")
        (gate,) = refused.value.gates
        assert gate.gate == "manifest"
        assert "line 2" in gate.detail
        assert "'gpt-x' is not a provider" in gate.detail
        assert host.generation == generation
        assert live_of(path) == first


_TOOL = '''from hostkit.effects import ToolContext, tool


@tool("notes.write")
async def {name}(ctx: ToolContext, text: str) -> str:
    """Write a note."""
    return "noted"
'''


async def test_a_revision_whose_tools_collide_is_refused_by_the_tools_gate(
    tmp_path: Path,
) -> None:
    """Two ``tools:`` modules defining one tool passed every gate, then every turn of the
    live core was refused. The last gate builds the tools as the generation would."""

    def tools(*modules: str) -> dict[str, object]:
        return {**manifest("notes", "v"), "capabilities": {"notes.*": "allow"}, "tools": modules}

    files = {"agent/__init__.py": "", **{f"agent/{m}.py": _TOOL.format(name=m) for m in "ab"}}
    path, first = make_core(tmp_path, "notes", manifest=tools("a"), files=files)
    config = core_host_config(tmp_path, {"notes": path}, providers=PROVIDERS)
    async with Host.open(config) as host:
        generation = host.generation
        commit(path, {"agent.yaml": manifest_text(tools("a", "b"))}, "collide")
        with pytest.raises(PromotionRefused) as refused:
            await host.cores.promote("notes", actor="ops")
        served = await host.turns.run(request(core_id="notes"))
    assert [(gate.gate, gate.passed) for gate in refused.value.gates] == [
        ("manifest", True),
        ("dependencies", True),
        ("mcp_review", True),
        ("tests", True),
        ("tools", False),
    ]
    assert "two tools collide as effect 'notes.write'" in refused.value.gates[-1].detail
    # Never live: the store, the ref and the generation stay at the first revision.
    assert live_of(path) == first
    assert host.generation == generation
    assert (served.outcome, served.core_revision) == ("completed", first)
