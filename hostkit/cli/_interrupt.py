"""Ctrl-C, SIGTERM or SIGHUP in a command that holds a Host: stop soon, say truly what was recorded.

A service manager stops a command with SIGTERM (systemd, ``docker stop``, a CI
job's timeout) and a terminal that closes sends SIGHUP: each stops it as
Ctrl-C does, so a turn in flight ends in its own process (recorded) rather
than by a lease expiring in the next one. The first of them cancels the
command, and a running turn then writes its end, shielded: with another
process holding the database's write lock, each such write would wait the
store's whole lock timeout and the command would ignore the signal for that
long. The waits are narrowed the moment the signal arrives (before the
cancellation unwinds anything), as ``Host.aclose`` narrows them when it begins:
those of a store still opening too (a migration, a recovery under another
process's lock), which follows the command's limit from its first moment.
A turn's end that could then not be written is said to be so, not "recorded".
A second signal exits at once. The status is the shell's for a process the
first signal ended: 128 + its number (130, 143, 129).

``hostkit serve`` receives its signals itself (a first one drains the daemon)
and hands one that comes while its Host still opens to the same ``SignalStop``
(``command_stop``): the opening ends as a command's does, and it exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TypeVar

import anyio

from hostkit.authority import conversation_principal
from hostkit.cli._render import command_line
from hostkit.cli._turn import terminal_user
from hostkit.errors import HostkitError
from hostkit.host import Host
from hostkit.store import TurnState, WaitLimit, stores_opened_follow
from hostkit.types import PrincipalScope

__all__ = [
    "INTERRUPT_LOCK_WAIT_S",
    "STOP_SIGNALS",
    "CommandStop",
    "SignalStop",
    "command_stop",
    "interrupted_answer",
    "interrupted_turn",
    "signals_stop_the_command",
    "stoppable",
]

_T = TypeVar("_T")

# How long, from Ctrl-C, the store still waits for another process's lock in all.
INTERRUPT_LOCK_WAIT_S = 3.0
# Each stops a command that holds a Host as Ctrl-C does: a terminal's Ctrl-C, a service
# manager's stop, a terminal that closed.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# How long the look for a turn after a Ctrl-C may take: a read, answered at once normally.
_LOOKUP_S = 3.0
# Said of a looked-up turn still ``running``: the store turned its end away (another
# process held the lock past the wait Ctrl-C left it); recovery ends it ``lost``.
_NOT_RECORDED = (
    "could not be recorded (the store was busy): this command's close, or else the next "
    "hostkit command to open the database, ends it lost"
)


@dataclass
class CommandStop:
    """One command's run: its root task (what a stop signal cancels) and the signal that
    stopped it first, if one did (its exit status is then 128 + that number, or
    ``stopped_status`` for a command a stop signal ends as asked: ``serve``)."""

    task: asyncio.Task[object] | None = None
    signal: int | None = None
    stopped_status: int | None = None

    @property
    def status(self) -> int:
        if self.stopped_status is not None:
            return self.stopped_status
        return 128 + (self.signal or signal.SIGINT)


# The running command's ``CommandStop``: set in its root task, so every task it starts sees it.
_COMMAND: ContextVar[CommandStop | None] = ContextVar("hostkit_cli_command", default=None)


async def stoppable(main: Callable[[], Awaitable[_T]], command: CommandStop) -> _T:
    """Run ``main`` as the root task of ``command``: the task a stop signal cancels."""
    command.task = asyncio.current_task()
    _COMMAND.set(command)
    return await main()


class SignalStop:
    """What a stop signal does while a command holds a Host: record it, narrow the waits
    of the stores opened under it (``waits``), cancel the command; the second exits."""

    def __init__(
        self,
        command: CommandStop,
        loop: asyncio.AbstractEventLoop,
        *,
        unopened: str = "nothing was run",
    ) -> None:
        self._command = command
        self._loop = loop
        # What every store opened in the command follows, from its opening on: a signal
        # that comes while the Host still opens ends its lock waits as well.
        self.waits = WaitLimit()
        # What the line for a stop while the Host opened says the command did not do.
        self.unopened = unopened

    @property
    def signal(self) -> int | None:
        """The signal that stopped the command, if one did."""
        return self._command.signal

    def received(self, number: int, frame: FrameType | None) -> None:
        if self._command.signal is not None:
            _exit_at_once(number)
        self._command.signal = number
        # On the event loop, not in the middle of whatever the signal interrupted (the
        # limit moves PostgreSQL's timers).
        self._loop.call_soon_threadsafe(self._stop)

    def stop(self, number: int) -> None:
        """A first stop signal that a receiver on the event loop hands on (``serve``'s,
        which exits itself at a second): as ``received``."""
        self._command.signal = number
        self._stop()

    def _stop(self) -> None:
        # The limit first: the cancellation then unwinds under it.
        self.waits.limit(INTERRUPT_LOCK_WAIT_S)
        task = self._command.task
        if task is not None:
            task.cancel()


def command_stop(*, status: int | None = None, unopened: str) -> SignalStop | None:
    """The running command's ``SignalStop``, for a command that receives its signals itself
    and hands it a first one (``stop``): ``status`` is then its exit status (None: 128 +
    the signal's number). None outside a command run by ``run_command``, where
    ``signals_stop_the_command`` takes no signal either."""
    command = _COMMAND.get()
    if command is None:
        return None
    command.stopped_status = status
    return SignalStop(command, asyncio.get_running_loop(), unopened=unopened)


@contextmanager
def signals_stop_the_command(given: SignalStop | None = None) -> Iterator[SignalStop | None]:
    """While the block runs, SIGINT, SIGTERM and SIGHUP stop the command (``SignalStop``),
    then do what they did. Each store opened in the block follows the stop's limit from
    the start of its opening (``stores_opened_follow``). A command that receives its
    signals itself passes the stop it hands them to (``given``): no handler is taken.

    Only in a command run by ``run_command`` (it knows the task to cancel), in the event
    loop's thread (the only one Python delivers signals to). A signal the process was
    started ignoring (``nohup``, a job in the background of a script) stays ignored, as
    does SIGINT when asyncio's own handler is not there; otherwise None and nothing changes.
    """
    if given is not None:
        with stores_opened_follow(given.waits):
            yield given
        return
    command = _COMMAND.get()
    if command is None or threading.current_thread() is not threading.main_thread():
        yield None
        return
    stop = SignalStop(command, asyncio.get_running_loop())
    previous = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    taken = [
        number
        for number, handler in previous.items()
        if (callable(handler) if number == signal.SIGINT else handler != signal.SIG_IGN)
    ]
    for number in taken:
        signal.signal(number, stop.received)
    try:
        with stores_opened_follow(stop.waits):
            yield stop
    finally:
        for number in taken:
            if signal.getsignal(number) == stop.received:
                signal.signal(number, previous[number])


def _exit_at_once(number: int) -> None:
    """The second stop signal: one line, then exit with no cleanup (what was left running
    is recovered by lease expiry, as after a crash)."""
    status = 128 + number
    line = (
        f"\nhostkit: second {signal.Signals(number).name}: exiting at once (status {status}); "
        "a turn left running is ended lost by the next hostkit command to open the database "
        "once its lease expires\n"
    )
    # The streams may be in the middle of a write the signal interrupted: flush what it can,
    # and write the line to the descriptor itself.
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(OSError):
        os.write(2, line.encode())
    os._exit(status)


async def interrupted_turn(
    host: Host, conversation: str, request_id: str, *, config: Path | None
) -> str:
    """The line for a stop (Ctrl-C, SIGTERM, SIGHUP) while the terminal user's request
    ``request_id`` ran: whether its turn was admitted and whether its end was recorded
    (looked up shielded and bounded, so the answer is quick; "recorded" only when its
    record says it ended)."""
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
    """The line for a stop (Ctrl-C, SIGTERM, SIGHUP) while an approval's answer or
    continuation ran: where it was left and whether its continuation's end was recorded
    (looked up shielded and bounded, as ``interrupted_turn``), and where to read more."""
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
