"""``%load_ext hostkit`` and the ``%%agent`` cell magic."""

from __future__ import annotations

import asyncio
from typing import Any

from hostkit.notebook._host import start
from hostkit.notebook._turn import TurnView

__all__ = ["load_ipython_extension"]


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%%agent [name]``: the cell's text is the message; the panel is the output."""

    def agent(line: str, cell: str) -> TurnView:
        name = line.strip() or None
        message = cell.strip()
        if not message:
            raise ValueError("%%agent needs a message in the cell")
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

    ipython.register_magic_function(agent, magic_kind="cell", magic_name="agent")
