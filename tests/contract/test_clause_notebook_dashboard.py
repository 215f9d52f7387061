"""The notebook's overview: SessionBrowser rows open their panels, ``nb.dashboard()`` gathers
sessions, running turns, pending approvals and budget in one widget, the NotebookHost has a
useful repr, and an ``%%agent`` cell ends with the kernel's Host open (``hn.current()``)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import ipywidgets as widgets
import pytest
from IPython.core.interactiveshell import InteractiveShell

import hostkit
import hostkit.notebook as hn
from hostkit.effects import ToolContext, tool
from hostkit.errors import NotFoundOrUnauthorized, ScopeError, UserError
from hostkit.host import Host, parse_config
from hostkit.inspect import SessionRows
from hostkit.notebook import NotebookHost
from hostkit.notebook._approver import WidgetApprover
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import ModelRequest, PrincipalScope, SessionRecord
from tests.contract._config_apply import write_config
from tests.hosts import open_host, request

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # a kernel's loop is asyncio


async def until(predicate: Any) -> None:
    """Let the loop run (as an idle kernel does) until ``predicate`` holds, at most 5 s."""
    with anyio.fail_after(5):
        while not predicate():  # noqa: ASYNC110 (polling widget state, as a person looks)
            await asyncio.sleep(0.01)


@tool("desk.stamp")
async def stamp(ctx: ToolContext, label: str) -> str:
    """Stamp a label."""
    return f"stamped {label}"


def stamp_then_answer(request: ModelRequest) -> CallTools | Reply:
    if request.messages[-1].role == "tool":
        return Reply("stamped it")
    return CallTools(("desk_stamp", {"label": "one"}))


@pytest.fixture
async def notebook(tmp_path: Path) -> AsyncIterator[hn.NotebookHost]:
    config = parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                "assistant": {
                    "provider": "test",
                    "memory": False,
                    "policy": {"allow": ["*"], "ask": ["desk.stamp"]},
                },
                "helper": {"provider": "test", "memory": False},
            },
        },
        base_dir=tmp_path,
    )
    model = ScriptedModel([stamp_then_answer], repeat_last=True)
    nb = await hn.start(config, capabilities=capabilities(model, tools=[stamp]))
    try:
        yield nb
    finally:
        await nb.aclose()


def html_of(widget: widgets.Widget) -> str:
    """Every HTML widget's value under ``widget``, depth first."""
    own = widget.value if isinstance(widget, widgets.HTML) else ""
    return own + "".join(html_of(child) for child in getattr(widget, "children", ()))


# -- SessionBrowser --------------------------------------------------------------------------


async def test_a_session_row_opens_that_sessions_context_and_budget_below_the_table(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([Reply("one"), Reply("two")])
    async with open_host(tmp_path, model) as host:
        first = await host.turns.run(request("hello", conversation="c1"))
        second = await host.turns.run(request("hello", conversation="c2"))
        operator = await host.operator("ops", reason="browse sessions")
        browser = await hn.SessionBrowser.load(host, operator)
        assert set(browser.buttons) == {first.session_id, second.session_id}
        assert browser.detail.children == ()
        browser.buttons[first.session_id].click()
        await browser.join()
        shown = browser.detail.children
        context, budget = (
            w for w in shown if isinstance(w, hn.ContextInspector | hn.BudgetInspector)
        )
        assert isinstance(context, hn.ContextInspector)
        assert isinstance(budget, hn.BudgetInspector)
        assert context.model.turn_id == first.turn_id
        assert budget.model.session_id == first.session_id
        assert browser.opened == first.session_id
        assert browser.buttons[first.session_id].button_style == "info"
        assert browser.text().endswith(f"opened {first.session_id}")
        # A click on a comm thread opens the other one; the first one's widgets are closed.
        await anyio.to_thread.run_sync(browser.buttons[second.session_id].click)
        await until(lambda: browser.opened == second.session_id)
        await browser.join()
        assert context.comm is None
        assert budget.comm is None
        budget = next(w for w in browser.detail.children if isinstance(w, hn.BudgetInspector))
        assert budget.model.session_id == second.session_id
        assert browser.buttons[first.session_id].button_style == ""


async def test_a_session_that_cannot_be_opened_shows_why_and_the_browser_still_works() -> None:
    rows = SessionRows((SessionRecord("ses_gone", "t", "active", None, "conversation"),), False)
    calls: list[str] = []

    async def refuse(session_id: str) -> Sequence[widgets.Widget]:
        calls.append(session_id)
        raise NotFoundOrUnauthorized()

    browser = hn.SessionBrowser(rows, open=refuse)
    browser.buttons["ses_gone"].click()
    await browser.join()
    assert calls == ["ses_gone"]
    assert browser.opened is None
    assert "not found" in html_of(browser.detail).lower()
    browser.buttons["ses_gone"].click()
    await browser.join()
    assert calls == ["ses_gone", "ses_gone"]


def test_a_browser_that_opens_sessions_needs_a_running_loop() -> None:
    async def never(session_id: str) -> Sequence[widgets.Widget]:
        return ()

    with pytest.raises(UserError, match="running event loop"):
        hn.SessionBrowser(SessionRows((), False), open=never)


def test_session_rows_use_theme_colours() -> None:
    rows = SessionRows((SessionRecord("ses_1", "t", "active", "notes", "conversation"),), False)
    page = html_of(hn.SessionBrowser(rows))
    assert "var(--jp-layout-color2" in page  # the header row
    assert "var(--jp-layout-color0" in page
    assert "var(--jp-ui-font-color1" in page
    assert not re.search(r"color:#(?:000|fff)", page)


# -- the dashboard ---------------------------------------------------------------------------


async def test_the_dashboard_shows_sessions_running_turns_approvals_and_budget(
    notebook: hn.NotebookHost,
) -> None:
    view = notebook.chat("stamp one")
    row = await view.approval()
    assert row is not None
    dashboard = await notebook.dashboard()
    assert isinstance(dashboard, widgets.VBox)
    assert isinstance(dashboard.tabs, widgets.Tab)
    assert dashboard.tabs.titles == ("Sessions", "Running", "Approvals", "Budget")
    sessions, running, pending, budget = dashboard.tabs.children
    assert isinstance(sessions, hn.SessionBrowser)
    # Pending: the row waiting for a click in the turn's panel (the same widget, so a click
    # here answers it), then the approvals stored as pending.
    assert dashboard.waiting == (row.widget,)
    assert row.widget in pending.children
    approvals = dashboard.approvals
    assert approvals in pending.children
    assert isinstance(approvals, hn.ApprovalsPanel)
    own = (await notebook.scope()).session_id
    assert [s.session_id for s in sessions.model.sessions] == [own]
    (turn,) = dashboard.running
    assert (turn.agent, turn.turn_id, turn.waiting_for) == ("assistant", view.turn_id, "desk.stamp")
    assert "waiting for approval of desk.stamp" in running.value
    assert isinstance(budget, hn.BudgetInspector)
    assert budget.model.session_id == own
    assert budget.model.totals.steps == 1
    assert approvals.model.approvals == ()  # the prompt is in the kernel, not yet stored
    assert dashboard.text().startswith(
        "1 sessions, 1 running turns, 1 pending approvals (1 waiting for a click here)"
    )
    assert str(notebook.host.config.database_path) in html_of(dashboard)
    row.approve_once.click()
    result = await view
    after = await notebook.dashboard()
    _, running, _, budget = after.tabs.children
    assert after.running == ()
    assert "no turns running" in running.value
    assert isinstance(budget, hn.BudgetInspector)
    assert budget.model.session_id == result.session_id
    assert budget.model.totals.steps == 2
    assert after.sessions.model.sessions[0].session_id == result.session_id
    text = after.text()
    assert text.startswith(
        "1 sessions, 0 running turns, 0 pending approvals (0 waiting for a click here), "
        "this session's cost $0"
    )
    for title in ("== Sessions", "== Running", "== Approvals", "== Budget"):
        assert title in text
    bundle = after._repr_mimebundle_()
    assert bundle is not None
    assert bundle["text/plain"] == text


# -- the NotebookHost's repr -----------------------------------------------------------------


async def test_the_notebook_host_repr_shows_database_agents_turns_and_approvals(
    notebook: hn.NotebookHost,
) -> None:
    database = str(notebook.host.config.database_path)
    assert repr(notebook).splitlines() == [
        "NotebookHost",
        f"  database: {database}",
        "  agents: assistant (default), helper",
        "  running turns: 0",
        "  approvals waiting for a click: 0",
        "  conversation: notebook/notebook",
    ]
    view = notebook.chat("stamp one")
    row = await view.approval()
    assert row is not None
    assert "  running turns: 1" in repr(notebook).splitlines()
    assert "  approvals waiting for a click: 1" in repr(notebook).splitlines()
    page = notebook._repr_html_()
    assert f">{database}</td>" in page
    assert ">assistant (default), helper</td>" in page
    assert "var(--jp-ui-font-color1" in page
    row.approve_once.click()
    await view
    assert "  running turns: 0" in repr(notebook).splitlines()
    await notebook.aclose()
    assert repr(notebook) == "NotebookHost\n  state: closed"


# -- %%agent ---------------------------------------------------------------------------------


@pytest.fixture
def shell() -> Any:
    ipython = InteractiveShell.instance()
    try:
        yield ipython
    finally:
        InteractiveShell.clear_instance()


async def test_an_agent_cell_ends_with_the_kernels_host_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shell: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hostkit.toml").write_text(
        '[providers.test]\nkind = "scripted"\nscript = [{reply = "hello from the cell"}]\n'
        '[agents.assistant]\nprovider = "test"\nmemory = false\n'
    )
    hostkit.load_ipython_extension(shell)
    hostkit.load_ipython_extension(shell)  # loading twice adds the rewrite once
    cell = "%%agent\nsay hello\n"
    code = shell.transform_cell(cell)
    assert code.startswith("await ")
    assert shell.should_run_async(cell, transformed_cell=code, preprocessing_exc_tuple=None)
    assert hn.current() is None
    try:
        outcome = await shell.run_cell_async(cell, store_history=False, transformed_cell=code)
        view = outcome.result
        assert isinstance(view, hn.TurnView)
        assert hn.current() is not None  # ready the moment the cell ends
        assert hn.current().last_view is view
        result = await view
        assert result.text == "hello from the cell"
    finally:
        current = hn.current()
        if current is not None:
            await current.aclose()
    # Without autoawait, the cell stays the registered magic (which starts the Host as a task).
    shell.autoawait = False
    assert "run_cell_magic('agent'" in shell.transform_cell(cell)
    assert shell.transform_cell("%%agentx\nhi\n").startswith("get_ipython().run_cell_magic")


async def test_an_empty_agent_cell_is_refused(shell: Any) -> None:
    hostkit.load_ipython_extension(shell)
    with pytest.raises(UserError, match="needs a message"):
        await hn._magic.agent_cell("", "  \n")  # type: ignore[attr-defined]


async def test_a_stop_token_read_after_the_host_closed_is_none_not_an_orphan_error(
    tmp_path: Path,
) -> None:
    """The Stop button's token is read beside its turn; when the turn ends and the Host
    closes first, the read ends quietly (an error in that task surfaced nowhere useful,
    and failed whatever ran the loop next)."""
    path = write_config(tmp_path, reply="done")
    async with Host.open(path) as host:
        nb = NotebookHost(host, WidgetApprover())
        result = await host.turns.run(request("hi"))
    assert await nb._token_of(result.turn_id, nb.default_agent) is None


async def test_a_stop_token_read_cut_by_the_host_closing_mid_scope_is_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store may close between reading the conversation's binding and signing its
    scope (a ScopeError, not StoreClosed): still no orphan error once it is closed, and
    the same error while the store is open is not swallowed."""
    path = write_config(tmp_path, reply="done")
    signing = ScopeError("the issuing store is closed")

    async def closing_scope(**_: object) -> PrincipalScope:
        raise signing

    async with Host.open(path) as host:
        nb = NotebookHost(host, WidgetApprover())
        result = await host.turns.run(request("hi"))
        monkeypatch.setattr(nb, "scope", closing_scope)
        with pytest.raises(ScopeError):
            await nb._token_of(result.turn_id, nb.default_agent)
    assert await nb._token_of(result.turn_id, nb.default_agent) is None
