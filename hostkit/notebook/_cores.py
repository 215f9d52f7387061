"""CoreHistory: one Agent Core's revisions, promotions with their gates, and session pins.

Drawn only from ``hostkit.inspect.CoreHistoryView``: the commits from HEAD
with the live one marked, every recorded promotion, rollback and refused
promotion with a badge per gate (passed or failed, its detail on hover and
in the text view), the secret-safe security diff of an MCP change behind a
``<details>`` toggle, and which revision each session's latest turn ran on.
Commit messages, reasons, actors and gate details come from authors and
operators: every value is escaped for HTML and, in text/plain, drawn through
``one_line``. Times are ISO-8601 UTC. ``refresh()`` reads again under a
deadline; the Refresh button schedules it on the loop the widget was built
on (a click may arrive on a comm thread).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import anyio
import ipywidgets as widgets

from hostkit.errors import HostkitError, bounded
from hostkit.freeze import thaw
from hostkit.host import Host
from hostkit.inspect import CoreHistoryView, PinRow, core_history_of, one_line
from hostkit.notebook._approval_view import button_layout, buttons_layout, pre_html
from hostkit.notebook._inspector_html import esc, panel_html, row_html, table_html, title_html
from hostkit.notebook._inspectors import _Inspector
from hostkit.notebook._loop_work import LoopWork
from hostkit.notebook._theme import (
    BADGE_BG,
    BADGE_TEXT,
    DIFF_ADD_BG,
    DIFF_ADD_TEXT,
    DIFF_DEL_BG,
    DIFF_DEL_TEXT,
    ERROR,
    MUTED,
)
from hostkit.store import RuntimeStore
from hostkit.types import CoreEvent, GateOutcome

if TYPE_CHECKING:
    from hostkit.cores import CoreRegistry
__all__ = ["CoreHistory", "short", "when"]

# Deadline of one read (the registry reads Git off the loop; the store is one query each).
TIMEOUT_S = 10.0
SHORT = 12
_LINE = 160
_DETAIL = 300
_BADGE = "border-radius:8px;padding:0 6px;margin-right:4px;white-space:nowrap"
_ACTION_COLOURS = {
    "promote": (DIFF_ADD_TEXT, DIFF_ADD_BG),
    "rollback": (BADGE_TEXT, BADGE_BG),
    "refused": (DIFF_DEL_TEXT, DIFF_DEL_BG),
}


def short(revision: str | None) -> str:
    """A commit id as the tables show it: its first 12 hex digits, or ``-``."""
    return "-" if revision is None else revision[:SHORT]


def when(at: float) -> str:
    """``at`` (Unix seconds) as ISO-8601 UTC, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def _badge(text: str, colours: tuple[str, str], *, title: str = "") -> str:
    hover = f' title="{esc(title)}"' if title else ""
    return (
        f'<span class="hk-badge"{hover} style="color:{colours[0]};background:{colours[1]};'
        f'{_BADGE}">{esc(text)}</span>'
    )


def _gate_badge(gate: GateOutcome) -> str:
    colours = (DIFF_ADD_TEXT, DIFF_ADD_BG) if gate.passed else (DIFF_DEL_TEXT, DIFF_DEL_BG)
    mark = "passed" if gate.passed else "failed"
    return _badge(f"{gate.gate} {mark}", colours, title=bounded(gate.detail, _DETAIL))


def _gate_text(gate: GateOutcome) -> str:
    line = f"{gate.gate} {'passed' if gate.passed else 'FAILED'}"
    return line + (f" ({one_line(gate.detail, _DETAIL)})" if gate.detail else "")


def _diff_json(event: CoreEvent) -> str:
    return json.dumps(thaw(event.security_diff), indent=2, sort_keys=True, ensure_ascii=False)


def _event_html(event: CoreEvent, view: CoreHistoryView) -> str:
    summary = view.summary_of(event.revision)
    moved = f"{short(event.previous)} → {short(event.revision)}"
    head = (
        f"<div>{_badge(event.action, _ACTION_COLOURS[event.action])}"
        f"<code>{esc(moved)}</code>"
        + (f" {esc(one_line(summary, _LINE))}" if summary else "")
        + f' <span style="color:{MUTED}">by {esc(one_line(event.actor, _LINE))}'
        f" at {esc(when(event.at))}</span></div>"
    )
    gates = "".join(_gate_badge(gate) for gate in event.gates) or (
        f'<span style="color:{MUTED}">no gates</span>'
    )
    failed = "".join(
        f'<div style="color:{ERROR}">{esc(gate.gate)}: {esc(one_line(gate.detail, _DETAIL))}</div>'
        for gate in event.gates
        if not gate.passed and gate.detail
    )
    reason = (
        f'<div><span style="color:{MUTED}">reason</span> {esc(one_line(event.reason, _LINE))}</div>'
        if event.reason
        else ""
    )
    diff = (
        '<details class="hk-security-diff"><summary>security diff (MCP declarations)</summary>'
        f"{pre_html(_diff_json(event))}</details>"
        if event.security_diff
        else ""
    )
    return (
        f'<div class="hk-core-event" style="margin:4px 0">{head}<div>{gates}</div>'
        f"{failed}{reason}{diff}</div>"
    )


def _pin_cells(row: PinRow) -> tuple[str, ...]:
    pin = row.pin
    return (
        pin.session_id,
        short(pin.core_revision),
        "live" if row.live else "not live",
        pin.turn_id,
        when(pin.at),
    )


def view_html(view: CoreHistoryView) -> str:
    """The whole panel: status, revisions, events, session pins (everything escaped)."""
    status = view.status
    parts = [
        title_html(
            f"core {status.core_id}",
            ("ref", status.ref),
            ("live", short(status.live)),
            ("HEAD", short(status.head)),
        )
    ]
    if status.live is None:
        promote = f'hostkit core promote {status.core_id} --reason "..."'
        parts.append(
            f'<div style="color:{ERROR}">no live revision: the core is not available until '
            f"{esc(promote)}</div>"
        )
    live_badge = _badge("live", (BADGE_TEXT, BADGE_BG))
    revisions = "".join(
        f"<tr><td>{live_badge if r.live else ''}</td><td><code>{esc(short(r.sha))}</code></td>"
        f"<td>{esc(one_line(r.summary, _LINE))}</td><td>{esc(one_line(r.author, _LINE))}</td>"
        f"<td>{esc(when(r.at))}</td></tr>"
        for r in view.revisions
    )
    parts.append("<div><b>revisions</b> (from HEAD)</div>")
    parts.append(
        table_html(("", "revision", "summary", "author", "committed"), revisions)
        if view.revisions
        else "<i>no commits</i>"
    )
    parts.append("<div><b>promotions</b></div>")
    parts.extend(_event_html(event, view) for event in view.events)
    if not view.events:
        parts.append("<i>never promoted</i>")
    parts.append("<div><b>session pins</b> (the revision each session's latest turn ran on)</div>")
    parts.append(
        table_html(
            ("session", "revision", "", "turn", "at"),
            "".join(row_html(*_pin_cells(row)) for row in view.pins),
        )
        if view.pins
        else "<i>no turns yet</i>"
    )
    if view.truncated:
        parts.append(f"<i>only the newest are shown of: {esc(', '.join(view.truncated))}</i>")
    return panel_html(*parts)


def view_text(view: CoreHistoryView) -> str:
    """The panel as plain lines (text/plain, tests, terminals)."""
    status = view.status
    lines = [
        f"core {status.core_id}  ref {status.ref}  live {short(status.live)}"
        f"  HEAD {short(status.head)}",
        "revisions (from HEAD):",
    ]
    lines.extend(
        f"  {'*' if r.live else ' '} {short(r.sha)}  {one_line(r.summary, _LINE)}"
        + ("  (live)" if r.live else "")
        for r in view.revisions
    )
    lines.append("promotions:" if view.events else "promotions: none")
    for event in view.events:
        moved = f"{short(event.previous)} -> {short(event.revision)}"
        lines.append(
            f"  {event.action} {moved}  by {one_line(event.actor, _LINE)}  at {when(event.at)}"
        )
        lines.append("    gates: " + ("; ".join(_gate_text(g) for g in event.gates) or "none"))
        if event.reason:
            lines.append(f"    reason: {one_line(event.reason, _LINE)}")
        if event.security_diff:
            lines.append(f"    security diff: {one_line(event.security_diff, 2 * _DETAIL)}")
    lines.append("session pins:" if view.pins else "session pins: none")
    lines.extend("  " + "  ".join(_pin_cells(row)) for row in view.pins)
    if view.truncated:
        lines.append(f"(only the newest are shown of: {', '.join(view.truncated)})")
    return "\n".join(lines)


class CoreHistory(_Inspector):
    """A core's revisions (live marked), promotion events with gate badges, and session pins.

    ``model`` is the ``CoreHistoryView`` shown. ``refresh()`` reads it again
    (``TimeoutError`` past ``TIMEOUT_S``); the Refresh button does the same
    on the loop the widget was built on, and shows a failed read instead of
    raising. ``join()`` waits for a click's refresh.
    """

    def __init__(
        self, registry: CoreRegistry, store: RuntimeStore, view: CoreHistoryView, *, limit: int = 50
    ) -> None:
        self._work = LoopWork("a CoreHistory")
        self.registry, self.store, self.limit, self.model = registry, store, limit, view
        self.panel = widgets.HTML("")
        self.status = widgets.HTML("")
        self.status_text = ""
        self.refresh_button = widgets.Button(description="Refresh", layout=button_layout())
        self.refresh_button.on_click(lambda _: self._work.schedule(self._refresh_quietly))
        super().__init__(
            children=[
                self.panel,
                widgets.HBox([self.refresh_button, self.status], layout=buttons_layout()),
            ]
        )
        self._show(view)

    @classmethod
    async def load(cls, host: Host, core_id: str, *, limit: int = 50) -> CoreHistory:
        """The history of ``core_id`` on ``host`` (at most ``limit`` rows of each list)."""
        return await cls.load_from(host.cores, host.store, core_id, limit=limit)

    @classmethod
    async def load_from(
        cls, registry: CoreRegistry, store: RuntimeStore, core_id: str, *, limit: int = 50
    ) -> CoreHistory:
        """The history of ``core_id`` from a registry and its store (a Host is not needed)."""
        with anyio.fail_after(TIMEOUT_S):
            view = await core_history_of(registry, store, core_id, limit=limit)
        return cls(registry, store, view, limit=limit)

    async def refresh(self) -> CoreHistoryView:
        """Read the core's status, revisions, events and pins again."""
        with anyio.fail_after(TIMEOUT_S):
            view = await core_history_of(
                self.registry, self.store, self.model.core_id, limit=self.limit
            )
        self._show(view)
        return view

    async def _refresh_quietly(self) -> None:
        try:
            await self.refresh()
        except Exception as exc:  # shown; the widget must outlive a failed read
            self._say(f"refresh failed: {_error_text(exc)}", error=True)
            return
        self._say("")

    def _show(self, view: CoreHistoryView) -> None:
        self.model = view
        self.panel.value = view_html(view)

    async def join(self) -> None:
        """Wait for every click's refresh scheduled so far."""
        await self._work.join()

    def _say(self, text: str, *, error: bool = False) -> None:
        self.status_text = text
        colour = ERROR if error else MUTED
        self.status.value = f"<span style='color:{colour}'>{esc(text)}</span>" if text else ""

    def html(self) -> str:
        """The panel's HTML."""
        return str(self.panel.value)

    def text(self) -> str:
        text = view_text(self.model)
        return text + (f"\n{one_line(self.status_text, _LINE)}" if self.status_text else "")


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, HostkitError):
        return exc.message
    if isinstance(exc, TimeoutError):
        return f"no answer within {TIMEOUT_S:g} s"
    return bounded(str(exc) or type(exc).__name__, 300)
