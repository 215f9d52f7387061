"""Clause: the CoreHistory widget shows revisions (live marked), gate badges, the security diff of
an MCP change and the session pins, escaped, and refresh() picks up a new event.

Headless (ipywidgets' dummy comm) over a real Git repository, the real
CoreRegistry and the real SQLite store. Commit messages, reasons and actors
are author- and operator-chosen text: the HTML shows them escaped and the
text/plain view on one line.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import anyio
import pytest

from hostkit.cores import CoreLocation, CoreRegistry
from hostkit.errors import PromotionRefused, UserError
from hostkit.notebook import CoreHistory
from hostkit.notebook._cores import when
from hostkit.store import RuntimeStore
from tests.contract.test_clause_inspect_core_history import (
    BASE,
    LIVE_REF,
    SECRET,
    WITH_MCP,
    commit,
    manifest,
)

pytestmark = pytest.mark.anyio

HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # a kernel's loop is asyncio


@pytest.fixture
def registry(store: RuntimeStore, tmp_path: Path) -> CoreRegistry:
    (tmp_path / "notes").mkdir()
    location = CoreLocation("notes", tmp_path / "notes", LIVE_REF)
    return CoreRegistry(store, {"notes": location}, cores_root=tmp_path / "cores")


async def promoted_then_refused(registry: CoreRegistry, repo: Path) -> tuple[str, str, str]:
    """A first revision promoted; an MCP change refused for want of its review token."""
    first = await commit(
        repo, {"agent.yaml": manifest(BASE), "agent/__init__.py": ""}, f"first {HOSTILE}"
    )
    await registry.promote("notes", actor="ada", reason=f"ship it {HOSTILE}")
    second = await commit(repo, {"agent.yaml": manifest(WITH_MCP)}, "declare the docs server")
    with pytest.raises(PromotionRefused) as refused:
        await registry.promote("notes", actor="ada")
    assert refused.value.review is not None
    return first, second, refused.value.review


async def test_revisions_gates_and_security_diff_are_drawn_escaped(
    registry: CoreRegistry, store: RuntimeStore, tmp_path: Path
) -> None:
    first, second, token = await promoted_then_refused(registry, tmp_path / "notes")
    await registry.promote("notes", actor="ada", reason="reviewed", review=token)
    widget = await CoreHistory.load_from(registry, store, "notes")
    html = widget.html()
    assert HOSTILE not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # The live marker sits on the second revision's row only.
    rows = html.split("<tr>")
    live_rows = [row for row in rows if "hk-badge" in row and ">live<" in row]
    assert len(live_rows) == 1
    assert second[:12] in live_rows[0]
    # Gate badges: the refused attempt's failed mcp_review, the reviewed promotion's passed one.
    assert "mcp_review failed" in html
    assert "mcp_review passed" in html
    # The refused attempt stopped before its tests (they run only after review): two.
    assert html.count("tests passed") == 2
    # The MCP change's security diff is behind a toggle, with env names and no values.
    assert html.count('<details class="hk-security-diff">') == 2
    assert "DOCS_TOKEN" in html
    assert SECRET not in html
    text = widget.text()
    assert f"* {second[:12]}  declare the docs server  (live)" in text
    assert f"  {first[:12]}  first {HOSTILE}" in text
    assert "refused" in text
    assert "mcp_review FAILED (" in text
    assert SECRET not in text
    assert when(0.0) == "1970-01-01T00:00:00Z"


async def test_refresh_picks_up_a_new_event_and_the_button_does_too(
    registry: CoreRegistry, store: RuntimeStore, tmp_path: Path
) -> None:
    first, second, token = await promoted_then_refused(registry, tmp_path / "notes")
    widget = await CoreHistory.load_from(registry, store, "notes")
    assert [e.action for e in widget.model.events] == ["refused", "promote"]
    assert widget.model.live == first
    await registry.promote("notes", actor="ada", reason="reviewed", review=token)
    view = await widget.refresh()
    assert [e.action for e in view.events] == ["promote", "refused", "promote"]
    assert widget.model is view
    assert widget.model.live == second
    assert f"live {second[:12]}" in widget.text()
    await registry.rollback("notes", actor="bob", reason="too soon")
    # A click may arrive on a comm thread: it schedules the read on the widget's loop.
    await anyio.to_thread.run_sync(widget.refresh_button.click)
    await widget.join()
    assert widget.model.events[0].action == "rollback"
    assert widget.model.live == first
    assert "rollback" in widget.html()


async def test_a_failed_refresh_is_shown_and_the_widget_keeps_its_view(
    registry: CoreRegistry, store: RuntimeStore, tmp_path: Path
) -> None:
    await promoted_then_refused(registry, tmp_path / "notes")
    widget = await CoreHistory.load_from(registry, store, "notes")
    before = widget.model
    await store.aclose()
    widget.refresh_button.click()
    await widget.join()
    assert widget.model is before
    assert widget.status_text.startswith("refresh failed: ")
    assert widget.text().endswith(widget.status_text)


async def test_a_widget_needs_a_running_loop(
    registry: CoreRegistry, store: RuntimeStore, tmp_path: Path
) -> None:
    await promoted_then_refused(registry, tmp_path / "notes")
    widget = await CoreHistory.load_from(registry, store, "notes")

    def build() -> None:
        CoreHistory(registry, store, widget.model)

    with pytest.raises(UserError, match="running event loop"):
        await anyio.to_thread.run_sync(build)
    assert asyncio.get_running_loop() is widget._work.loop
