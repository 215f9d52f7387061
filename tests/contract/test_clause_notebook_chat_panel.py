"""The chat panel: Stop and ``view.cancel()`` end a running turn cancelled through its token; the
answer is Markdown without the model's HTML; a waiting line counts until the first token and then
stops; a usage footer; a *truncated* badge (and ``TurnResult.truncated``, stored) when the answer
hit the output limit."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import hostkit.notebook as hn
from hostkit.adapters.scripted import Reply, ScriptedModel
from hostkit.errors import StoreError
from hostkit.notebook._markdown import render_markdown
from hostkit.notebook._turn import TRUNCATED
from hostkit.testing import capabilities
from hostkit.types import ModelRequest, TurnCancelResult, TurnResult
from tests.contract.test_clause_turns_observer import HeldModel
from tests.contract.test_notebook import notebook_config, until

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # a kernel's loop is asyncio


@pytest.fixture
async def held(tmp_path: Path) -> AsyncIterator[tuple[hn.NotebookHost, ScriptedModel]]:
    """A Host whose model never answers until the turn is cancelled."""

    async def hold(request: ModelRequest) -> Reply:
        await asyncio.Event().wait()
        return Reply("never")

    model = ScriptedModel([hold], repeat_last=True)
    nb = await hn.start(notebook_config(tmp_path), capabilities=capabilities(model))
    try:
        yield nb, model
    finally:
        await nb.aclose()


async def answering(tmp_path: Path, *script: Any, model: str = "scripted-1") -> hn.NotebookHost:
    provider = ScriptedModel(list(script), model=model)
    return await hn.start(notebook_config(tmp_path), capabilities=capabilities(provider))


async def stored(nb: hn.NotebookHost, turn_id: str) -> TurnResult:
    state = await nb.host.store.turns.state(await nb.scope(), turn_id)
    assert state.result is not None
    return state.result


# -- Stop ------------------------------------------------------------------------------


async def test_the_stop_button_ends_the_running_turn_cancelled(
    held: tuple[hn.NotebookHost, ScriptedModel],
) -> None:
    nb, model = held
    view = nb.chat("Wait for me.")
    panel = view.panel  # displayed: the widgets exist
    await until(lambda: view.turn_id is not None and model.requests)
    stop = view.stop_button
    assert stop is not None
    assert not stop.disabled

    stop.click()  # what a person's click does
    await until(lambda: view.done)

    result = await view
    assert result.outcome == "cancelled"
    assert (await stored(nb, result.turn_id)).outcome == "cancelled"
    assert stop.disabled
    assert stop.description == "Stopped"  # no longer "Stopping…": the turn ended
    assert "cancelled" in view.text()
    assert panel is view.panel


async def test_a_stop_that_fails_says_so_and_the_button_can_be_clicked_again(
    held: tuple[hn.NotebookHost, ScriptedModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    nb, model = held
    view = nb.chat("Wait for me.")
    panel = view.panel
    await until(lambda: view.turn_id is not None and model.requests)
    stop = view.stop_button
    assert stop is not None
    cancel_token = nb.host.turns.cancel_token
    failures = [StoreError("the store is briefly unavailable")]

    async def flaky(*args: Any) -> TurnCancelResult:
        if failures:
            raise failures.pop()
        return await cancel_token(*args)

    monkeypatch.setattr(nb.host.turns, "cancel_token", flaky)

    stop.click()
    await until(lambda: view.stop_error is not None)
    assert isinstance(view.stop_error, StoreError)
    assert not view.done  # the turn still runs, and the panel does not claim it is stopping
    assert (stop.disabled, stop.description) == (False, "Stop")
    assert "stop failed: StoreError: the store is briefly unavailable" in view.text()

    stop.click()  # the second click stops it
    await until(lambda: view.done)
    assert (await view).outcome == "cancelled"
    assert panel is view.panel


async def test_a_stop_cancelled_before_it_ended_says_so(
    held: tuple[hn.NotebookHost, ScriptedModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    nb, model = held
    view = nb.chat("Wait for me.")
    await until(lambda: view.turn_id is not None and model.requests)
    stop = view.stop_button
    assert stop is not None
    cancel_token = nb.host.turns.cancel_token
    stuck = asyncio.Event()

    async def hangs(*args: Any) -> TurnCancelResult:
        stuck.set()
        await asyncio.Event().wait()
        return await cancel_token(*args)

    monkeypatch.setattr(nb.host.turns, "cancel_token", hangs)
    stop.click()
    await stuck.wait()
    for task in list(view._stops):
        task.cancel()  # the loop's shutdown, or anything else, cut the click's task short

    await until(lambda: view.stop_error is not None)
    assert isinstance(view.stop_error, asyncio.CancelledError)
    assert (stop.disabled, stop.description) == (False, "Stop")
    monkeypatch.setattr(nb.host.turns, "cancel_token", cancel_token)
    stop.click()
    await until(lambda: view.done)
    assert (await view).outcome == "cancelled"


def late_admissions(nb: hn.NotebookHost, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Admissions whose commit is durable but whose answer comes a second late, while a
    Stop waits 0.2 s for admission; the list collects each admitted turn id."""
    monkeypatch.setattr("hostkit.notebook._host._ADMISSION_WAIT_S", 0.2)
    leases = nb.host.turns._leases
    admit = leases.admit
    admitted: list[str] = []

    async def slow(request: Any, admission: Any, scope: Any) -> Any:
        outcome = await admit(request, admission, scope)
        admitted.append(admission.turn_id)
        await asyncio.sleep(1.0)
        return outcome

    monkeypatch.setattr(leases, "admit", slow)
    return admitted


async def test_a_stop_while_the_turn_is_admitted_never_strands_it_running(
    held: tuple[hn.NotebookHost, ScriptedModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stop gives up waiting for admission while the admission transaction has committed
    # (turn.started, the session lease) but has not returned: the turn must still end.
    nb, _ = held
    admitted = late_admissions(nb, monkeypatch)
    view = nb.chat("Stop me while I am admitted.", session="new")
    await until(lambda: admitted)

    answer = await view.cancel()

    assert answer == TurnCancelResult(admitted[0], "cancelled", "cancelled")
    state = await nb.host.store.turns.state(await nb.scope(), admitted[0])
    assert state.status != "running"
    assert state.result is not None
    assert state.result.outcome == "cancelled"
    assert view.done
    assert (await view).outcome == "cancelled"


async def test_a_stop_while_admitted_reads_the_turns_end_though_the_host_is_closing(
    held: tuple[hn.NotebookHost, ScriptedModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    # As above, while the Host shuts down: the panel reads the turn's recorded end by
    # its request, which a closing Host still answers (it refuses only new turns).
    nb, _ = held
    admitted = late_admissions(nb, monkeypatch)
    view = nb.chat("Stop me while the Host closes.", session="new")
    await until(lambda: admitted)
    closing = asyncio.get_running_loop().create_task(nb.host.turns.shutdown())

    await view.cancel()
    await closing

    assert view.done
    assert view.error is None
    result = await view
    assert (result.turn_id, result.outcome) == (admitted[0], "cancelled")


async def test_a_stop_before_admission_ends_the_panel_with_no_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The session is busy with another turn: the stopped one is never admitted.
    started = asyncio.Event()

    async def hold(request: ModelRequest) -> Reply:
        started.set()
        await asyncio.Event().wait()
        return Reply("never")

    monkeypatch.setattr("hostkit.notebook._host._ADMISSION_WAIT_S", 0.2)
    nb = await hn.start(
        notebook_config(tmp_path),
        capabilities=capabilities(ScriptedModel([hold], repeat_last=True)),
    )
    try:
        first = nb.chat("Hold the session.")
        await started.wait()
        second = nb.chat("Wait behind it.")

        assert await second.cancel() is None

        assert second.done
        assert second.turn_id is None
        assert "stopped before the turn was admitted" in str(second.error)
        assert not first.done  # the turn holding the session was not touched
        await first.cancel()
        assert (await first).outcome == "cancelled"
    finally:
        await nb.aclose()


async def test_view_cancel_goes_through_the_turns_token_and_is_idempotent(
    held: tuple[hn.NotebookHost, ScriptedModel],
) -> None:
    nb, model = held
    view = nb.chat("Wait for me.", session="new")
    await until(lambda: view.turn_id is not None and model.requests)
    assert view.turn_id is not None
    token = nb.host.turns.resolve(
        await nb.host.turns.cancellation_token(view.turn_id, await nb.scope())
    ).cancellation_token

    answer = await view.cancel()

    assert answer == TurnCancelResult(view.turn_id, "cancelled", "cancelled")
    assert view.done
    assert (await view).outcome == "cancelled"
    # The token the panel held is the turn's own: once the turn ended, it changes nothing.
    again = await nb.host.turns.cancel_token(token, await nb.scope())
    assert again.disposition == "already_terminal"
    assert await view.cancel() == TurnCancelResult(view.turn_id, "already_terminal", "cancelled")


async def test_a_finished_panel_has_its_stop_button_disabled(tmp_path: Path) -> None:
    nb = await answering(tmp_path, Reply("done"))
    try:
        view = nb.chat("Hi.")
        stop = view.stop_button
        assert stop is not None
        await view
        assert stop.disabled
        assert stop.description == "Stop"
        assert await view.cancel() == TurnCancelResult(
            view.turn_id or "", "already_terminal", "completed"
        )
    finally:
        await nb.aclose()


# -- Markdown ----------------------------------------------------------------------------

ANSWER = """# Plan

- one
- **two**

```
x < 1 && y > 2
```

<script>alert(1)</script> <img src=x onerror=alert(2)> [bad](javascript:alert(3)) \
[ok](https://example.com/a) ![pixel](https://tracker.example/p.png)"""


async def test_the_answer_is_rendered_markdown_without_the_models_html(tmp_path: Path) -> None:
    nb = await answering(tmp_path, Reply(ANSWER))
    try:
        view = nb.chat("Plan it.")
        view.panel  # noqa: B018 (shown, as a cell's output is)
        await view
        html = view.reply_html
    finally:
        await nb.aclose()

    assert "<h1>Plan</h1>" in html
    assert "<li>one</li>" in html
    assert "<li><strong>two</strong></li>" in html
    assert "<pre><code>x &lt; 1 &amp;&amp; y &gt; 2\n</code></pre>" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script" not in html
    assert "<img" not in html
    assert "javascript:" not in html.replace("[bad](javascript:alert(3))", "")
    assert 'href="https://example.com/a"' in html
    assert 'rel="noopener noreferrer nofollow"' in html
    assert 'tracker.example/p.png"' not in html.replace('href="https://tracker.example/p.png"', "")
    # The plain text keeps what the model said, and the rendering is the same every time.
    assert view.text().startswith("assistant: # Plan")
    assert render_markdown(ANSWER) == render_markdown(ANSWER)


@pytest.mark.parametrize(
    ("answer", "shown"),
    [
        ("\x1b[31mred\x1b[0m \u202eevil", "<p>\\x1b[31mred\\x1b[0m \\u202eevil</p>"),
        ("**b\x1b** and `c\u202ed`", "<strong>b\\x1b</strong> and <code>c\\u202ed</code>"),
        ("```py\u202e\nz\x1b[2J\n```", '<code class="language-py\\u202e">z\\x1b[2J\n</code>'),
        ("    indented\x07\n", "<pre><code>indented\\x07\n</code></pre>"),
        ("an entity &#x202e; too", "<p>an entity \\u202e too</p>"),
        ("[link](https://a.example 'ti\u202etle')", 'title="ti\\u202etle"'),
    ],
)
def test_controls_and_bidi_overrides_in_the_answer_are_shown_as_escapes(
    answer: str, shown: str
) -> None:
    """As everywhere else model text is shown (and as the CLI prints the answer): nothing
    in the panel may repaint or reorder what is read, and the Markdown still renders."""
    html = render_markdown(answer)
    assert shown in html
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", html)


def test_joined_emoji_and_right_to_left_words_in_the_answer_stay_as_written() -> None:
    answer = "family \U0001f468\u200d\U0001f469\u200d\U0001f467 and \u05e9\u05dc\u05d5\u05dd\u200f."
    assert render_markdown(answer) == f"<p>{answer}</p>\n"


# -- the waiting line ----------------------------------------------------------------------


async def test_the_waiting_line_counts_until_the_first_token_then_stops(tmp_path: Path) -> None:
    async def slow(request: ModelRequest) -> Reply:
        # A local model loading: five ticks long, so the line shows a second or more even
        # when a loaded machine delays every tick.
        await asyncio.sleep(2.5)
        return Reply("Here it is.")

    nb = await answering(tmp_path, slow)
    try:
        view = nb.chat("Hi.")
        seen: list[str] = []
        view.waiting_widget.observe(lambda change: seen.append(change["new"]), names="value")
        await asyncio.wait_for(view.wait(), 30)
        assert view.done
        after_end = len(seen)
        await asyncio.sleep(1.1)  # two more ticks' worth: nothing may change now
    finally:
        await nb.aclose()

    lines = [re.search(r"first token… (\d+\.\d) s", value) for value in seen]
    counted = [float(m.group(1)) for m in lines if m is not None]
    assert len(counted) >= 2
    assert counted == sorted(counted)
    assert counted[-1] >= 0.9
    assert seen[-1] == ""
    assert view.waiting_line == ""
    assert len(seen) == after_end
    assert "first token" not in view.text()  # not part of the stored text output


# -- usage footer and truncated --------------------------------------------------------------


async def test_the_usage_footer_shows_tokens_cost_and_duration(tmp_path: Path) -> None:
    nb = await answering(tmp_path, Reply("Short answer."))
    try:
        view = nb.chat("Hi.")
        result = await view
    finally:
        await nb.aclose()
    usage = result.usage
    footer = re.fullmatch(r"(\d+) input · (\d+) output tokens · cost \$0 · \d+\.\d s", view.footer)
    assert footer is not None
    assert (int(footer.group(1)), int(footer.group(2))) == (
        usage.input_tokens,
        usage.output_tokens,
    )
    assert view.text().splitlines()[-1] == (
        f"usage: {usage.input_tokens} input · {usage.output_tokens} output tokens · cost $0"
    )


async def test_an_unpriced_model_costs_unknown_not_zero(tmp_path: Path) -> None:
    nb = await answering(tmp_path, Reply("Hello."), model="mystery-model-7")
    try:
        view = nb.chat("Hi.")
        await view
    finally:
        await nb.aclose()
    assert "cost unknown" in view.footer


async def test_an_answer_cut_at_the_output_limit_is_marked_truncated(tmp_path: Path) -> None:
    nb = await answering(
        tmp_path, Reply("The answer stops mid", finish_reason="length"), Reply("Whole.")
    )
    try:
        cut = nb.chat("Tell me everything.")
        cut.panel  # noqa: B018
        cut_result = await cut
        whole = nb.chat("And briefly?")
        whole_result = await whole
        reloaded = await stored(nb, cut_result.turn_id)
        reloaded_whole = await stored(nb, whole_result.turn_id)
    finally:
        await nb.aclose()

    assert cut_result.outcome == "completed"
    assert cut_result.truncated
    assert reloaded.truncated
    assert reloaded == cut_result
    assert "<b>truncated</b>" in cut.outcome_html
    assert TRUNCATED in cut.text()
    assert not whole_result.truncated
    assert not reloaded_whole.truncated
    assert "truncated" not in whole.outcome_html
    assert TRUNCATED not in whole.text()


async def test_the_text_says_truncated_once_on_its_own_line_under_the_outcome(
    tmp_path: Path,
) -> None:
    nb = await answering(tmp_path, Reply("The answer stops mid", finish_reason="length"))
    try:
        view = nb.chat("Tell me everything.")
        await view
    finally:
        await nb.aclose()
    lines = view.text().splitlines()
    assert lines[-3:-1] == ["completed", TRUNCATED]
    assert view.text().count("the answer hit the output limit") == 1
    assert view.outcome_html.count("<b>truncated</b>") == 1  # the badge, once


async def test_a_result_stored_before_truncated_existed_loads_as_not_truncated() -> None:
    result = TurnResult("req", "turn", "ses", "assistant", "rev", "completed", "hi")
    old = result.to_json()
    del old["truncated"]
    assert TurnResult.from_json(old) == result
    assert not TurnResult.from_json(old).truncated
    assert TurnResult.from_json({**old, "truncated": True}).truncated


async def test_a_long_streamed_answer_is_rendered_in_batches_and_whole_at_the_end(
    tmp_path: Path,
) -> None:
    words = " ".join(f"**w{i}**" for i in range(1500))  # 1,500 deltas, under the reply cap
    nb = await answering(tmp_path, Reply(words))
    try:
        view = nb.chat("Talk.")
        reply = view.panel.children[2]  # header, waiting line, answer
        renders: list[str] = []
        reply.observe(lambda change: renders.append(change["new"]), names="value")
        await view
    finally:
        await nb.aclose()

    assert 1 <= len(renders) < 150
    assert reply.value == view.reply_html == render_markdown_div(words)
    assert "<strong>w1499</strong>" in reply.value


def render_markdown_div(text: str) -> str:
    return f"<div class='hostkit-answer'>{render_markdown(text)}</div>"


# -- a turn waiting for its session ----------------------------------------------------


async def test_a_chat_waiting_for_its_session_says_which_turn_it_waits_for(
    tmp_path: Path,
) -> None:
    """Two chats of one conversation run one after the other: the second's panel says it
    waits for the first (not a silent panel), then answers."""
    gate = HeldModel("first")
    nb = await hn.start(notebook_config(tmp_path), capabilities=capabilities(gate.model()))
    try:
        first = nb.chat("first")
        await asyncio.wait_for(gate.entered.wait(), 10)
        second = nb.chat("second")
        await until(lambda: "waiting for the session" in second.text())
        gate.release.set()
        done = await first
        assert f"• waiting for the session: {done.turn_id} runs in it" in second.text()
        assert (await second).outcome == "completed"
    finally:
        gate.release.set()
        await nb.aclose()
