"""InboxMonitor: the ChannelInbox's counts by state per channel, and its dead letters to requeue.

Drawn only from ``hostkit.inspect.InboxView``. Every read and every requeue
is a coroutine on the loop the monitor was built on, each under a deadline:
a click (which may arrive on a comm thread) only schedules work there, and
``watch()`` refreshes in a task that stops by itself, so the kernel's loop
(the Host's) is never blocked and never kept busy forever. A requeue asks
for a reason first; an empty one is refused in the row and nothing is sent.
A dead letter accepted without its text is not offered a requeue (the
inbox refuses it: it would only dead-letter again); its row says why.
Platform event keys and failure messages come from outside: every cell is
escaped, for HTML and, in the text/plain view, for a terminal (control and
bidi characters shown as escapes, as the CLI shows them).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import anyio
import ipywidgets as widgets

from hostkit.errors import HostkitError, InvalidValue, bounded
from hostkit.inbox import ChannelInbox
from hostkit.inspect import InboxView, inbox_view, one_line
from hostkit.notebook._approval_view import button_layout, buttons_layout
from hostkit.notebook._inspector_html import esc, panel_html, row_html, table_html, title_html
from hostkit.notebook._inspectors import _Inspector
from hostkit.notebook._loop_work import LoopWork
from hostkit.notebook._theme import ERROR, MUTED
from hostkit.types import ChannelCounts, InboundRecord, PrincipalScope, is_seconds

__all__ = ["NOT_REQUEUEABLE", "REASON_REQUIRED", "REQUEUE", "InboxMonitor"]

REQUEUE = "Requeue"
CONFIRM = "Requeue with this reason"
CANCEL = "Cancel"
REASON_REQUIRED = "a reason is required: it is recorded in the audit"
NOT_REQUEUEABLE = "cannot be requeued: accepted without its text"
# Deadline of one read or one requeue; bounds of an automatic refresh loop.
TIMEOUT_S = 10.0
MIN_EVERY_S = 0.2
MAX_WATCH_S = 3_600.0
_FAILURE_CHARS = 300
_EVENT_CHARS = 120
# A row's or the monitor's message (it may quote a reason or an error): one line in text/plain.
_SAID_CHARS = 400
_COUNT_COLUMNS = ("channel", "ready", "claimed", "completed", "dead-lettered")


def _counts_cells(c: ChannelCounts) -> tuple[str, ...]:
    return (
        c.channel_instance_id,
        str(c.ready),
        str(c.claimed),
        str(c.completed),
        str(c.dead_lettered),
    )


def _failure(record: InboundRecord) -> str:
    """``code: message``, one bounded line, control characters escaped (the text view too)."""
    text = record.failure_code or "-"
    if record.failure_message:
        text += ": " + record.failure_message
    return one_line(text, _FAILURE_CHARS)


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, HostkitError):
        return exc.message
    if isinstance(exc, TimeoutError):
        return f"no answer within {TIMEOUT_S:g} s"
    return bounded(str(exc) or type(exc).__name__, 300)


class _DeadLetter:
    """One dead letter: what failed, a Requeue button, then a reason field and its confirm.

    The button is disabled without an operator scope (``answerable``), and,
    with the reason as its tooltip, for a record accepted without its text.
    """

    def __init__(self, record: InboundRecord, answerable: bool) -> None:
        self.record = record
        self.answerable = answerable
        self.said = ""
        self.description = widgets.HTML(self._html())
        self.requeue = widgets.Button(description=REQUEUE, layout=button_layout())
        self.reason = widgets.Text(placeholder="why (recorded in the audit)")
        self.confirm = widgets.Button(
            description=CONFIRM, button_style="warning", layout=button_layout()
        )
        self.cancel = widgets.Button(description=CANCEL, layout=button_layout())
        self.form = widgets.HBox(
            [self.reason, self.confirm, self.cancel],
            layout=widgets.Layout(flex_flow="row wrap", align_items="center", display="none"),
        )
        self.offer()
        self.message = widgets.HTML("")
        self.widget = widgets.VBox(
            [
                self.description,
                widgets.HBox([self.requeue, self.message], layout=buttons_layout()),
                self.form,
            ],
            layout=widgets.Layout(border="1px solid #d0d7de", padding="4px", margin="2px 0"),
        )

    def _html(self) -> str:
        r = self.record
        event = esc(one_line(r.platform_event_key, _EVENT_CHARS))
        return (
            f"<div><code>{esc(r.inbound_id)}</code> <b>{esc(r.channel_instance_id)}</b>"
            f" <span style='color:{MUTED}'>event</span> <code>{event}</code>"
            f" <span style='color:{MUTED}'>after {r.attempt} attempt"
            f"{'' if r.attempt == 1 else 's'}, requeued {r.requeues} time"
            f"{'' if r.requeues == 1 else 's'}</span></div>"
            f"<div style='color:{ERROR}'>{esc(_failure(r))}</div>"
            + (
                f"<div style='color:{MUTED}'><i>{NOT_REQUEUEABLE}</i></div>"
                if r.unprocessable
                else ""
            )
        )

    @property
    def requeueable(self) -> bool:
        """A requeue can be asked for: an operator's scope, and a text a turn could answer."""
        return self.answerable and not self.record.unprocessable

    def offer(self) -> None:
        """The Requeue button as the record now allows (a refresh may change the record)."""
        self.requeue.disabled = not self.requeueable
        self.requeue.tooltip = NOT_REQUEUEABLE if self.record.unprocessable else ""
        if self.record.unprocessable:
            self.close_form()

    @property
    def asking(self) -> bool:
        """The reason field is open."""
        return bool(self.form.layout.display != "none")

    def ask(self) -> None:
        if self.record.unprocessable:  # a click that reaches the disabled button anyway
            self.tell(NOT_REQUEUEABLE, error=True)
            return
        self.form.layout.display = "flex"
        self.tell("")

    def close_form(self) -> None:
        self.form.layout.display = "none"

    def dismiss(self) -> None:
        """Cancel: the reason field closes, nothing is sent."""
        self.close_form()
        self.tell("")

    def tell(self, text: str, *, error: bool = False, strong: bool = False) -> None:
        self.said = text
        if not text:
            self.message.value = ""
        elif error:
            self.message.value = f"<span style='color:{ERROR}'>{esc(text)}</span>"
        elif strong:
            self.message.value = f"<b>{esc(text)}</b>"
        else:
            self.message.value = f"<i>{esc(text)}</i>"

    def set_busy(self, busy: bool) -> None:
        for button in (self.confirm, self.cancel):
            button.disabled = busy
        self.requeue.disabled = busy or not self.requeueable
        self.reason.disabled = busy

    def text(self) -> str:
        r = self.record
        line = (
            f"  {r.inbound_id}  {r.channel_instance_id}"
            f"  event {one_line(r.platform_event_key, _EVENT_CHARS)}"
            f"  attempts {r.attempt}  requeues {r.requeues}  {_failure(r)}"
        )
        if r.unprocessable:
            line += f"  ({NOT_REQUEUEABLE})"
        return line + (f"  [{one_line(self.said, _SAID_CHARS)}]" if self.said else "")


class InboxMonitor(_Inspector):
    """Counts by state per channel instance, and the dead letters, each with a Requeue button.

    ``scope`` (an operator scope) is what requeues act as: without it the
    buttons are disabled. Clicks and ``watch()`` schedule their work on the
    event loop that was running when the monitor was built. ``refresh()``
    reads again (bounded by ``TIMEOUT_S``); rows still dead-lettered keep
    their widgets, so a reason being typed survives a refresh. ``join()``
    waits for the work in flight.
    """

    # A class default: a monitor refused at construction is still closed by the widget's __del__.
    _watch: asyncio.Task[None] | None = None

    def __init__(
        self,
        inbox: ChannelInbox,
        view: InboxView,
        *,
        scope: PrincipalScope | None = None,
        limit: int = 50,
    ) -> None:
        self._work = LoopWork("an InboxMonitor")
        self.inbox, self.scope, self.limit = inbox, scope, limit
        self.model = view
        self.refreshed_at = time.time()
        self.lines: dict[str, _DeadLetter] = {}
        self.summary = widgets.HTML("")
        self.status = widgets.HTML("")
        self.status_text = ""
        self.refresh_button = widgets.Button(description="Refresh", layout=button_layout())
        self.refresh_button.on_click(lambda _: self._work.schedule(self._refresh_quietly))
        self.letters = widgets.VBox([])
        super().__init__(
            children=[
                self.summary,
                widgets.HBox([self.refresh_button, self.status], layout=buttons_layout()),
                self.letters,
            ]
        )
        self._show(view)

    @classmethod
    async def load(
        cls, inbox: ChannelInbox, *, scope: PrincipalScope | None = None, limit: int = 50
    ) -> InboxMonitor:
        """The monitor of ``inbox``; its Requeue buttons act as ``scope`` (an operator's)."""
        if not isinstance(inbox, ChannelInbox):
            raise InvalidValue(f"inbox must be a ChannelInbox, not {type(inbox).__name__}")
        with anyio.fail_after(TIMEOUT_S):
            view = await inbox_view(inbox, dead_letters=limit)
        return cls(inbox, view, scope=scope, limit=limit)

    # -- reading -----------------------------------------------------------------------

    async def refresh(self) -> InboxView:
        """Read the counts and dead letters again (``TimeoutError`` past ``TIMEOUT_S``)."""
        with anyio.fail_after(TIMEOUT_S):
            view = await inbox_view(self.inbox, dead_letters=self.limit)
        self._show(view)
        return view

    def watch(self, every_s: float = 2.0, *, for_s: float = 300.0) -> asyncio.Task[None]:
        """Refresh every ``every_s`` seconds for at most ``for_s`` (a task; ``stop()`` ends it).

        A failed read is shown and the next one is tried; a second ``watch``
        replaces the first.
        """
        if not is_seconds(every_s, high=MAX_WATCH_S) or every_s < MIN_EVERY_S:
            raise InvalidValue(f"every_s must be between {MIN_EVERY_S} and {MAX_WATCH_S:g}")
        if not is_seconds(for_s, high=MAX_WATCH_S):
            raise InvalidValue(f"for_s must be positive and at most {MAX_WATCH_S:g}")
        self.stop()
        self._watch = self._work.loop.create_task(self._watching(every_s, for_s))
        return self._watch

    def stop(self) -> None:
        """End ``watch()``'s refreshes (the widgets stay as they are)."""
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    @property
    def watching(self) -> bool:
        return self._watch is not None and not self._watch.done()

    async def _watching(self, every_s: float, for_s: float) -> None:
        with anyio.move_on_after(for_s):
            while True:
                await anyio.sleep(every_s)
                await self._refresh_quietly()

    async def _refresh_quietly(self) -> None:
        try:
            await self.refresh()
        except Exception as exc:  # shown; the monitor must outlive a failed read
            self._say(f"refresh failed: {_error_text(exc)}", error=True)

    def _show(self, view: InboxView) -> None:
        self.model = view
        self.refreshed_at = time.time()
        self.summary.value = _summary_html(view)
        kept: dict[str, _DeadLetter] = {}
        for record in view.dead_letters.records:
            line = self.lines.get(record.inbound_id)
            if line is None or line.record != record:
                line = self._line(record) if line is None else self._updated(line, record)
            kept[record.inbound_id] = line
        self.lines = kept
        empty = [] if kept else [widgets.HTML(panel_html("<i>no dead letters</i>"))]
        self.letters.children = [*(line.widget for line in kept.values()), *empty]

    def _line(self, record: InboundRecord) -> _DeadLetter:
        line = _DeadLetter(record, answerable=self.scope is not None)
        line.requeue.on_click(lambda _: line.ask())
        line.cancel.on_click(lambda _: line.dismiss())
        line.confirm.on_click(self._confirmed(line))
        return line

    def _updated(self, line: _DeadLetter, record: InboundRecord) -> _DeadLetter:
        line.record = record
        line.description.value = line._html()
        line.offer()
        return line

    # -- requeue -----------------------------------------------------------------------

    def _confirmed(self, line: _DeadLetter) -> Callable[[Any], None]:
        def confirmed(_: Any) -> None:
            if line.confirm.disabled or self.scope is None:
                return
            if line.record.unprocessable:  # a click that reaches it anyway: no round trip
                line.tell(NOT_REQUEUEABLE, error=True)
                return
            reason = line.reason.value.strip()
            if not reason:
                line.tell(REASON_REQUIRED, error=True)
                return
            line.set_busy(True)
            line.tell("requeueing…")
            self._work.schedule(lambda: self._requeue(line, reason))

        return confirmed

    async def _requeue(self, line: _DeadLetter, reason: str) -> None:
        assert self.scope is not None
        inbound_id = line.record.inbound_id
        try:
            with anyio.fail_after(TIMEOUT_S):
                record = await self.inbox.requeue(self.scope, inbound_id, reason=reason)
        except Exception as exc:  # shown in the row; the monitor must outlive any failure
            line.tell(f"error: {_error_text(exc)}", error=True)
            line.set_busy(False)
            return
        line.close_form()
        line.tell(f"requeued: {record.state}", strong=True)
        self._say(
            f"requeued {record.inbound_id} ({record.channel_instance_id}): {record.state}, "
            f"attempt {record.attempt}, requeued {record.requeues} time"
            f"{'' if record.requeues == 1 else 's'}; reason: {bounded(reason, 200)}"
        )
        await self._refresh_quietly()

    # -- plumbing ----------------------------------------------------------------------

    def _say(self, text: str, *, error: bool = False) -> None:
        self.status_text = text
        colour = ERROR if error else MUTED
        self.status.value = f"<span style='color:{colour}'>{esc(text)}</span>"

    async def join(self) -> None:
        """Wait for every click's work scheduled so far (its rows are then updated)."""
        await self._work.join()

    def close(self) -> None:
        self.stop()
        super().close()

    def html(self) -> str:
        """The counts panel's HTML (what the widget shows above the dead letters)."""
        return str(self.summary.value)

    def text(self) -> str:
        view = self.model
        totals = view.counts.totals
        lines = [
            f"inbox: {totals.ready} ready, {totals.claimed} claimed, {totals.completed} completed,"
            f" {totals.dead_lettered} dead-lettered"
        ]
        rows = [_COUNT_COLUMNS, *(_counts_cells(c) for c in view.counts.channels)]
        if view.counts.channels:
            widths = [max(len(row[i]) for row in rows) for i in range(len(_COUNT_COLUMNS))]
            lines.extend(
                "  "
                + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                for row in rows
            )
        shown = len(view.dead_letters.records)
        more = "+" if view.dead_letters.truncated else ""
        lines.append(f"dead letters ({shown}{more}):" if shown else "no dead letters")
        lines.extend(line.text() for line in self.lines.values())
        if self.status_text:
            lines.append(one_line(self.status_text, _SAID_CHARS))
        return "\n".join(lines)


def _summary_html(view: InboxView) -> str:
    totals = view.counts.totals
    parts = [
        title_html(
            "inbox",
            ("ready", str(totals.ready)),
            ("claimed", str(totals.claimed)),
            ("completed", str(totals.completed)),
            ("dead-lettered", str(totals.dead_lettered)),
        )
    ]
    if view.counts.channels:
        body = "".join(row_html(*_counts_cells(c)) for c in view.counts.channels)
        parts.append(table_html(_COUNT_COLUMNS, body))
    else:
        parts.append("<i>the inbox is empty</i>")
    shown = len(view.dead_letters.records)
    more = f" (the {shown} newest)" if view.dead_letters.truncated else ""
    parts.append(f"<div><b>dead letters</b>: {shown}{esc(more)}</div>")
    return panel_html(*parts)
