"""TurnView: one turn as a persistent panel widget, filled by events, awaitable for its result.

The panel is displayed once (it is the cell's output) and only ever updated
afterwards: tasks never call ``display()``, which on ipykernel 6 would land
in whatever cell happens to be running.
"""

from __future__ import annotations

import asyncio
import html
import math
import re
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import Any

import anyio
import ipywidgets as widgets

from hostkit.errors import HostkitError, InvalidValue
from hostkit.inspect import cost_text, price_for, printable_text, prose_text
from hostkit.notebook._approval_view import (
    APPROVE_ONCE,
    APPROVE_SESSION,
    DENY,
    button_layout,
    buttons_layout,
    countdown_text,
    esc,
    request_html,
)
from hostkit.notebook._interrupt import running_cell
from hostkit.notebook._markdown import render_markdown
from hostkit.notebook._plain import plain_bundle
from hostkit.turns import TurnEvent
from hostkit.types import TurnCancelResult, TurnResult, is_seconds

__all__ = ["ApprovalPending", "ApprovalRow", "Pulse", "TurnView", "close_tree"]

_MAX_REPLY_CHARS = 20_000
_TICK_S = 0.5  # how often the waiting line counts up
# A streamed answer is re-rendered at most this often, or twice its last render's cost
# (20,000 characters of Markdown take ~0.15 s): the kernel's loop stays free for clicks.
_RENDER_EVERY_S = 0.1
TRUNCATED = "truncated: the answer hit the output limit"
# Where every approval this kernel waits for can be answered, whatever panel is gone.
DASHBOARD = "`await nb.dashboard()`"
# What a panel says of its turn when the kernel shuts down under it.
KERNEL_GONE = "the kernel shut down"
# How a panel stops its turn: the NotebookHost cancels it through the turn's token.
Canceller = Callable[["TurnView"], Awaitable[TurnCancelResult | None]]
_STATUS_COLOURS = {
    "succeeded": "#1a7f37",
    "completed": "#1a7f37",
    "needs_user": "#9a6700",
    "denied": "#cf222e",
    "failed": "#cf222e",
    "cancelled": "#6e7781",
}


class ApprovalPending(HostkitError):
    """``await view`` while the turn waits for a click: click first, then await.

    The click is the turn's own, or (``holder_turn_id``) that of the turn in
    this kernel holding the session the awaited turn waits for, which cannot
    end before it is answered. Awaiting in the cell would keep the kernel
    from delivering the click on most ipykernel versions, so the wait is
    refused instead of hanging.
    """

    def __init__(
        self, effect: str, *, approval_id: str | None = None, holder_turn_id: str | None = None
    ) -> None:
        self.effect = effect
        self.approval_id = approval_id
        self.holder_turn_id = holder_turn_id
        if holder_turn_id is None:
            message = (
                f"the turn is waiting for your approval of {effect}: click Approve or Deny "
                f"in its panel (or in {DASHBOARD}), then await it again"
            )
        else:
            asked = f"{effect} ({approval_id})" if approval_id else effect
            message = (
                f"the turn waits for its session, which turn {holder_turn_id} holds while it "
                f"waits for your approval of {asked}: click Approve or Deny in this turn's "
                f"panel, which shows that approval too (or in {DASHBOARD}), then await this "
                "one again"
            )
        super().__init__(message)


class Pulse:
    """Wakes every coroutine waiting on it now, and only those: a waiter takes ``event``
    before checking what it waits for, so a pulse between the check and its wait is
    never lost (an Event that is set and cleared again could be)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        # Called on every pulse, on the loop (a panel showing its holder's click).
        self.listeners: list[Callable[[], None]] = []

    def fire(self) -> None:
        event, self.event = self.event, asyncio.Event()
        event.set()
        for listener in list(self.listeners):
            listener()


class ApprovalRow:
    """One approval in a panel: the effect, its redacted view, three buttons and a countdown.

    ``expires_at`` (wall clock, ``ApprovalRequest.expires_at``) is when the
    runtime stops waiting; ``start_countdown()`` ticks the countdown every
    second until the row is answered, withdrawn or closed. ``clock`` is
    injectable so its text is deterministic in tests.
    """

    def __init__(
        self,
        effect: str,
        view: Mapping[str, Any],
        *,
        secret_names: Sequence[str] = (),
        warning: str | None = None,
        approval_id: str | None = None,
        expires_at: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if expires_at is not None and not is_seconds(expires_at):  # a wall-clock time
            raise InvalidValue("expires_at must be a time in seconds since the epoch")
        self.effect = effect
        # The durable approval this row asks (it is stored pending from the moment asked).
        self.approval_id = approval_id
        self.expires_at = expires_at
        self._clock = clock
        self.approve_once = widgets.Button(
            description=APPROVE_ONCE, button_style="success", layout=button_layout()
        )
        self.approve_session = widgets.Button(description=APPROVE_SESSION, layout=button_layout())
        self.deny = widgets.Button(description=DENY, button_style="danger", layout=button_layout())
        self.countdown = widgets.HTML("")
        self.status = widgets.HTML("<i>waiting for your answer</i>")
        self.widget = widgets.VBox(
            [
                widgets.HTML(_describe(effect, view, secret_names, warning)),
                widgets.HBox(
                    [self.approve_once, self.approve_session, self.deny, self.countdown],
                    layout=buttons_layout(),
                ),
                self.status,
            ],
            layout=widgets.Layout(border="1px solid #d4a72c", padding="4px", margin="4px 0"),
        )
        self.answered = False
        self.choice: str | None = None
        self._ticker: asyncio.Task[None] | None = None
        # Panels besides its own that show this row (a re-run cell's, waiting for the
        # session): its widget is closed only once no panel shows it any more.
        self.lent_to = 0
        self.owner_closed = False
        self.tick()

    @property
    def waiting(self) -> bool:
        """No button was clicked and the runtime has not withdrawn the question."""
        return not self.answered and self.choice is None

    @property
    def buttons(self) -> tuple[widgets.Button, widgets.Button, widgets.Button]:
        return (self.approve_once, self.approve_session, self.deny)

    def tick(self) -> bool:
        """Show the time left (or that it ran out); True while there is time left."""
        if self.expires_at is None or not self.waiting:
            self.countdown.value = ""
            return False
        now = self._clock()
        text = countdown_text(self.expires_at, now, self.approval_id)
        self.countdown.value = f"<span style='margin-left:8px'>{esc(text)}</span>"
        return now < self.expires_at

    def start_countdown(self) -> None:
        """Tick every second on the running loop until answered, withdrawn or closed."""
        if self.expires_at is None or self._ticker is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a row built outside a kernel): the text stays as first drawn
        self._ticker = loop.create_task(self._tick())

    async def _tick(self) -> None:
        while self.tick():
            left = (self.expires_at or 0.0) - self._clock()
            # Wake when the whole seconds left change, so the text never skips one.
            await asyncio.sleep(min(1.0, max(0.05, left - math.floor(left))))

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        text = f"approval of {self.effect}: {_strip(self.status.value)}"
        return plain_bundle(self.widget._repr_mimebundle_(**kwargs), text)

    def close(self, text: str) -> None:
        self.answered = True
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        for button in self.buttons:
            button.disabled = True
        self.countdown.value = ""
        self.status.value = esc(text)


class TurnView:
    """The live panel of one turn; ``await view`` gives its ``TurnResult``.

    The panel shows the streamed reply (Markdown, never the model's own
    HTML), how long the model has kept it waiting for its first token, each
    step and effect with its status, approval rows while the turn waits for
    a decision, and how it ended: the outcome, a *truncated* badge when the
    answer hit the output limit, and a usage footer. Its Stop button and
    ``await view.cancel()`` cancel the turn through its cancellation token.
    Its widgets are built when it is first displayed (a turn nobody shows
    costs no widgets); until then, and after, the state lives here.
    Awaiting while an approval is open raises ``ApprovalPending`` instead of
    blocking the kernel.
    """

    def __init__(self, message: str, agent: str) -> None:
        self.message = message
        self.agent = agent
        self.turn_id: str | None = None
        self.result: TurnResult | None = None
        self.error: BaseException | None = None
        self.rows: list[ApprovalRow] = []
        self._reply: list[str] = []
        self._reply_chars = 0
        self._steps: list[tuple[str, str | None]] = []
        self._outcome = "<i>running…</i>"  # how it ended, without the *truncated* badge
        self._badge = ""
        self._panel: _Panel | None = None
        self._done = asyncio.Event()
        self._asking = asyncio.Event()
        self.admitted = asyncio.Event()  # set once the turn has an id, or has ended without one
        self._task: asyncio.Task[Any] | None = None
        # The cell that made this panel: the kernel's interrupt of it stops the turn.
        self.cell: object | None = running_cell()
        self._began = time.monotonic()
        self.waiting_line = ""  # the elapsed time until the model's first token
        self._answered = False
        self._ticker: asyncio.Task[None] | None = None
        self._canceller: Canceller | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stops: set[asyncio.Task[Any]] = set()
        self.stopping = False
        self.stop_error: BaseException | None = None  # why the last stop failed, if it did
        self._priced: list[float | None] = []  # the cost of each provider call, if priced
        self._next_render = 0.0
        # Where the current model step's text starts in ``_reply`` (the final answer's, at the end).
        self._step_from = 0
        self._text_step: object = None
        self._render_later: asyncio.TimerHandle | None = None
        self.footer = ""
        # The turn holding the session this one waits for (from ``turn.waiting``), the
        # other panels of its Host by turn id, and the pulse any of them fires when it
        # asks for a click: ``wait()`` refuses while the holder's click is awaited.
        self._holder: str | None = None
        self._panels: Callable[[str], TurnView | None] = lambda turn_id: None
        self._asked = Pulse()
        # The holder's rows this panel shows too (its click is the only way on), by holder.
        self.borrowed: list[tuple[str, ApprovalRow]] = []
        # Why each of this turn's prompts went away, and the step that said it was asked.
        self._withdrawn: dict[str, str] = {}
        self._asking_step: dict[str, tuple[int, str]] = {}
        self.orphaned = False  # the kernel shut down under the turn

    @classmethod
    def board(cls, title: str) -> TurnView:
        """A panel that belongs to no single turn (approval rows from elsewhere)."""
        view = cls(title, "host")
        view._outcome = ""
        return view

    # -- what the cell shows -------------------------------------------------------

    @property
    def panel(self) -> widgets.VBox:
        """The panel widget (built on first use)."""
        if self._panel is None:
            self._panel = _Panel(self)
        return self._panel.box

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return plain_bundle(self.panel._repr_mimebundle_(**kwargs), self.text(), prose=True)

    @property
    def stop_button(self) -> widgets.Button:
        """The panel's Stop button (builds the panel)."""
        self.panel  # noqa: B018
        assert self._panel is not None
        return self._panel.stop

    @property
    def waiting_widget(self) -> widgets.HTML:
        """The line that counts the seconds until the model's first token (builds the panel)."""
        self.panel  # noqa: B018
        assert self._panel is not None
        return self._panel.waiting

    @property
    def reply_html(self) -> str:
        """The answer as the panel shows it: Markdown rendered, the model's own HTML escaped."""
        return _answer_html("".join(self._reply))

    @property
    def outcome_html(self) -> str:
        """How the turn ended, as the panel shows it (with its *truncated* badge)."""
        return self._outcome + self._badge

    def close(self) -> None:
        """Close the panel's widgets (their models leave the kernel and the saved notebook).

        A row still waiting for its click stays open: the dashboard and the
        approvals tab show it, and a closed widget cannot be shown again. So
        does a row another panel still shows (a re-run cell's, lent the holder's
        row): the last panel showing it closes it.
        """
        # Kept: a row still waiting, one another panel shows too, and the holder's.
        waiting = [row.widget for row in self.rows if row.waiting or row.lent_to]
        waiting += [row.widget for _, row in self.borrowed]
        if self._panel is not None:
            approvals = self._panel.approvals
            approvals.children = tuple(w for w in approvals.children if w not in waiting)
            close_tree(self._panel.box)
            self._panel = None
        for row in self.rows:
            row.owner_closed = True
            if not row.waiting and not row.lent_to:
                close_tree(row.widget)
        for _, row in self.borrowed:
            row.lent_to -= 1
            if row.owner_closed and not row.waiting and not row.lent_to:
                close_tree(row.widget)
        self.borrowed.clear()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def pending_row(self) -> ApprovalRow | None:
        """The approval waiting for a click, if any (``row.approve_once.click()``)."""
        return next((row for row in self.rows if row.waiting), None)

    def text(self) -> str:
        """The panel as plain text (for assertions and terminals).

        Without the waiting line and the duration, which change from run to
        run: a stored notebook's text output stays the same. The reply is
        escaped as prose (``prose_text``), every other line by
        ``printable_text``: no model text drives the terminal it is printed on.
        """
        reply = prose_text("".join(self._reply))
        lines = [f"{printable_text(self.agent)}: {reply}".rstrip()]
        lines += [printable_text(f"• {text}") for text, _ in self._steps]
        lines += [
            printable_text(f"approval {row.effect}: {_strip(row.status.value)}")
            for row in self.rows
        ]
        lines += [
            printable_text(f"approval {row.effect} (turn {holder}'s): {_strip(row.status.value)}")
            for holder, row in self.borrowed
        ]
        # The badge's words are the next line's.
        lines.append(printable_text(_strip(self._outcome)))
        if self.result is not None and self.result.truncated:
            lines.append(TRUNCATED)
        if self.result is not None:
            lines.append(f"usage: {self._usage_text()}")
        return "\n".join(lines)

    # -- stopping ------------------------------------------------------------------

    def bind(
        self,
        canceller: Canceller,
        *,
        panels: Callable[[str], TurnView | None] | None = None,
        asked: Pulse | None = None,
    ) -> None:
        """The Host's way to stop this turn; starts the waiting line's clock (on the loop).

        ``panels`` finds the Host's other panels by turn id and ``asked`` is
        the pulse they share: ``wait()`` learns of a click the session's
        holder waits for.
        """
        self._canceller = canceller
        if panels is not None:
            self._panels = panels
        if asked is not None:
            self._asked, old = asked, self._asked
            old.fire()  # a wait already under way takes the shared pulse
            asked.listeners.append(self._lend)
        self._loop = asyncio.get_running_loop()
        if self.cell is None:  # made before the Host (and its cell hooks) existed
            self.cell = running_cell()
        if self._panel is not None:
            self._panel.stop.disabled = self.done
        if not self._answered and not self.done:
            self._ticker = self._loop.create_task(self._tick())

    async def cancel(self) -> TurnCancelResult | None:
        """Stop the turn through its cancellation token; returns once its end is durable.

        ``cancelled`` (the turn ended cancelled, or ``indeterminate`` when an
        effect was running), ``already_terminal`` when it had ended; None when
        no turn was ever admitted (the panel then ends with that error).
        """
        if self._canceller is None:
            return None
        self._stopping()
        return await self._canceller(self)

    def cancel_soon(self) -> None:
        """``cancel()`` from any thread (a click may arrive on a comm thread)."""
        loop = self._loop
        if loop is None or self.done or self.orphaned:
            return
        loop.call_soon_threadsafe(self._cancel_task)

    def _cancel_task(self) -> None:
        task = asyncio.get_running_loop().create_task(self.cancel())
        self._stops.add(task)
        task.add_done_callback(self._stop_ended)

    def _stop_ended(self, task: asyncio.Task[Any]) -> None:
        """A stop that raised, or was cancelled, says so on the panel; Stop can be clicked again.

        Nothing awaits a click's task: without this its error would vanish
        and the panel would show "Stopping…" over a turn that still runs.
        """
        self._stops.discard(task)
        error = (
            asyncio.CancelledError("the stop was cancelled")
            if task.cancelled()
            else task.exception()
        )
        if error is None or self.done:
            return
        self.stop_error = error
        self.stopping = False
        self._step(f"stop failed: {type(error).__name__}: {error}", _STATUS_COLOURS["failed"])
        if self._panel is not None:
            self._panel.stop.disabled = False
            self._panel.stop.description = "Stop"

    def _stop_text(self) -> str:
        """What the Stop button says: "Stopping…" once clicked, "Stopped" once the turn
        ended stopped (one that completed first says "Stop", disabled)."""
        if not self.stopping:
            return "Stop"
        if not self.done:
            return "Stopping…"
        ended = self.result.outcome if self.result is not None else None
        return "Stopped" if ended in (None, "cancelled", "indeterminate") else "Stop"

    def _stopping(self) -> None:
        if self.done or self.stopping:
            return
        self.stopping = True
        if self._panel is not None:
            self._panel.stop.disabled = True
            self._panel.stop.description = self._stop_text()

    # -- the waiting line ----------------------------------------------------------

    async def _tick(self) -> None:
        while not self._answered and not self.done:
            seconds = time.monotonic() - self._began
            self._set_waiting(f"waiting for the model's first token… {seconds:.1f} s")
            await asyncio.sleep(_TICK_S)

    def _first_token(self) -> None:
        """The model answered (or the turn ended): the waiting line goes, and its clock stops."""
        if self._answered:
            return
        self._answered = True
        if self._ticker is not None:
            self._ticker.cancel()
        self._set_waiting("")

    def _set_waiting(self, line: str) -> None:
        self.waiting_line = line
        if self._panel is not None:
            self._panel.waiting.value = _waiting_html(line)

    async def approval(self, timeout_s: float = 30.0) -> ApprovalRow | None:
        """Wait (bounded) until the turn asks for an approval; None if it ends without asking.

        Safe to await in a cell: it needs no click to return.
        """
        if not is_seconds(timeout_s, high=86_400):  # NaN fails inside anyio, inf never returns
            raise InvalidValue("timeout_s must be in (0, 86400] seconds")
        with anyio.move_on_after(timeout_s):
            while self.pending_row is None and not self._done.is_set():
                self._asking.clear()
                await self._asking.wait()
        return self.pending_row

    def __await__(self) -> Generator[Any, None, TurnResult]:
        return self.wait().__await__()

    async def wait(self) -> TurnResult:
        """The result once the turn ends; ``ApprovalPending`` while a click is awaited.

        The click may be another panel's: that of the turn holding the session
        this one waits for. Its turn cannot end before the click, nor this one
        start; on ipykernel 6 the click cannot even arrive while a cell awaits.
        """
        while not self._done.is_set():
            asked = self._asked.event  # taken before the checks: no pulse is missed
            row = self.pending_row
            if row is not None:
                raise ApprovalPending(row.effect)
            holder = self._holding_row()
            if holder is not None:
                raise ApprovalPending(
                    holder.effect, approval_id=holder.approval_id, holder_turn_id=self._holder
                )
            self._asking.clear()
            done = asyncio.ensure_future(self._done.wait())
            asking = asyncio.ensure_future(self._asking.wait())
            pulse = asyncio.ensure_future(asked.wait())
            try:
                await asyncio.wait({done, asking, pulse}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                done.cancel()
                asking.cancel()
                pulse.cancel()
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result

    def _holding_row(self) -> ApprovalRow | None:
        """The click the turn holding this one's session waits for, if it is this kernel's."""
        if self._holder is None:
            return None
        holder = self._panels(self._holder)
        return holder.pending_row if holder is not None and holder is not self else None

    # -- what the turn's task does -----------------------------------------------

    def apply(self, event: TurnEvent) -> None:
        """Update the state (and the panel, if shown) from one turn event."""
        data = event.data
        summary = bool(data.get("summary"))  # a compaction's summarizer call: not the answer
        if event.kind in ("text.delta", "provider.responded", "provider.completed") and not summary:
            self._first_token()
        if event.kind == "provider.responded":
            self._priced.append(_cost(data))
        if event.kind == "provider.started" or (
            event.kind == "text.delta" and data.get("step") != self._text_step
        ):
            self._text_step = data.get("step")
            self._step_from = len(self._reply)
        if event.kind == "turn.started":
            self.turn_id = event.turn_id
            self._holder = None  # admitted: it holds the session now
            self.admitted.set()
        elif event.kind == "text.delta":
            text = str(data.get("text", ""))
            if self._reply_chars < _MAX_REPLY_CHARS:
                self._reply.append(text[: _MAX_REPLY_CHARS - self._reply_chars])
                self._reply_chars += len(text)
                self._refresh_reply()
        elif event.kind == "provider.completed" and data.get("tool_calls"):
            called = data.get("effects_called") or data["tool_calls"]
            names = ", ".join(str(name) for name in called)
            self._step(f"step {data.get('step', 0)}: the model calls {names}", "#57606a")
        elif event.kind == "effect.completed":
            status = str(data.get("status", ""))
            self._step(f"{data.get('effect', '?')}: {status}", _STATUS_COLOURS.get(status))
        elif event.kind == "approval.pending":
            approval_id, effect = str(data.get("approval_id", "")), str(data.get("effect", "?"))
            self._asking_step[approval_id] = (len(self._steps), effect)
            self._step(
                f"{effect}: waiting for approval {approval_id}",
                _STATUS_COLOURS["needs_user"],
            )
            if approval_id in self._withdrawn:  # withdrawn before its event was applied
                self.withdrawn(approval_id, self._withdrawn[approval_id])
        elif event.kind == "turn.waiting":
            self._holder = str(data["holder_turn_id"]) if data.get("holder_turn_id") else None
            holder = self._holder or "another turn"
            self._step(f"waiting for the session: {holder} runs in it", "#57606a")
            self._asked.fire()  # a wait looks at the holder's clicks now (and _lend shows it)
        elif event.kind == "mcp.unavailable":
            reason = data.get("detail") or data.get("state", "")
            self._step(f"MCP server {data.get('server', '?')} unavailable: {reason}", "#57606a")

    def _lend(self) -> None:
        """Show the click the session's holder waits for in this panel too.

        Re-running a cell replaces the holder's panel with this one: without
        its row here, the only buttons that let this turn start would be gone.
        One widget shown in two places is one row: a click in either answers it.
        """
        if self.done or self.turn_id is not None or self._holder is None:
            return
        row = self._holding_row()
        if row is None or any(shown is row for _, shown in self.borrowed):
            return
        self.borrowed.append((self._holder, row))
        row.lent_to += 1
        self._step(
            f"turn {self._holder} waits for your approval of {row.effect}"
            f" ({row.approval_id or 'not recorded'}): answer it here",
            _STATUS_COLOURS["needs_user"],
        )
        if self._panel is not None:
            self._panel.approvals.children = (*self._panel.approvals.children, row.widget)

    def withdrawn(self, approval_id: str, reason: str) -> None:
        """This turn's prompt went away: the step that said it waits, and the outcome that
        names the approval, say why instead (answered elsewhere, void, still pending)."""
        self._withdrawn[approval_id] = reason
        asked = self._asking_step.get(approval_id)
        if asked is not None:
            index, effect = asked
            self._steps[index] = (_cut(f"{effect}: approval {approval_id}: {reason}", 300), None)
            if self._panel is not None:
                children = list(self._panel.steps.children)
                children[index] = _step_widget(*self._steps[index])
                self._panel.steps.children = tuple(children)
        if self.done and self.result is not None and self.result.pending_approval == approval_id:
            self._outcome = _outcome_html(self.result, reason)
            if self._panel is not None:
                self._panel.outcome.value = self.outcome_html

    def shut_down(self) -> None:
        """The kernel shuts down under a running turn: Stop can do nothing any more, and the
        outcome says what becomes of the turn (its approval, if it waited, stays pending)."""
        if self.done or self.orphaned:
            return
        self.orphaned = True
        row = self.pending_row
        if row is not None:
            left = (
                f"approval {row.approval_id} stays pending: answer it with "
                f"`hostkit approvals approve {row.approval_id}`"
                if row.approval_id
                else "its approval was never recorded"
            )
            self._outcome = (
                f"<span style='color:{_STATUS_COLOURS['needs_user']}'><b>needs_user</b>"
                f"{esc(f' — {KERNEL_GONE} while the turn waited; {left}')}</span>"
            )
        elif self.turn_id is None:
            self._outcome = (
                f"<span style='color:{_STATUS_COLOURS['cancelled']}'><b>{KERNEL_GONE}</b>"
                f"{esc(' before this turn started: nothing ran or was recorded; send it again')}"
                "</span>"
            )
        else:
            self._outcome = (
                f"<span style='color:{_STATUS_COLOURS['cancelled']}'><b>{KERNEL_GONE}</b>"
                f"{esc(' while the turn ran: the next Host records how it ended')}</span>"
            )
        with_listeners = self._asked.listeners
        if self._lend in with_listeners:
            with_listeners.remove(self._lend)
        if self._ticker is not None:
            self._ticker.cancel()
        self.waiting_line = ""
        if self._panel is not None:
            self._panel.waiting.value = ""
            self._panel.outcome.value = self.outcome_html
            self._panel.stop.disabled = True
            self._panel.stop.description = "Stop"

    def add_row(self, row: ApprovalRow) -> None:
        self.rows.append(row)
        if self._panel is not None:
            self._panel.approvals.children = (*self._panel.approvals.children, row.widget)
        self._asking.set()
        self._asked.fire()  # turns waiting for this one's session refuse their waits now

    def finish(self, result: TurnResult | None, error: BaseException | None = None) -> None:
        if self._done.is_set():
            return
        self.result, self.error = result, error
        self._first_token()
        if self._lend in self._asked.listeners:
            self._asked.listeners.remove(self._lend)
        if result is not None:
            if result.outcome == "completed":
                self._settle_answer(result.text)
            withdrawn = self._withdrawn.get(result.pending_approval or "")
            self._outcome = _outcome_html(result, withdrawn)
            self._badge = _TRUNCATED_BADGE if result.truncated else ""
            seconds = time.monotonic() - self._began
            self.footer = f"{self._usage_text()} · {seconds:.1f} s"
        else:
            self._outcome = f"<span style='color:#cf222e'><b>error</b>: {esc(str(error))}</span>"
        if self._panel is not None:
            self._render_reply()  # the whole answer, whatever was deferred
            self._panel.outcome.value = self.outcome_html
            self._panel.footer.value = _footer_html(self.footer)
            self._panel.stop.disabled = True
        self._done.set()
        if self._panel is not None:
            self._panel.stop.description = self._stop_text()
        self._asking.set()
        self.admitted.set()

    def _settle_answer(self, text: str) -> None:
        """The final answer as recorded, where the stream lost some of it.

        A panel whose events came faster than it took them (a bounded
        buffer) or was shown late may have missed deltas: the result's text
        is the answer, in place of what streamed of its step.
        """
        earlier = sum(len(part) for part in self._reply[: self._step_from])
        whole = text[: max(0, _MAX_REPLY_CHARS - earlier)]
        if "".join(self._reply[self._step_from :]) != whole:
            self._reply[self._step_from :] = [whole]

    def _usage_text(self) -> str:
        """Tokens and cost of the turn (``unknown`` when a model it called has no price)."""
        assert self.result is not None
        usage = self.result.usage
        priced = self._priced
        cost = None if any(c is None for c in priced) else sum(c for c in priced if c is not None)
        return (
            f"{usage.input_tokens:,} input · {usage.output_tokens:,} output tokens"
            f" · cost {cost_text(cost)}"
        )

    def _step(self, text: str, colour: str | None) -> None:
        self._steps.append((_cut(text, 300), colour))
        if self._panel is not None:
            self._panel.add_step(text, colour)

    def _refresh_reply(self) -> None:
        """Re-render the answer in the panel: at once when due, else once, later."""
        if self._panel is None:
            return
        wait = self._next_render - time.monotonic()
        if wait <= 0 or self._loop is None:
            self._render_reply()
        elif self._render_later is None:
            self._render_later = self._loop.call_later(wait, self._render_reply)

    def _render_reply(self) -> None:
        if self._render_later is not None:
            self._render_later.cancel()
            self._render_later = None
        if self._panel is None:
            return
        started = time.monotonic()
        self._panel.reply.value = _answer_html("".join(self._reply))
        cost = time.monotonic() - started
        self._next_render = started + cost + max(_RENDER_EVERY_S, 2 * cost)


class _Panel:
    """The widgets of one TurnView, built from its state when first displayed."""

    def __init__(self, view: TurnView) -> None:
        self.header = widgets.HTML(f"<b>{esc(view.agent)}</b> ← {esc(_cut(view.message, 300))}")
        self.reply = widgets.HTML(_answer_html("".join(view._reply)))
        self.waiting = widgets.HTML(_waiting_html(view.waiting_line))
        self.steps = widgets.VBox([_step_widget(text, colour) for text, colour in view._steps])
        self.approvals = widgets.VBox(
            [row.widget for row in view.rows] + [row.widget for _, row in view.borrowed]
        )
        self.stop = widgets.Button(
            description=view._stop_text(),
            tooltip="Cancel this turn",
            icon="stop",
            disabled=view.done or view.stopping or view.orphaned or view._canceller is None,
        )
        self.stop.on_click(lambda _: view.cancel_soon())
        self.outcome = widgets.HTML(view.outcome_html)
        self.footer = widgets.HTML(_footer_html(view.footer))
        self.box = widgets.VBox(
            [
                self.header,
                self.waiting,
                self.reply,
                self.steps,
                self.approvals,
                widgets.HBox([self.stop, self.outcome]),
                self.footer,
            ],
            layout=widgets.Layout(border="1px solid #d0d7de", padding="6px"),
        )

    def add_step(self, text: str, colour: str | None) -> None:
        self.steps.children = (*self.steps.children, _step_widget(text, colour))


def close_tree(widget: widgets.Widget) -> None:
    """Close a widget, its children, and their layout and style models."""
    for child in getattr(widget, "children", ()):
        close_tree(child)
    for part in ("layout", "style"):
        model = getattr(widget, part, None)
        if isinstance(model, widgets.Widget):
            model.close()
    widget.close()


def _step_widget(text: str, colour: str | None) -> widgets.HTML:
    style = f" style='color:{colour}'" if colour else ""
    return widgets.HTML(f"<span{style}>• {esc(_cut(text, 300))}</span>")


def _describe(
    effect: str, view: Mapping[str, Any], secret_names: Sequence[str], warning: str | None = None
) -> str:
    return request_html(effect, view, secret_names, warning)


_TRUNCATED_BADGE = (
    " <span title='the answer hit the output limit' style='background:#fff8c5;color:#3b2300;"
    "border:1px solid #d4a72c;border-radius:8px;padding:0 6px;margin-left:4px'>"
    "<b>truncated</b>: the answer hit the output limit</span>"
)


def _outcome_html(result: TurnResult, withdrawn: str | None = None) -> str:
    """How the turn ended; a turn paused on an approval whose prompt went away says why
    (answered elsewhere, void, still pending) in place of "waiting for approval"."""
    error = f"approval {result.pending_approval}: {withdrawn}" if withdrawn else result.error
    detail = f" — {error}" if error else ""
    colour = _STATUS_COLOURS.get(result.outcome, "#24292f")
    return f"<span style='color:{colour}'><b>{result.outcome}</b>{esc(detail)}</span>"


def _answer_html(text: str) -> str:
    return f"<div class='hostkit-answer'>{render_markdown(text)}</div>" if text else ""


def _waiting_html(line: str) -> str:
    return f"<i style='color:#57606a'>{esc(line)}</i>" if line else ""


def _footer_html(footer: str) -> str:
    return f"<small style='color:#57606a'>{esc(footer)}</small>" if footer else ""


def _cost(data: Mapping[str, Any]) -> float | None:
    """What one provider call cost, from its ``provider.responded`` event (None: unpriced)."""
    price = price_for(str(data.get("model", "")))
    if price is None:
        return None
    return price.cost(
        input_tokens=int(data.get("input_tokens") or 0),
        output_tokens=int(data.get("output_tokens") or 0),
        cache_read_tokens=int(data.get("cache_read_tokens") or 0),
        cache_write_tokens=int(data.get("cache_write_tokens") or 0),
    )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _strip(value: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", value)).strip()
