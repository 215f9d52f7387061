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

import anyio
import pytest

from hostkit.effects import ApprovalKey
from hostkit.errors import ConfigError, PromotionRefused, TurnRejected
from hostkit.host import Host
from hostkit.host._tool_modules import ToolModules
from tests.cores_support import commit, core_host_config, live_of, make_core, manifest_text
from tests.hosts import request
from tests.support import gone

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


def _tools_manifest(*modules: str) -> dict[str, object]:
    return {**manifest("notes", "v"), "capabilities": {"notes.*": "allow"}, "tools": modules}


def _break_discovery(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on every tool module fails to import (a dependency gone)."""

    async def gone(self: ToolModules, module_name: str, *args: object) -> list[object]:
        raise ConfigError(f"cannot import tool module {module_name!r}: its dependency is gone")

    monkeypatch.setattr(ToolModules, "_discover", gone)


async def test_a_rollback_to_a_revision_whose_tools_no_longer_build_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rollback target's tools built when it was live, not now: refused by the tools
    gate before the move is recorded, so the store, the ref and the Host agree."""
    files = {"agent/__init__.py": "", "agent/a.py": _TOOL.format(name="a")}
    path, _ = make_core(tmp_path, "notes", manifest=_tools_manifest("a"), files=files)
    config = core_host_config(tmp_path, {"notes": path}, providers=PROVIDERS)
    async with Host.open(config) as host:
        second = commit(path, {"agent.yaml": manifest_text(_tools_manifest())}, "no tools")
        await host.cores.promote("notes", second, actor="ops")
        generation = host.generation
        _break_discovery(monkeypatch)
        with pytest.raises(PromotionRefused) as refused:
            await host.cores.rollback("notes", actor="ops", reason="back")
        served = await host.turns.run(request(core_id="notes"))
    assert [(gate.gate, gate.passed) for gate in refused.value.gates] == [
        ("manifest", True),
        ("tools", False),
    ]
    assert "its dependency is gone" in refused.value.gates[-1].detail
    assert live_of(path) == second
    assert host.generation == generation
    assert (served.outcome, served.core_revision) == ("completed", second)


async def test_a_move_whose_apply_cannot_build_the_tools_is_installed_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gates passed, the apply's build failed (a dependency gone in between): the
    move is recorded, so the promotion returns it and the Host serves the new revision,
    its core unavailable with the reason; later reloads still apply."""
    files = {"agent/__init__.py": "", "agent/a.py": _TOOL.format(name="a")}
    path, _ = make_core(tmp_path, "notes", manifest=manifest("notes", "v1"), files=files)
    config = core_host_config(tmp_path, {"notes": path}, providers=PROVIDERS)
    async with Host.open(config) as host:

        async def passes(core: object) -> None:
            """The tools gate passed (the dependency went after it)."""

        monkeypatch.setattr(host, "_build_core_tools", passes)
        _break_discovery(monkeypatch)
        second = commit(path, {"agent.yaml": manifest_text(_tools_manifest("a"))}, "tools")
        moved = await host.cores.promote("notes", second, actor="ops")
        with pytest.raises(TurnRejected) as refused:
            await host.turns.run(request(core_id="notes"))
        reloaded = await host.reload()
    assert moved.action == "promote"
    assert live_of(path) == second
    assert host.generation == 2
    assert "its dependency is gone" in refused.value.message
    assert not reloaded.rejected, reloaded


# A tools: module whose import, once ``block`` exists, names its process in ``started``
# and takes far longer than any test: the gate that discovers it is under way until ended.
_SLOW_TOOL = (
    "import os, pathlib, time\n"
    "if pathlib.Path({block!r}).exists():\n"
    "    pathlib.Path({started!r}, str(os.getpid())).touch()\n"
    "    time.sleep(60)\n"
) + _TOOL.replace("notes.write", "notes.slow").format(name="slow")


@pytest.mark.parametrize("move", ["promote", "rollback"])
async def test_aclose_cancels_a_moves_tools_gate_and_nothing_is_recorded(
    tmp_path: Path, move: str
) -> None:
    """A promotion (or rollback) whose tools gate is discovering a module is not waited
    for: ``aclose`` ends the gate and its discovery child at once, the move is refused
    with the Host closing, and no event is recorded: the core stays where it was."""
    started, block = tmp_path / "started", tmp_path / "block"
    started.mkdir()
    files = {
        "agent/__init__.py": "",
        "agent/a.py": _TOOL.format(name="a"),
        "agent/slow.py": _SLOW_TOOL.format(block=str(block), started=str(started)),
    }

    def tools(*modules: str) -> dict[str, object]:
        # Unsandboxed: the pid the module writes is the discovery child's own.
        return {
            **_tools_manifest(*modules),
            "capabilities": {"notes.*": "allow"},
            "sandbox": "none",
        }

    path, _ = make_core(tmp_path, "notes", manifest=tools("a", "slow"), files=files)
    config = core_host_config(tmp_path, {"notes": path}, providers=PROVIDERS)
    refused: list[Exception] = []
    async with Host.open(config) as host:
        # Another revision, so the gate discovers agent/slow.py anew (at its own commit).
        candidate = commit(path, {"agent.yaml": manifest_text(tools("slow", "a"))}, "again")
        if move == "rollback":
            await host.cores.promote("notes", candidate, actor="ops")  # the first is the target
        history, live = await host.cores.history("notes"), live_of(path)
        block.touch()

        async def moving() -> None:
            try:
                if move == "promote":
                    await host.cores.promote("notes", candidate, actor="ops")
                else:
                    await host.cores.rollback("notes", actor="ops", reason="back")
            except Exception as exc:
                refused.append(exc)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(moving)
                while not any(started.iterdir()):  # noqa: ASYNC110 (a child process writes it)
                    await anyio.sleep(0.02)
                (child,) = (int(entry.name) for entry in started.iterdir())
                with anyio.fail_after(5):
                    await host.aclose()
                ended = gone(child)  # when aclose returns, not later
    assert ended
    assert [type(exc) for exc in refused] == [TurnRejected], refused
    assert "is closing: core 'notes' did not move" in str(refused[0])
    # Nothing recorded, nothing moved: the store, the ref and the next Host agree.
    assert live_of(path) == live
    block.unlink()
    async with Host.open(config) as again:
        assert await again.cores.history("notes") == history
        assert (await again.cores.status("notes")).live == live
