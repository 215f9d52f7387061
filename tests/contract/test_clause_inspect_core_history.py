"""Clause: CoreHistoryView shows a core's revisions (live marked), its promotions with their gates
and security diff, and which revision each session is pinned to.

Built from a real Git repository (dulwich), the real CoreRegistry (gates,
compare-and-swap ref moves) and the real SQLite store: after a promotion, a
refused MCP change, its reviewed promotion and a rollback, the view marks
exactly the live commit, lists every event newest first with each gate's
verdict and detail, carries the secret-safe security diff of the MCP change,
and marks each session's pin live or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import anyio
import pytest
import yaml
from dulwich import porcelain

from hostkit.cores import CoreLocation, CoreRegistry
from hostkit.errors import InvalidValue, NotFoundOrUnauthorized, PromotionRefused
from hostkit.host import Host
from hostkit.inspect import core_history_of
from hostkit.store import RuntimeStore
from tests.cores_support import commit as commit_files
from tests.cores_support import core_host_config, make_core
from tests.cores_support import manifest_text as core_manifest

pytestmark = pytest.mark.anyio

SECRET = "sk-live-0123456789abcdefSECRET"
LIVE_REF = "refs/hostkit/live"
IDENTITY = b"Ada <ada@example.invalid>"
BASE = {"id": "notes", "model": "test", "instructions": "Keep notes."}
WITH_MCP = {
    **BASE,
    "mcp": {"docs": {"command": ["docs-server", "--stdio"], "env": {"DOCS_TOKEN": SECRET}}},
    "capabilities": {"mcp.connect:docs": "ask"},
}


def _commit(repo: Path, files: Mapping[str, str], message: str) -> str:
    """Blocking: write ``files`` and commit them (a fixed author) on HEAD; the commit id."""
    if not (repo / ".git").exists():
        porcelain.init(str(repo))
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    porcelain.add(str(repo), paths=[str(repo / name) for name in files])
    sha = porcelain.commit(str(repo), message=message, author=IDENTITY, committer=IDENTITY)
    return sha.decode()


async def commit(repo: Path, files: Mapping[str, str], message: str) -> str:
    return await anyio.to_thread.run_sync(_commit, repo, files, message)


def manifest(data: Mapping[str, object]) -> str:
    return yaml.safe_dump(dict(data), sort_keys=False)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "notes"
    path.mkdir()
    return path


@pytest.fixture
def registry(store: RuntimeStore, repo: Path, tmp_path: Path) -> CoreRegistry:
    location = CoreLocation("notes", repo, LIVE_REF)
    return CoreRegistry(store, {"notes": location}, cores_root=tmp_path / "cores")


async def test_promote_refuse_review_and_rollback_show_in_the_view(
    registry: CoreRegistry, store: RuntimeStore, repo: Path
) -> None:
    first = await commit(
        repo, {"agent.yaml": manifest(BASE), "agent/__init__.py": ""}, "first notes core"
    )
    empty = await core_history_of(registry, store, "notes")
    assert empty.live is None
    assert empty.status.head == first
    assert [r.live for r in empty.revisions] == [False]
    assert empty.events == ()

    await registry.promote("notes", actor="ada", reason="first release")
    second = await commit(repo, {"agent.yaml": manifest(WITH_MCP)}, "declare the docs server")
    with pytest.raises(PromotionRefused) as refused:
        await registry.promote("notes", actor="ada")
    token = refused.value.review
    assert token is not None
    await registry.promote("notes", actor="ada", reason="reviewed", review=token)
    await registry.rollback("notes", actor="bob", reason="docs server misbehaves")

    view = await core_history_of(registry, store, "notes")
    assert view.live == first
    assert view.status.head == second
    assert view.status.ref == LIVE_REF
    # The commits from HEAD, newest first; exactly the live one is marked.
    assert [(r.sha, r.live) for r in view.revisions] == [(second, False), (first, True)]
    assert view.summary_of(second) == "declare the docs server"
    # Every recorded move and the refused attempt, newest first.
    assert [(e.action, e.revision, e.previous) for e in view.events] == [
        ("rollback", first, second),
        ("promote", second, first),
        ("refused", second, first),
        ("promote", first, None),
    ]
    rollback, reviewed, refusal, release = view.events
    assert (rollback.actor, rollback.reason) == ("bob", "docs server misbehaves")
    assert release.reason == "first release"
    assert all(g.passed for g in release.gates)
    # The refusal names the failed gate with its detail; the reviewed promotion passed it.
    failed = [g for g in refusal.gates if not g.passed]
    assert [g.gate for g in failed] == ["mcp_review"]
    assert failed[0].detail
    assert {g.gate: g.passed for g in reviewed.gates}["mcp_review"] is True
    # The MCP change carries its security diff, by env NAME, never the value.
    assert "docs" in repr(reviewed.security_diff)
    assert "DOCS_TOKEN" in repr(reviewed.security_diff)
    assert SECRET not in repr(view)
    assert view.truncated == ()


async def test_limit_bounds_each_list_and_says_which_were_cut(
    registry: CoreRegistry, store: RuntimeStore, repo: Path
) -> None:
    await commit(repo, {"agent.yaml": manifest(BASE), "agent/__init__.py": ""}, "one")
    await registry.promote("notes", actor="ada")
    newest = await commit(repo, {"agent.yaml": manifest({**BASE, "description": "2"})}, "two")
    await registry.promote("notes", actor="ada")
    view = await core_history_of(registry, store, "notes", limit=1)
    assert [r.sha for r in view.revisions] == [newest]
    assert [e.revision for e in view.events] == [newest]
    assert view.truncated == ("revisions", "events")


@pytest.mark.parametrize("limit", [0, -1, 1_000, True])
async def test_a_bad_limit_is_refused(
    registry: CoreRegistry, store: RuntimeStore, limit: int
) -> None:
    with pytest.raises(InvalidValue, match="limit must be between 1 and 999"):
        await core_history_of(registry, store, "notes", limit=limit)


async def test_an_unknown_core_is_not_found(registry: CoreRegistry, store: RuntimeStore) -> None:
    with pytest.raises(NotFoundOrUnauthorized):
        await core_history_of(registry, store, "other")


async def test_each_session_is_pinned_to_the_revision_its_latest_turn_ran_on(
    tmp_path: Path,
) -> None:
    path, first = await anyio.to_thread.run_sync(
        lambda: make_core(tmp_path, "notes", manifest={"model": "test", "memory": False})
    )
    script = {"kind": "scripted", "script": [{"reply": "noted"}, {"reply": "noted"}]}
    config = core_host_config(tmp_path, {"notes": path}, providers={"test": script})
    async with Host.open(config) as host:
        registry = CoreRegistry(
            host.store,
            {"notes": CoreLocation("notes", path, LIVE_REF)},
            cores_root=config.cores_root,
        )
        await host.run_turn("notes", "hello", conversation="early")
        second = await anyio.to_thread.run_sync(
            lambda: commit_files(
                path,
                {
                    "agent.yaml": core_manifest(
                        {"id": "notes", "model": "test", "memory": False, "description": "v2"}
                    )
                },
                "second",
            )
        )
        await registry.promote("notes", actor="ada", reason="v2")
        await host.apply_config(host.declared_config)
        await host.run_turn("notes", "hello", conversation="late")
        view = await core_history_of(registry, host.store, "notes")
    assert view.live == second
    pins = [(row.pin.core_revision, row.live) for row in view.pins]
    assert pins == [(second, True), (first, False)]
    assert len({row.pin.session_id for row in view.pins}) == 2
    assert all(row.pin.core_id == "notes" for row in view.pins)
