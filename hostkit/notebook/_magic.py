"""``%load_ext hostkit`` and the ``%%agent`` cell magic.

With IPython's autoawait (every Jupyter kernel), an ``%%agent`` cell is
rewritten to ``await agent_cell(...)``: the cell ends once the kernel's Host
is open and the turn has started, so ``hn.current()`` is ready in the next
cell. The turn itself still runs as a task that fills the panel; the cell
never waits for it. Without autoawait the registered magic starts the Host as
a task instead.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hostkit.errors import UserError
from hostkit.notebook._host import start
from hostkit.notebook._turn import TurnView

__all__ = ["agent_cell", "load_ipython_extension"]

_MAGIC = "%%agent"


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%%agent [name]``: the cell's text is the message; the panel is the output."""

    def agent(line: str, cell: str) -> TurnView:
        name, message = _parse(line, cell)
        view = TurnView(message, name or "assistant")

        async def run() -> None:
            try:
                notebook = await start()
            except Exception as exc:
                view.finish(None, exc)
                return
            if name is None:
                view.agent = notebook.default_agent
            notebook.run_in(view, message)

        # The cell returns the panel now; the Host (started once) fills it. The panel
        # holds the task so it is not collected while it runs.
        view._task = asyncio.get_running_loop().create_task(run())
        return view

    def awaited(lines: list[str]) -> list[str]:
        """``%%agent`` cells as ``await agent_cell(line, cell)`` while autoawait is on."""
        if not lines or not getattr(ipython, "autoawait", False):
            return lines
        first = lines[0]
        if not first.startswith(_MAGIC) or first[len(_MAGIC) :][:1] not in ("", " ", "\t", "\n"):
            return lines
        line, cell = first[len(_MAGIC) :].strip(), "".join(lines[1:])
        call = f"agent_cell({line!r}, {cell!r})"
        return [f"await __import__('hostkit.notebook._magic', fromlist=['_']).{call}\n"]

    ipython.register_magic_function(agent, magic_kind="cell", magic_name="agent")
    cleanup = getattr(ipython, "input_transformers_cleanup", None)
    if cleanup is not None and not any(
        getattr(t, "__qualname__", "") == awaited.__qualname__ for t in cleanup
    ):
        cleanup.append(awaited)


async def agent_cell(line: str, cell: str) -> TurnView:
    """What an ``%%agent`` cell runs: open the kernel's Host, start the turn, return its panel.

    A Host that fails to open is shown in the panel, as the turn's error.
    """
    name, message = _parse(line, cell)
    view = TurnView(message, name or "assistant")
    try:
        notebook = await start()
    except Exception as exc:
        view.finish(None, exc)
        return view
    if name is None:
        view.agent = notebook.default_agent
    notebook.run_in(view, message)
    return view


def _parse(line: str, cell: str) -> tuple[str | None, str]:
    message = cell.strip()
    if not message:
        raise UserError("%%agent needs a message in the cell")
    return line.strip() or None, message
