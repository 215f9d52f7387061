"""Ctrl-C in a command that holds a Host: stop soon, and say truly what was recorded.

Ctrl-C cancels the command, and a running turn then writes its end, shielded:
with another process holding the database's write lock, each such write would
wait the store's whole lock timeout and the command would ignore Ctrl-C for
that long. The waits are narrowed the moment the signal arrives (before the
cancellation unwinds anything), as ``Host.aclose`` narrows them when it begins.
A turn's end that could then not be written is said to be so, not "recorded".
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import anyio

from hostkit.authority import conversation_principal
from hostkit.cli._render import command_line
from hostkit.cli._turn import terminal_user
from hostkit.errors import HostkitError
from hostkit.host import Host
from hostkit.store import RuntimeStore, TurnState
from hostkit.types import PrincipalScope

__all__ = [
    "INTERRUPT_LOCK_WAIT_S",
    "interrupted_answer",
    "interrupted_turn",
    "waits_cut_short_on_interrupt",
]

# How long, from Ctrl-C, the store still waits for another process's lock in all.
INTERRUPT_LOCK_WAIT_S = 3.0
# How long the look for a turn after a Ctrl-C may take: a read, answered at once normally.
_LOOKUP_S = 3.0
# Said of a looked-up turn still ``running``: the store turned its end away (another
# process held the lock past the wait Ctrl-C left it); recovery ends it ``lost``.
_NOT_RECORDED = (
    "could not be recorded (the store was busy): this command's close, or else the next "
    "hostkit command to open the database, ends it lost"
)


@contextmanager
def waits_cut_short_on_interrupt(store: RuntimeStore) -> Iterator[None]:
    """While the block runs, SIGINT limits ``store``'s lock waits, then does what it did.

    Only in the event loop's thread (the only one Python delivers signals to)
    and over a handler that is Python code (asyncio's, which cancels the
    command); otherwise nothing changes.
    """
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return
    loop = asyncio.get_running_loop()

    def interrupted(number: int, frame: FrameType | None) -> None:
        # The limit moves timers on the event loop (PostgreSQL's waits): set there, not in
        # the middle of whatever the signal interrupted.
        loop.call_soon_threadsafe(store.limit_waits, INTERRUPT_LOCK_WAIT_S)
        previous(number, frame)

    signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is interrupted:
            signal.signal(signal.SIGINT, previous)


async def interrupted_turn(
    host: Host, conversation: str, request_id: str, *, config: Path | None
) -> str:
    """The line for a Ctrl-C while the terminal user's request ``request_id`` ran: whether
    its turn was admitted and whether its end was recorded (looked up shielded and
    bounded, so the answer is quick; "recorded" only when its record says it ended)."""
    principal = conversation_principal(terminal_user(conversation))
    looked, found = False, None
    with anyio.CancelScope(shield=True), anyio.move_on_after(_LOOKUP_S):
        try:
            found = await host.store.turns.find(principal, request_id)
            looked = True
        except HostkitError:
            pass
    sessions = command_line("sessions", config=config)
    if not looked:
        return f"interrupted: what became of the turn could not be looked up; `{sessions}` shows it"
    if found is None:
        return "interrupted before the turn started: nothing was recorded"
    if not found.terminal:
        return f"interrupted: the turn's end {_NOT_RECORDED}; `{sessions}` shows it"
    return f"interrupted: the turn stopped and was recorded as it ended; `{sessions}` shows it"


async def interrupted_answer(
    host: Host,
    approval_id: str,
    *,
    by: PrincipalScope,
    config: Path | None,
    agent: str | None = None,
) -> str:
    """The line for a Ctrl-C while an approval's answer or continuation ran: where it was
    left and whether its continuation's end was recorded (looked up shielded and bounded,
    as ``interrupted_turn``), and where to read more."""
    approval, continuation = None, None
    with anyio.CancelScope(shield=True), anyio.move_on_after(_LOOKUP_S):
        try:
            approval = await host.approvals.get(by, approval_id)
            if approval.continuation_turn_id is not None:
                continuation = await host.store.turns.state(by, approval.continuation_turn_id)
        except HostkitError:
            pass
    listing = command_line("approvals", "list", "--all", config=config)
    if approval is None:
        return f"interrupted: `{listing}` shows where approval {approval_id} was left"
    if approval.status == "pending":
        return f"interrupted before the answer was recorded: {approval_id} is still pending"
    if approval.awaiting_continuation:
        resume = command_line("approvals", "resume", approval_id, config=config, agent=agent)
        return f"interrupted: {approval_id} is {approval.status}, its call not run yet; `{resume}`"
    sessions = command_line("sessions", config=config)
    return f"interrupted: {approval_id} is {approval.status} and {_ended(continuation)}; " + (
        f"`{listing}` and `{sessions}` show them"
    )


def _ended(continuation: TurnState | None) -> str:
    """What the line says of a continuation turn's end, as its state (if read) says."""
    if continuation is None:
        return "what became of its continuation could not be looked up"
    if not continuation.terminal:
        return f"its continuation's end {_NOT_RECORDED}"
    return "its continuation was recorded as it ended"
