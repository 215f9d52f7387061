"""A minimal Jupyter frontend over jupyter_client: execute cells, watch iopub, click widgets.

It does what JupyterLab does on the wire and nothing more: ``execute_request``
on the shell channel, every iopub message recorded with its arrival time,
widget models tracked from ``comm_open`` / ``update`` messages, and a click
sent as the ipywidgets ButtonView sends it (a ``comm_msg`` whose data is
``{"method": "custom", "content": {"event": "click"}}``).

Kernels come from a kernel spec: ``pinned`` is this venv's interpreter;
``oldest`` is the spec ``make kernel-oldest`` registers under
``.jupyter-kernels/`` (the oldest ipykernel the project claims to support).
"""

from __future__ import annotations

import json
import os
import queue
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

__all__ = ["Frontend", "KernelChoice", "Seen", "kernel_choices", "running_kernel"]

ROOT = Path(__file__).resolve().parents[2]
OLDEST_KERNEL_DIRS = ROOT / ".jupyter-kernels" / "share" / "jupyter" / "kernels"
OLDEST_KERNEL_NAME = "hostkit-oldest"
# `make test` builds the oldest kernel first and requires it (HOSTKIT_REQUIRE, tests/parts.py):
# there a missing spec is a failure, not a skip (a plain `pytest tests` without it skips).

T = TypeVar("T")


@dataclass(frozen=True)
class KernelChoice:
    """A kernel spec by name and the directory that holds it."""

    id: str
    name: str
    kernel_dirs: tuple[Path, ...]


def kernel_choices(spec_root: Path) -> dict[str, KernelChoice | str]:
    """The pinned kernel (written under ``spec_root``) and the oldest one, or why it is absent."""
    pinned = spec_root / "hostkit-pinned"
    pinned.mkdir(parents=True, exist_ok=True)
    (pinned / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "hostkit (pinned ipykernel)",
                "language": "python",
            }
        )
    )
    choices: dict[str, KernelChoice | str] = {
        "pinned": KernelChoice("pinned", "hostkit-pinned", (spec_root,)),
    }
    if (OLDEST_KERNEL_DIRS / OLDEST_KERNEL_NAME / "kernel.json").is_file():
        choices["oldest"] = KernelChoice("oldest", OLDEST_KERNEL_NAME, (OLDEST_KERNEL_DIRS,))
    else:
        choices["oldest"] = f"no {OLDEST_KERNEL_NAME} kernel spec: run `make kernel-oldest`"
    return choices


@dataclass(frozen=True)
class Seen:
    """One message as it arrived (``at`` is ``time.monotonic()`` in this process)."""

    at: float
    channel: str
    msg: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.msg["header"]["msg_type"])

    @property
    def parent_id(self) -> str | None:
        return self.msg.get("parent_header", {}).get("msg_id")

    @property
    def content(self) -> dict[str, Any]:
        return dict(self.msg["content"])


@dataclass
class Widget:
    """A widget model as the frontend knows it: its state, updated by ``update`` messages."""

    comm_id: str
    opened_at: float
    state: dict[str, Any]
    updates: list[tuple[float, dict[str, Any]]] = field(default_factory=list)


class Frontend:
    """Shell and iopub of one kernel, recorded; ``until`` waits (bounded) on what was seen."""

    def __init__(
        self, client: AsyncKernelClient, manager: AsyncKernelManager | None = None
    ) -> None:
        self.client = client
        self.manager = manager
        self.seen: list[Seen] = []
        self.widgets: dict[str, Widget] = {}
        self._changed = anyio.Event()

    # -- sending ----------------------------------------------------------------------

    async def interrupt(self) -> None:
        """Interrupt the kernel as JupyterLab's stop button does (SIGINT, by its spec's mode)."""
        assert self.manager is not None, "this frontend has no kernel manager"
        await self.manager.interrupt_kernel()

    def execute(self, code: str) -> str:
        """Send an execute_request; returns its msg_id at once (the reply comes later)."""
        return self.client.execute(code, store_history=True, allow_stdin=False)

    def click(self, comm_id: str) -> float:
        """Click a Button model exactly as ipywidgets' ButtonView does; returns when it was sent."""
        content = {"comm_id": comm_id, "data": {"method": "custom", "content": {"event": "click"}}}
        self.client.shell_channel.send(self.client.session.msg("comm_msg", content))
        return time.monotonic()

    # -- what was seen --------------------------------------------------------------

    def reply(self, msg_id: str) -> Seen | None:
        return next((s for s in self.seen if s.channel == "shell" and s.parent_id == msg_id), None)

    def stdout(self, msg_id: str) -> str:
        return "".join(
            s.content["text"]
            for s in self.seen
            if s.type == "stream" and s.parent_id == msg_id and s.content["name"] == "stdout"
        )

    def outputs(self, msg_id: str, *types: str) -> list[Seen]:
        return [s for s in self.seen if s.parent_id == msg_id and s.type in types]

    def started(self, msg_id: str) -> bool:
        """The kernel began running this request (its execute_input was published)."""
        return any(s.type == "execute_input" and s.parent_id == msg_id for s in self.seen)

    def button(self, description: str) -> Widget | None:
        """The newest Button model with this description."""
        found = [
            w
            for w in self.widgets.values()
            if w.state.get("_model_name") == "ButtonModel"
            and w.state.get("description") == description
        ]
        return found[-1] if found else None

    def first_update(self, comm_id: str, predicate: Callable[[dict[str, Any]], bool]) -> float:
        """When the kernel first sent an update of this model matching ``predicate`` (or inf)."""
        widget = self.widgets.get(comm_id)
        if widget is None:
            return float("inf")
        return next((at for at, state in widget.updates if predicate(state)), float("inf"))

    async def until(self, probe: Callable[[], T | None], *, timeout_s: float, what: str) -> T:
        """Wait for ``probe()`` to return something other than None, for at most ``timeout_s``."""
        try:
            with anyio.fail_after(timeout_s):
                while True:
                    changed = self._changed
                    value = probe()
                    if value is not None and value is not False:
                        return value
                    await changed.wait()
        except TimeoutError:
            raise AssertionError(
                f"waited {timeout_s} s for {what}; seen: {self._summary()}"
            ) from None

    def idle(self, msg_id: str) -> bool:
        """iopub said the kernel went idle after this request: all its outputs have arrived."""
        return any(
            s.type == "status" and s.parent_id == msg_id and s.content["execution_state"] == "idle"
            for s in self.seen
        )

    async def finished(self, msg_id: str, *, timeout_s: float) -> dict[str, Any]:
        """The execute_reply content of ``msg_id`` once its outputs are in; an error fails.

        Shell and iopub are separate sockets: the reply may overtake the cell's last
        outputs, so a frontend waits for iopub's ``idle`` too.
        """
        seen = await self.until(
            lambda: self.reply(msg_id) if self.idle(msg_id) else None,
            timeout_s=timeout_s,
            what="a reply and idle",
        )
        content = seen.content
        if content["status"] != "ok":
            trace = "\n".join(content.get("traceback", []))
            raise AssertionError(f"cell failed: {content.get('ename')}: {trace}")
        return content

    # -- readers --------------------------------------------------------------------

    async def read(self, channel: str) -> None:
        get = self.client.get_iopub_msg if channel == "iopub" else self.client.get_shell_msg
        while True:
            try:
                msg = await get(timeout=0.5)
            except queue.Empty:
                continue
            self._record(Seen(time.monotonic(), channel, msg))

    def _record(self, seen: Seen) -> None:
        self.seen.append(seen)
        content = seen.msg.get("content", {})
        if seen.type == "comm_open" and content.get("target_name") == "jupyter.widget":
            state = dict(content.get("data", {}).get("state", {}))
            self.widgets[content["comm_id"]] = Widget(content["comm_id"], seen.at, state)
        elif seen.type == "comm_msg" and content.get("comm_id") in self.widgets:
            data = content.get("data", {})
            if data.get("method") in ("update", "echo_update"):
                widget = self.widgets[content["comm_id"]]
                widget.state.update(data.get("state", {}))
                widget.updates.append((seen.at, dict(data.get("state", {}))))
        self._changed.set()
        self._changed = anyio.Event()

    def _summary(self) -> str:
        kinds = [f"{s.channel}:{s.type}" for s in self.seen[-30:]]
        return ", ".join(kinds)


@asynccontextmanager
async def running_kernel(
    choice: KernelChoice, *, cwd: Path, startup_timeout_s: float = 60.0
) -> AsyncIterator[Frontend]:
    """Start the kernel in ``cwd``, yield a Frontend reading it; always shut the kernel down."""
    specs = KernelSpecManager(
        kernel_dirs=[str(d) for d in choice.kernel_dirs], ensure_native_kernel=False
    )
    # IPC sockets, not loopback TCP ports: jupyter_client picks free ports and lets them
    # go before the kernel binds them, and the suite's other loopback servers could take
    # one meanwhile (the kernel then dies before its first reply). The socket path is
    # absolute: the kernel runs in ``cwd``, this process elsewhere.
    ipc = Path(tempfile.gettempdir()) / f"hostkit-kernel-{uuid.uuid4().hex}-ipc"
    manager = AsyncKernelManager(
        kernel_name=choice.name, kernel_spec_manager=specs, transport="ipc", ip=str(ipc)
    )
    env = {**os.environ, "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    env.pop("PYTEST_CURRENT_TEST", None)
    try:
        with anyio.fail_after(startup_timeout_s):
            await manager.start_kernel(cwd=str(cwd), env=env)
        client = manager.client()
        client.start_channels()
        try:
            with anyio.fail_after(startup_timeout_s):
                await client.wait_for_ready(timeout=startup_timeout_s)
            frontend = Frontend(client, manager)
            async with anyio.create_task_group() as readers:
                readers.start_soon(frontend.read, "iopub")
                readers.start_soon(frontend.read, "shell")
                try:
                    yield frontend
                finally:
                    readers.cancel_scope.cancel()
        finally:
            client.stop_channels()
    finally:
        if manager.has_kernel:
            with anyio.move_on_after(15, shield=True):
                await manager.shutdown_kernel(now=True)
