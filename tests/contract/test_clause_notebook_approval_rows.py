"""Clause: a notebook approval reads as finished work.

Rows have full button labels that are never cut, multi-line values shown as
such, a coloured diff for a file overwrite and a countdown to the decision
timeout that ticks and stops; the ApprovalsPanel pretty-prints the redacted
view and shows what the continuation answered. Headless (ipywidgets' dummy
comm); the hosts are real.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import ipywidgets as widgets
import pytest

import hostkit.notebook as hn
from hostkit.effects import DIFF_KEY, PendingApproval, ToolContext, tool
from hostkit.host import parse_config
from hostkit.inspect import ApprovalRows
from hostkit.notebook import ApprovalRow, ApprovalsPanel
from hostkit.notebook._theme import DIFF_ADD_BG, DIFF_DEL_BG, GRAPHIC_PAIRS, TEXT_PAIRS
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from tests.hosts import open_host, request

pytestmark = pytest.mark.anyio

DIFF = "--- a/n.md\n+++ b/n.md\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO <b>\n"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # a kernel's loop is asyncio


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def row(view: dict[str, Any] | None = None, **options: Any) -> ApprovalRow:
    return ApprovalRow(
        "files.write",
        view or {"effect": "files.write", "arguments": {"path": "n.md", "content": "x"}},
        approval_id="apr_1",
        **options,
    )


def description(approval_row: ApprovalRow) -> str:
    first = approval_row.widget.children[0]
    assert isinstance(first, widgets.HTML)
    return first.value


def test_buttons_carry_full_labels_and_size_to_them() -> None:
    shown = row()
    assert [b.description for b in shown.buttons] == [
        "Approve once",
        "Approve for this session",
        "Deny",
    ]
    for button in shown.buttons:
        # ipywidgets' default fixed button width cuts "Approve for this session".
        assert button.layout.width == "auto"
        assert button.layout.min_width == "fit-content"
    bar = shown.widget.children[1]
    assert isinstance(bar, widgets.HBox)
    assert bar.layout.flex_flow == "row wrap"  # a narrow page wraps, never truncates


def test_multi_line_values_are_shown_as_blocks_and_escaped() -> None:
    content = "first line\n<script>x</script>\n  indented"
    page = description(row({"arguments": {"path": "n.md", "content": content}}))
    assert "<td><code>n.md</code></td>" in page  # a short value stays inline
    (block,) = re.findall(r"<pre[^>]*>(.*?)</pre>", page, re.S)
    assert block == "first line\n&lt;script&gt;x&lt;/script&gt;\n  indented"
    assert "<script>" not in page
    assert "max-height:16em;overflow:auto" in page  # long blocks scroll, bounded


def test_a_diff_is_drawn_line_by_line_in_checked_theme_colours() -> None:
    page = description(row({"arguments": {"path": "n.md"}, DIFF_KEY: DIFF}))
    assert "the file exists; this write replaces it" in page
    added = re.search(r"<span style='([^']*)'>\+TWO &lt;b&gt;</span>", page)
    removed = re.search(r"<span style='([^']*)'>-two</span>", page)
    assert added is not None
    assert f"background:{DIFF_ADD_BG}" in added.group(1)
    assert removed is not None
    assert f"background:{DIFF_DEL_BG}" in removed.group(1)
    assert "<b>" not in page.replace("<b>approval needed</b>", "")
    checked = {colour for pair in (*TEXT_PAIRS, *GRAPHIC_PAIRS) for colour in pair}
    for colour in re.findall(r"(?<![-\w])color:((?:var\([^;']*?\)\)?|[^;']+))", page):
        assert colour in checked, colour
    for colour in re.findall(r"(?<![-\w])background:((?:var\([^;']*?\)\)?|[^;']+))", page):
        assert colour in checked, colour
    assert "no change" in description(row({"arguments": {}, DIFF_KEY: ""}))


def test_the_countdown_reads_an_injected_clock_and_says_where_to_answer_after() -> None:
    clock = Clock(1_000.0)
    shown = row(expires_at=1_272.0, clock=clock)
    assert "answer within 4:32" in shown.countdown.value
    clock.now = 1_271.5
    assert shown.tick()
    assert "answer within 0:01" in shown.countdown.value
    clock.now = 1_272.0
    assert not shown.tick()
    assert "no answer in time: the approval stays pending" in shown.countdown.value
    assert "hostkit approvals approve apr_1" in shown.countdown.value
    assert row().countdown.value == ""  # no deadline known: no countdown


async def test_the_countdown_ticks_on_the_loop_and_stops_when_answered() -> None:
    clock = Clock(1_000.0)
    shown = row(expires_at=1_060.0, clock=clock)
    shown.start_countdown()
    assert "answer within 1:00" in shown.countdown.value
    clock.now = 1_001.0
    with anyio.fail_after(3):
        while "answer within 0:59" not in shown.countdown.value:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    ticker = shown._ticker
    assert ticker is not None
    assert not ticker.done()
    shown.close("approved once")
    assert shown._ticker is None
    await asyncio.sleep(0)
    assert ticker.cancelled()
    assert shown.countdown.value == ""
    assert shown.status.value == "approved once"


# -- through a real notebook Host -------------------------------------------------------


def writer_config(tmp_path: Path) -> Any:
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path / "ws")},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                "assistant": {
                    "provider": "test",
                    "memory": False,
                    "builtins": ["files.write"],
                    "policy": {"allow": ["*"], "ask": ["files.write"]},
                }
            },
        },
        base_dir=tmp_path,
    )


@pytest.fixture
async def writer(tmp_path: Path) -> AsyncIterator[hn.NotebookHost]:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.md").write_text("one\ntwo\n")
    model = ScriptedModel(
        [
            CallTools(("files_write", {"path": "notes.md", "content": "one\nTWO\n"})),
            Reply("rewrote it"),
            CallTools(("files_write", {"path": "fresh.md", "content": "a\nb\n"})),
            Reply("wrote it"),
        ]
    )
    config = writer_config(tmp_path)
    nb = await hn.start(config, capabilities=capabilities(model, config=config))
    try:
        yield nb
    finally:
        await nb.aclose()


async def test_a_file_overwrite_asks_with_its_diff_and_a_new_file_without(
    writer: hn.NotebookHost, tmp_path: Path
) -> None:
    view = writer.chat("rewrite notes.md")
    shown = await view.approval()
    assert shown is not None
    page = description(shown)
    assert "-two" in page
    assert "+TWO" in page
    assert "the file exists" in page
    assert re.search(r"answer within [45]:\d\d", shown.countdown.value)  # the Host's 300 s
    shown.approve_once.click()
    assert (await view).outcome == "completed"
    assert (tmp_path / "ws" / "notes.md").read_text() == "one\nTWO\n"
    assert shown.countdown.value == ""
    fresh = writer.chat("write fresh.md")
    asked = await fresh.approval()
    assert asked is not None
    page = description(asked)
    assert "the file exists" not in page
    assert "<pre" in page
    assert "a\nb\n" in page
    asked.deny.click()
    await fresh


def approval(view: dict[str, Any]) -> PendingApproval:
    return PendingApproval(
        "apr_1", "ses_1", "turn_1", "test:alice", "assistant", "rev", "files.write",
        "call_1", view, "fp", "rule", "pending",
        None, None, None, "2025-01-01T00:00:00.000Z", None,
    )  # fmt: skip


def test_the_panel_pretty_prints_the_redacted_view_and_draws_its_diff() -> None:
    view = {
        "effect": "files.write",
        "arguments": {"path": "n.md", "content": "<i>a</i>\nb"},
        DIFF_KEY: DIFF,
    }
    panel = ApprovalsPanel(ApprovalRows((approval(view),), "pending", False))
    page = panel.lines["apr_1"].widget.children[0].value
    blocks = re.findall(r"<pre[^>]*>(.*?)</pre>", page, re.S)
    assert blocks[0] == (
        "{\n"
        "  &quot;arguments&quot;: {\n"
        "    &quot;content&quot;: &quot;&lt;i&gt;a&lt;/i&gt;\\nb&quot;,\n"
        "    &quot;path&quot;: &quot;n.md&quot;\n"
        "  },\n"
        "  &quot;effect&quot;: &quot;files.write&quot;\n"
        "}"
    )
    assert "hostkit-diff" in page
    assert "+TWO &lt;b&gt;" in page


@tool("desk.stamp")
async def stamp(ctx: ToolContext, label: str) -> str:
    """Stamp a label."""
    return f"stamped {label}"


async def test_after_a_click_the_panel_shows_what_the_continuation_answered(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(
        [CallTools(("desk_stamp", {"label": "one"})), Reply("stamped <b>one</b>, all done")]
    )
    policy = {"allow": ["*"], "ask": ["desk.stamp"]}
    async with open_host(tmp_path, model, tools=[stamp], policy=policy) as host:
        paused = await host.turns.run(request("stamp it"))
        assert paused.outcome == "needs_user"
        operator = await host.operator("ops", reason="approval rows")
        panel = await ApprovalsPanel.load(host, operator)
        line = panel.lines[paused.pending_approval or ""]
        assert line.answer.value == ""
        line.buttons[0].click()
        await panel.join()
        assert "approved once; continuation completed" in line.outcome.value
        assert "the agent answered" in line.answer.value
        assert "stamped &lt;b&gt;one&lt;/b&gt;, all done" in line.answer.value
        assert "<b>one</b>" not in line.answer.value
        assert "  answered: stamped <b>one</b>, all done" in panel.text()
