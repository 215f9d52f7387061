"""hostkit.notebook headless (no kernel: ipywidgets uses a dummy comm): chat returns a live
panel at once, events fill it, approvals are clicks, awaiting never hangs on a pending click."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path, PurePosixPath
from typing import Any

import anyio
import pytest

import hostkit.notebook as hn
from hostkit.effects import ToolContext, tool
from hostkit.host import parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import ModelRequest

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # a kernel's loop is asyncio


def notebook_config(tmp_path: Path, ask: list[str] | None = None) -> Any:
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                "assistant": {
                    "provider": "test",
                    "memory": False,
                    "policy": {"allow": ["*"], "ask": ask or []},
                }
            },
        },
        base_dir=tmp_path,
    )


stamped: list[str] = []


@tool("desk.stamp")
async def stamp(ctx: ToolContext, label: str) -> str:
    """Stamp a label."""
    stamped.append(label)
    return f"stamped {label}"


@pytest.fixture
async def notebook(tmp_path: Path) -> AsyncIterator[hn.NotebookHost]:
    stamped.clear()

    def decide(request: ModelRequest) -> CallTools | Reply:
        # Each turn: stamp once, then answer once the result is back.
        if request.messages[-1].role == "tool":
            return Reply("stamped it")
        return CallTools(("desk_stamp", {"label": "one"}))

    model = ScriptedModel([decide], repeat_last=True)
    nb = await hn.start(
        notebook_config(tmp_path, ask=["desk.stamp"]),
        capabilities=capabilities(model, tools=[stamp]),
    )
    try:
        yield nb
    finally:
        await nb.aclose()


async def until(predicate: Any) -> None:
    """Let the loop run (as an idle kernel does) until ``predicate`` holds, at most 5 s."""
    with anyio.fail_after(5):
        while not predicate():  # noqa: ASYNC110 (polling widget state, as a person looks)
            await asyncio.sleep(0.01)


async def test_start_is_idempotent_per_kernel(notebook: hn.NotebookHost) -> None:
    assert await hn.start() is notebook
    assert hn.current() is notebook


async def test_chat_returns_the_panel_at_once_and_a_click_resumes_the_turn(
    notebook: hn.NotebookHost,
) -> None:
    view = notebook.chat("stamp one")
    assert not view.done  # the cell has its panel before anything ran
    row = await view.approval()
    assert row is not None
    assert "desk.stamp" in row.widget.children[0].value
    assert stamped == []
    with pytest.raises(hn.ApprovalPending, match="click Approve or Deny"):
        await view
    row.approve_once.click()
    result = await view
    assert result.outcome == "completed"
    assert stamped == ["one"]
    assert all(button.disabled for button in row.buttons)
    text = view.text()
    assert "stamped it" in text
    assert "desk.stamp: succeeded" in text
    assert "approved once" in text
    assert "completed" in text


async def test_deny_is_a_click_too(notebook: hn.NotebookHost) -> None:
    view = notebook.chat("stamp one")
    await until(lambda: view.pending_row is not None)
    row = view.pending_row
    assert row is not None
    row.deny.click()
    result = await view
    assert result.outcome == "completed"
    assert stamped == []
    assert "desk.stamp: denied" in view.text()


async def test_approve_for_session_skips_the_next_prompt(notebook: hn.NotebookHost) -> None:
    first = notebook.chat("stamp one")
    await until(lambda: first.pending_row is not None)
    row = first.pending_row
    assert row is not None
    row.approve_session.click()
    await first
    second = notebook.chat("stamp again")
    result = await second
    assert result.outcome == "completed"
    assert second.rows == []
    assert stamped == ["one", "one"]


async def test_awaiting_a_turn_behind_one_waiting_for_a_click_refuses_naming_that_click(
    notebook: hn.NotebookHost,
) -> None:
    """The second turn waits for the session the first holds until its click: awaiting the
    second would block the kernel that has to deliver that click (ipykernel 6)."""
    first = notebook.chat("stamp one")
    row = await first.approval()
    assert row is not None
    second = notebook.chat("stamp two")
    with pytest.raises(hn.ApprovalPending, match="in this turn's panel") as refused:
        await asyncio.wait_for(second.wait(), 10)  # bounded: unfixed, it waits for the click
    assert refused.value.holder_turn_id == first.turn_id
    assert refused.value.approval_id == row.approval_id
    assert f"desk.stamp ({row.approval_id})" in str(refused.value)
    assert "`await nb.dashboard()`" in str(refused.value)
    row.approve_once.click()
    assert (await first).outcome == "completed"
    own = await second.approval()
    assert own is not None
    own.approve_once.click()
    assert (await second).outcome == "completed"
    assert stamped == ["one", "one"]


async def test_a_wait_under_way_is_refused_once_the_session_holder_asks(tmp_path: Path) -> None:
    """``await view`` began before the turn holding the session asked for its click: it wakes
    and refuses then, rather than sleeping through a click it stands in the way of."""
    stamped.clear()
    gate = asyncio.Event()

    async def decide(request: ModelRequest) -> CallTools | Reply:
        if request.messages[-1].role == "tool":
            return Reply("stamped it")
        await gate.wait()
        return CallTools(("desk_stamp", {"label": "one"}))

    model = ScriptedModel([decide], repeat_last=True)
    nb = await hn.start(
        notebook_config(tmp_path, ask=["desk.stamp"]),
        capabilities=capabilities(model, tools=[stamp]),
    )
    try:
        first = nb.chat("stamp one")
        second = nb.chat("stamp two")
        await until(lambda: "waiting for the session" in second.text())
        waiting = asyncio.ensure_future(second.wait())
        await asyncio.sleep(0.05)
        assert not waiting.done()  # nobody asks yet: the wait goes on
        gate.set()
        with pytest.raises(hn.ApprovalPending) as refused:
            await asyncio.wait_for(waiting, 10)
        assert refused.value.holder_turn_id == first.turn_id
        row = first.pending_row
        assert row is not None
        row.approve_once.click()
        own = await second.approval()
        assert own is not None
        own.approve_once.click()
        assert [(await first).outcome, (await second).outcome] == ["completed", "completed"]
    finally:
        gate.set()
        await nb.aclose()


async def test_an_unanswered_click_becomes_a_durable_approval_answered_later(
    tmp_path: Path,
) -> None:
    stamped.clear()
    model = ScriptedModel([CallTools(("desk_stamp", {"label": "late"})), Reply("done late")])
    config = parse_config(
        {
            "host": {
                "database": str(tmp_path / "hostkit.db"),
                "workspace": str(tmp_path),
                "approval_timeout_s": 0.2,
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                "assistant": {
                    "provider": "test",
                    "memory": False,
                    "policy": {"allow": ["*"], "ask": ["desk.stamp"]},
                }
            },
        },
        base_dir=tmp_path,
    )
    nb = await hn.start(config, capabilities=capabilities(model, tools=[stamp]))
    try:
        view = nb.chat("stamp late")
        await until(lambda: view.done)
        result = await view
        assert result.outcome == "needs_user"
        assert result.pending_approval
        assert view.rows[0].answered
        # The row says why it has no buttons left and where the approval is answered now.
        assert "no answer in time" in view.text()
        assert f"hostkit approvals approve {result.pending_approval}" in view.text()
        operator = await nb.host.operator("notebook", reason="answer a pending approval")
        later = await nb.host.approvals.answer(result.pending_approval, "approve_once", by=operator)
        assert later.outcome == "completed"
        assert stamped == ["late"]
    finally:
        await nb.aclose()


async def test_the_magic_starts_the_host_and_fills_its_panel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hostkit.toml").write_text(
        '[providers.test]\nkind = "scripted"\nscript = [{reply = "hello from the magic"}]\n'
        '[agents.assistant]\nprovider = "test"\nmemory = false\n'
    )

    class Shell:
        def __init__(self) -> None:
            self.magics: dict[str, Any] = {}

        def register_magic_function(self, fn: Any, magic_kind: str, magic_name: str) -> None:
            self.magics[(magic_kind, magic_name)] = fn

    shell = Shell()
    import hostkit

    hostkit.load_ipython_extension(shell)
    view = shell.magics[("cell", "agent")]("", "say hello\n")
    assert isinstance(view, hn.TurnView)
    try:
        await until(lambda: view.done)
        result = await view
        assert result.text == "hello from the magic"
    finally:
        current = hn.current()
        if current is not None:
            await current.aclose()


async def test_closing_withdraws_a_pending_prompt(notebook: hn.NotebookHost) -> None:
    view = notebook.chat("stamp one")
    await until(lambda: view.pending_row is not None)
    await notebook.aclose()
    await until(lambda: view.done)
    assert stamped == []
    assert view.rows[0].answered


async def test_a_second_start_with_another_configuration_is_refused(
    notebook: hn.NotebookHost, tmp_path: Path
) -> None:
    from hostkit.errors import ConfigError

    with pytest.raises(ConfigError, match=r"already runs .* with another configuration than"):
        await hn.start(notebook_config(tmp_path / "other"))


async def test_a_rerun_setup_cell_that_builds_its_capabilities_anew_is_told_so(
    notebook: hn.NotebookHost,
) -> None:
    """The same configuration with a new capabilities object (a setup cell run again that
    builds them inline): refused, and the message names what differs, not the
    configuration."""
    from hostkit.errors import ConfigError

    again = capabilities(ScriptedModel([Reply("hi")]))
    with pytest.raises(ConfigError) as refused:
        await hn.start(capabilities=again)
    assert "another capabilities object than this start's" in refused.value.message
    assert "configuration" not in refused.value.message
    assert await hn.start(capabilities=notebook.capabilities) is notebook


async def test_closing_a_panel_keeps_the_row_still_waiting_for_its_click(
    notebook: hn.NotebookHost,
) -> None:
    """The dashboard shows the rows waiting here: a closed one broke it until the
    approval timed out."""
    view = notebook.chat("stamp one")
    row = await view.approval()
    assert row is not None
    view.panel  # noqa: B018 (shown, as a cell shows it)
    view.close()
    assert row.widget.comm is not None
    dashboard = await notebook.dashboard()
    assert row in notebook.waiting_rows()
    assert dashboard.waiting == (row.widget,)
    row.approve_once.click()
    assert (await view).outcome == "completed"


async def test_a_rejected_turn_is_its_own_error_not_a_task_group_of_one(
    notebook: hn.NotebookHost,
) -> None:
    """``await view`` raises what a caller can catch, and the panel says the reason."""
    from hostkit.errors import TurnRejected

    view = notebook.chat("hi", agent="nope")
    with pytest.raises(TurnRejected, match="no agent named 'nope'"):
        await view
    assert "unhandled errors in a TaskGroup" not in repr(view)


async def test_an_inspector_for_an_agent_the_host_lacks_binds_no_session(
    notebook: hn.NotebookHost,
) -> None:
    """Asking for a misspelled agent's budget made (and kept) a session for it."""
    from hostkit.errors import InvalidValue

    operator = await notebook.host.operator("suite", reason="count sessions")
    before = await notebook.host.store.inspect.recent_sessions(operator)
    for inspect in (notebook.budget_inspector, notebook.context_inspector, notebook.tool_catalog):
        with pytest.raises(InvalidValue, match="no agent named 'asistant'; did you mean"):
            await inspect(agent="asistant")
    assert await notebook.host.store.inspect.recent_sessions(operator) == before


async def test_a_helper_given_the_wrong_type_says_so_in_one_typed_error(
    notebook: hn.NotebookHost,
) -> None:
    """Not a TypeError from difflib or pathlib, nor an AttributeError seven frames deep."""
    from hostkit.errors import InvalidValue

    for inspect in (notebook.budget_inspector, notebook.context_inspector, notebook.tool_catalog):
        with pytest.raises(InvalidValue, match="agent must be an agent's name, not int"):
            await inspect(agent=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidValue, match="inbox must be a ChannelInbox, not str"):
        await notebook.inbox_monitor("x", watch=False)  # type: ignore[arg-type]
    with pytest.raises(InvalidValue, match="inbox must be a ChannelInbox, not NoneType"):
        await hn.InboxMonitor.load(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidValue, match=r"path must be a str or os\.PathLike, not int"):
        await notebook.attach(5)  # type: ignore[arg-type]
    with pytest.raises(InvalidValue, match="unknown serve option bogus; the options are "):
        await notebook.serve(bogus=1, display=False)


async def test_a_second_start_in_another_conversation_is_refused(
    notebook: hn.NotebookHost,
) -> None:
    """Handing back the running Host sent the cell's turns to another conversation than
    the one it asked for."""
    from hostkit.errors import ConfigError

    with pytest.raises(ConfigError, match=r"already runs .* with another conversation than"):
        await hn.start(conversation="elsewhere")
    assert await hn.start(conversation=notebook.facts.conversation_key) is notebook
    # A bare start (what the %%agent magic calls) takes the running Host in any conversation.
    assert await hn.start() is notebook


async def test_any_text_path_like_is_attached(notebook: hn.NotebookHost, tmp_path: Path) -> None:
    note = tmp_path / "note.txt"
    note.write_text("hello\n")
    for path in (str(note), note, PurePosixPath(note), anyio.Path(note)):
        attached = await notebook.attach(path)  # type: ignore[arg-type]
        assert attached.media_type == "text/plain"


async def test_every_helper_says_the_notebook_host_is_closed(tmp_path: Path) -> None:
    from hostkit.errors import UserError

    caps = capabilities(ScriptedModel([Reply("hi")]))
    nb = await hn.start(notebook_config(tmp_path), capabilities=caps)
    await nb.aclose()
    calls = (
        nb.context_inspector,
        nb.budget_inspector,
        nb.tool_catalog,
        nb.dashboard,
        lambda: nb.inbox_monitor(watch=False),
        lambda: nb.core_history("assistant"),
        lambda: nb.attach(tmp_path / "x.txt"),
        nb.reload,
    )
    for call in calls:
        with pytest.raises(UserError, match="this NotebookHost is closed"):
            await call()
    with pytest.raises(UserError, match="this NotebookHost is closed"):
        nb.chat("hi")


async def test_the_same_file_given_as_text_starts_nothing_new(tmp_path: Path) -> None:
    from hostkit.errors import ConfigError

    toml = tmp_path / "hostkit.toml"
    toml.write_text(
        f'[host]\ndatabase = "{tmp_path / "hostkit.db"}"\nworkspace = "{tmp_path}"\n'
        '[providers.test]\nkind = "scripted"\n[agents.assistant]\nprovider = "test"\n'
    )
    caps = capabilities(ScriptedModel([Reply("hi")]))
    nb = await hn.start(toml, capabilities=caps)
    try:
        assert await hn.start(str(toml)) is nb
        assert await hn.start(str(tmp_path / "." / "hostkit.toml")) is nb
        other = tmp_path / "other"
        other.mkdir()
        (other / "hostkit.toml").write_text(toml.read_text())
        with pytest.raises(ConfigError, match="another configuration"):
            await hn.start(str(other / "hostkit.toml"))
    finally:
        await nb.aclose()


async def test_panels_cost_no_widgets_until_shown_and_close_cleanly(
    notebook: hn.NotebookHost,
) -> None:
    from ipywidgets.widgets.widget import _instances as live  # no public count exists

    before = len(live)
    view = notebook.chat("stamp one")
    row = await view.approval()
    assert row is not None
    row_widgets = len(live) - before  # the row's buttons exist
    row.approve_once.click()
    await view
    assert len(live) - before == row_widgets
    bundle = view._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "desk.stamp: succeeded" in bundle["text/plain"]
    view.close()
    assert len(live) == before


async def test_the_notebook_inspects_its_own_conversation(notebook: hn.NotebookHost) -> None:
    view = notebook.chat("stamp one")
    row = await view.approval()
    assert row is not None
    row.approve_once.click()
    result = await view
    scope = await notebook.scope()
    assert scope.session_id == result.session_id
    context = await notebook.context_inspector()
    assert context.model.turn_id == result.turn_id
    budget = await notebook.budget_inspector()
    assert budget.model.session_id == result.session_id
    assert notebook.last_view is view


async def test_two_cells_starting_at_once_share_one_host(tmp_path: Path) -> None:
    config = notebook_config(tmp_path)
    caps = capabilities(ScriptedModel([Reply("hi")]))
    first, second = await asyncio.gather(
        hn.start(config, capabilities=caps), hn.start(config, capabilities=caps)
    )
    try:
        assert first is second
    finally:
        await first.aclose()
