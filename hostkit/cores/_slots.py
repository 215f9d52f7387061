"""SlotRuntime: a core's authored slots (bootstrap, input, output), run under a deadline.

The default runtime runs slots in the Host's own process. It is NOT a
sandbox: slot code can do anything the Host user can. What it guarantees is
the interface: a slot gets the ``ctx`` SDK (never a scope, lease, store or
authority), runs under ``limits.slot_timeout_s``, and whatever goes wrong —
the module cannot be imported, the function raises, times out or returns
the wrong type or text that is not valid (a lone surrogate) — fails the turn
with a bounded error that names the slot and the exception's type, never its
message (it may hold secrets).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import anyio

from hostkit._cancellation import is_cancellation
from hostkit.cores._imports import import_parents
from hostkit.cores._loaded import LoadedCore
from hostkit.cores._manifest import SlotsSpec
from hostkit.cores._sdk import AuthorContext
from hostkit.errors import RuntimeFailure, bounded
from hostkit.types import MAX_INPUT_CHARS, is_encodable

__all__ = ["MAX_BOOTSTRAP_CHARS", "MAX_OUTPUT_CHARS", "SlotFailed", "SlotName", "SlotRuntime"]

SlotName = Literal["bootstrap", "input", "output"]
MAX_BOOTSTRAP_CHARS = 100_000
MAX_OUTPUT_CHARS = 1_000_000


class SlotFailed(RuntimeFailure):
    """An authored slot could not be loaded, raised, timed out or returned the wrong type.

    The turn ends ``failed`` with this message: the slot's name and what went
    wrong, with an exception's type only.
    """

    def __init__(self, slot: str, problem: str) -> None:
        self.slot = slot
        super().__init__(bounded(f"slot {slot!r} {problem}", 300))


def _valid(slot: SlotName, value: str) -> str:
    """``value`` as a plain ``str`` when it is valid text; else ``SlotFailed``.

    Refused, not repaired: a lone surrogate (text read with ``surrogateescape``,
    a string cut mid-escape) is the core's bug, and kept it would fail every
    later request of the session, whichever revision runs then.
    """
    if not is_encodable(value):
        raise SlotFailed(
            slot, "must return valid text, not text holding a lone surrogate (undecodable bytes)"
        )
    return str.__str__(value)


class SlotRuntime:
    """The slots one core revision declares, imported from its ``agent/`` package on first use.

    ``root`` is the materialized revision (the directory holding the package
    dir ``package``); ``slots`` the manifest's ``module:function`` entries.
    Each function is imported once (in a worker thread, under the slot
    deadline) and kept. An async slot runs on the event loop under the
    deadline; a sync one in a worker thread that is abandoned at the deadline
    (it may go on running in the background: Python cannot stop a thread).
    A result that arrives after the deadline is never used.
    """

    def __init__(self, *, root: Path, package: str, slots: SlotsSpec, timeout_s: float) -> None:
        self._root = root
        self._package = package
        self._entries: dict[str, str] = {
            name: entry
            for name, entry in (
                ("bootstrap", slots.bootstrap),
                ("input", slots.input),
                ("output", slots.output),
            )
            if entry is not None
        }
        self._timeout_s = timeout_s
        self._loaded: dict[str, Callable[..., Any]] = {}

    @classmethod
    def of(cls, core: LoadedCore) -> SlotRuntime | None:
        """The slots ``core``'s manifest declares at its revision; None when it declares none."""
        slots = core.manifest.slots
        if slots.bootstrap is None and slots.input is None and slots.output is None:
            return None
        return cls(
            root=core.root,
            package=core.package,
            slots=slots,
            timeout_s=core.manifest.limits.slot_timeout_s,
        )

    def __repr__(self) -> str:
        return f"<SlotRuntime {self._package} {sorted(self._entries)}>"

    @property
    def package(self) -> str:
        return self._package

    def declared(self, slot: SlotName) -> bool:
        return slot in self._entries

    async def bootstrap(self, ctx: AuthorContext) -> str | None:
        """Text to add to this turn's instructions (None: nothing); None when not declared."""
        if "bootstrap" not in self._entries:
            return None
        value = await self._run("bootstrap", ctx)
        if value is None or value == "":
            return None
        if not isinstance(value, str) or len(value) > MAX_BOOTSTRAP_CHARS:
            raise SlotFailed(
                "bootstrap", f"must return text of at most {MAX_BOOTSTRAP_CHARS} or None"
            )
        return _valid("bootstrap", value)

    async def input(self, ctx: AuthorContext, text: str) -> str:
        """The normalized input (``text`` itself when no input slot is declared)."""
        if "input" not in self._entries:
            return text
        value = await self._run("input", ctx, text)
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_INPUT_CHARS:
            raise SlotFailed("input", f"must return non-empty text of at most {MAX_INPUT_CHARS}")
        return _valid("input", value)

    async def output(self, ctx: AuthorContext, text: str) -> str:
        """The final answer as persisted and returned (``text`` when not declared)."""
        if "output" not in self._entries:
            return text
        value = await self._run("output", ctx, text)
        if not isinstance(value, str) or len(value) > MAX_OUTPUT_CHARS:
            got = f"{len(value):,} characters" if isinstance(value, str) else type(value).__name__
            raise SlotFailed(
                "output", f"must return text of at most {MAX_OUTPUT_CHARS} characters, not {got}"
            )
        return _valid("output", value)

    async def _run(self, slot: SlotName, *args: Any) -> Any:
        with anyio.move_on_after(self._timeout_s) as deadline:
            function = await self._load(slot)
            try:
                if inspect.iscoroutinefunction(function):
                    value = await function(*args)
                else:
                    value = await anyio.to_thread.run_sync(
                        functools.partial(function, *args), abandon_on_cancel=True
                    )
                    if inspect.isawaitable(value):
                        value = await value
            except BaseException as exc:
                if is_cancellation(exc):
                    raise
                where = _raised_at(exc, self._root / self._package)
                raise SlotFailed(slot, f"failed ({type(exc).__name__}{where})") from None
        # By the clock, not by a caught cancellation: a slot that swallows it, or blocks
        # the loop (time.sleep in an async slot) so it never fires, returns late: refused.
        if deadline.cancel_called or anyio.current_time() >= deadline.deadline:
            raise SlotFailed(slot, f"did not finish within {self._timeout_s:g}s")
        return value

    async def _load(self, slot: SlotName) -> Callable[..., Any]:
        loaded = self._loaded.get(slot)
        if loaded is not None:
            return loaded
        module, _, name = self._entries[slot].partition(":")
        try:
            function: Any = await anyio.to_thread.run_sync(
                functools.partial(_import, self._root, self._package, module, name),
                abandon_on_cancel=True,
            )
        except BaseException as exc:
            if is_cancellation(exc):
                raise
            raise SlotFailed(slot, f"cannot be loaded ({type(exc).__name__})") from None
        if not callable(function):
            raise SlotFailed(slot, "cannot be loaded (not a function)")
        self._loaded[slot] = function
        return self._loaded[slot]


def _raised_at(exc: BaseException, package: Path) -> str:
    """`` at agent/<file>:<line>``: the last frame of the core's own code the exception
    passed (never its message, which may quote what the slot handled); "" if none."""
    where = ""
    frame = exc.__traceback__
    while frame is not None:
        path = Path(frame.tb_frame.f_code.co_filename)
        if path.is_relative_to(package):
            where = f" at agent/{path.relative_to(package)}:{frame.tb_lineno}"
        frame = frame.tb_next
    return where


def _import(root: Path, package: str, module: str, name: str) -> Any:
    """``<package>.<module>:<name>`` from the package dir under ``root`` (a worker thread).

    The package is registered under its revision-unique name straight from
    its directory, so nothing is added to ``sys.path`` and two revisions'
    same-named modules never meet.
    """
    import_parents(f"{package}.{module}", [str(root)])
    return getattr(importlib.import_module(f"{package}.{module}"), name)
