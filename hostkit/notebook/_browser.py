"""SessionBrowser: the scope's sessions as rows whose *Open* button shows that session's panels.

The rows are a grid of widgets (a button cannot sit in an HTML table). A
click may arrive on a comm thread, so it is scheduled with
``call_soon_threadsafe`` on the loop the browser was built on; the opened
session's ContextInspector and BudgetInspector then replace whatever was open
below the table.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import ipywidgets as widgets

from hostkit.errors import HostkitError, UserError, bounded
from hostkit.host import Host
from hostkit.inspect import SessionRows, session_rows
from hostkit.notebook._inspector_html import esc, title_html
from hostkit.notebook._inspectors import BudgetInspector, ContextInspector, _Inspector
from hostkit.notebook._theme import BORDER, ERROR, HEAD_BG, SURFACE, TEXT
from hostkit.notebook._turn import close_tree
from hostkit.types import PrincipalScope, SessionRecord

__all__ = ["Opener", "SessionBrowser", "session_panels"]

Opener = Callable[[str], Awaitable[Sequence[widgets.Widget]]]

_COLUMNS = ("session", "created", "owner", "status", "title")
_WIDTHS = ("34ch", "26ch", "13ch", "9ch", "auto")
_ROW = (
    f"padding:3px 8px;border-bottom:1px solid {BORDER};color:{TEXT};white-space:nowrap;"
    "box-sizing:border-box;height:30px;line-height:23px;"
    "font-family:var(--jp-code-font-family, monospace);font-size:12px"
)


def session_panels(host: Host, scope: PrincipalScope) -> Opener:
    """What opening a session shows: its latest turn's context decisions, then its budget."""

    async def panels(session_id: str) -> Sequence[widgets.Widget]:
        context = await ContextInspector.load(host, scope, session_id=session_id)
        return (context, await BudgetInspector.load(host, scope, session_id))

    return panels


class SessionBrowser(_Inspector):
    """The scope's sessions, newest first; with ``open``, a button per row opens its panels.

    ``open(session_id)`` returns the widgets to show under the table
    (``load`` wires it to ``session_panels``). ``opened`` is the session
    shown; ``detail`` holds its widgets; ``join()`` waits for a click's load.
    """

    def __init__(self, rows: SessionRows, *, open: Opener | None = None) -> None:
        self.model = rows
        self._open = open
        self._loop: asyncio.AbstractEventLoop | None = None
        if open is not None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError as exc:
                raise UserError(
                    "a SessionBrowser that opens sessions must be built on a running event loop "
                    "(in a notebook cell or async code)"
                ) from exc
        self._tasks: set[asyncio.Task[None]] = set()
        self.opened: str | None = None
        self.buttons: dict[str, widgets.Button] = {}
        cells: list[widgets.Widget] = [widgets.HTML(""), _row(_COLUMNS, head=True)]
        for record in rows.sessions:
            cells.append(self._button(record) if open is not None else widgets.HTML(""))
            cells.append(_row(_values(record)))
        grid = widgets.GridBox(
            cells,
            layout=widgets.Layout(
                grid_template_columns="max-content auto", grid_gap="0px", overflow="auto"
            ),
        )
        title = title_html(f"sessions ({len(rows.sessions)}{'+' if rows.truncated else ''})")
        notes = [widgets.HTML("<i>no sessions</i>")] if not rows.sessions else []
        if rows.truncated:
            notes.append(widgets.HTML("<i>more sessions exist</i>"))
        self.table = widgets.VBox([widgets.HTML(title), grid, *notes])
        self.detail = widgets.VBox([])
        super().__init__(children=[self.table, self.detail])

    @classmethod
    async def load(cls, host: Host, scope: PrincipalScope, *, limit: int = 50) -> SessionBrowser:
        """The scope's newest sessions; a row's *Open* shows its context and budget inspectors."""
        return cls(await session_rows(host, scope, limit=limit), open=session_panels(host, scope))

    def _button(self, record: SessionRecord) -> widgets.Button:
        button = widgets.Button(
            description="Open",
            tooltip=f"show the context and budget of {record.session_id}",
            layout=widgets.Layout(width="auto", height="28px", margin="1px 4px"),
        )
        button.on_click(self._clicked(record.session_id))
        self.buttons[record.session_id] = button
        return button

    def _clicked(self, session_id: str) -> Callable[[Any], None]:
        def clicked(_: Any) -> None:
            loop = self._loop
            if loop is not None:
                loop.call_soon_threadsafe(self._start, session_id)

        return clicked

    def _start(self, session_id: str) -> None:
        assert self._loop is not None
        task = self._loop.create_task(self._show(session_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _show(self, session_id: str) -> None:
        assert self._open is not None
        for key, button in self.buttons.items():
            button.button_style = "info" if key == session_id else ""
        loading = widgets.HTML(f"<i>opening {esc(session_id)}…</i>")
        self._replace([loading])
        try:
            panels = list(await self._open(session_id))
        except Exception as exc:  # shown under the table; the browser must outlive any failure
            message = exc.message if isinstance(exc, HostkitError) else bounded(str(exc), 300)
            self._replace([widgets.HTML(f'<div style="color:{ERROR}">{esc(message)}</div>')])
            return
        self.opened = session_id
        self._replace([widgets.HTML(title_html("opened", ("session", session_id))), *panels])

    def _replace(self, children: list[widgets.Widget]) -> None:
        old = self.detail.children
        self.detail.children = tuple(children)
        for widget in old:
            close_tree(widget)

    async def join(self) -> None:
        """Wait until every *Open* clicked so far has shown its panels (or its error)."""
        await asyncio.sleep(0)  # let clicks scheduled with call_soon_threadsafe start
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def text(self) -> str:
        lines = [
            f"{s.session_id}  {s.created_at}  {s.owner_kind}  {s.status}  {s.title or ''}".rstrip()
            for s in self.model.sessions
        ]
        if self.opened is not None:
            lines.append(f"opened {self.opened}")
        return "\n".join(lines or ["no sessions"])


def _values(record: SessionRecord) -> tuple[str, ...]:
    return (
        record.session_id,
        record.created_at,
        record.owner_kind,
        record.status,
        record.title or "",
    )


def _row(values: tuple[str, ...], *, head: bool = False) -> widgets.HTML:
    """One row as fixed-width cells (ids and times have fixed lengths), so rows align."""
    background = HEAD_BG if head else SURFACE
    cells = "".join(
        f'<span style="display:inline-block;width:{width};overflow:hidden;'
        f'text-overflow:ellipsis;vertical-align:bottom;padding:0 8px 0 0">{esc(value)}</span>'
        for value, width in zip(values, _WIDTHS, strict=True)
    )
    weight = ";font-weight:600" if head else ""
    return widgets.HTML(
        f'<div class="hk-row" style="{_ROW};background:{background}{weight}">{cells}</div>'
    )
