"""Running a turn from the terminal with its answer streamed as it arrives."""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TextIO

import anyio
from rich.console import Console, RenderableType
from rich.live import Live
from rich.spinner import Spinner

from hostkit.cli._approver import ConsoleApprover, render_approval
from hostkit.effects import ApprovalDecision
from hostkit.errors import HostkitError, InvalidValue
from hostkit.host import Host
from hostkit.inspect import printable, prose_text
from hostkit.turns import TurnEvent
from hostkit.types import (
    Attachment,
    ConversationFacts,
    PrincipalScope,
    SessionSelector,
    TurnRequest,
    TurnResult,
    new_id,
    sanitize_name,
)

__all__ = [
    "Waiting",
    "attach_files",
    "event_text",
    "stream_answer",
    "stream_resume",
    "stream_turn",
    "terminal_user",
]


def terminal_user(conversation: str) -> ConversationFacts:
    """The local terminal user in ``conversation``: who runs turns and owns attachments."""
    return ConversationFacts(
        channel="cli", conversation_key=conversation, principal_key="local-user"
    )


async def attach_files(
    host: Host, conversation: str, paths: Sequence[str | Path]
) -> tuple[Attachment, ...]:
    """Store each file for the terminal user; the first bad one raises (``InvalidValue``).

    ``--attach`` takes the path as typed: an empty one and a directory are
    said to be what they are here (a directory named ``d.png`` is not "no such
    file"); everything else is the store's check (``add_file``).
    """
    principal = terminal_user(conversation)
    attachments: list[Attachment] = []
    for path in paths:
        if not str(path):
            raise InvalidValue("--attach needs a file path; it was given an empty one")
        if await anyio.Path(path).is_dir():
            raise InvalidValue(f"{sanitize_name(str(path)) or path}: is a directory, not a file")
        attachments.append(await host.attachments.add_file(principal, path))
    return tuple(attachments)


class Waiting:
    """A spinner line with the seconds elapsed while a turn waits (for its session, its model).

    A local model can take seconds to load before its first token; without a
    sign of life the terminal looks hung. Drawn on ``console`` (stderr) only
    when it is a terminal, and erased before any answer text or prompt.
    """

    def __init__(self, console: Console | None) -> None:
        self._console = console if console is not None and console.is_terminal else None
        # Not a terminal (a pipe, a log): no spinner, but a long wait is said in a line.
        self._plain = console if console is not None and not console.is_terminal else None
        self._spinner = Spinner("dots", style="cyan")
        self._live: Live | None = None
        self._what = ""
        self._since = 0.0

    def start(self, what: str) -> None:
        """Show ``what`` with its own count of seconds (kept while ``what`` stays the same)."""
        if self._console is None or (self._live is not None and what == self._what):
            return
        self._what, self._since = what, time.monotonic()
        if self._live is not None:
            return
        self._live = Live(self, console=self._console, transient=True, refresh_per_second=8)
        self._live.start()

    def say(self, what: str) -> None:
        """``what`` as the spinner's text on a terminal; elsewhere one plain line, so a
        script's log shows why the command waits."""
        if self._plain is not None:
            self._plain.print(what, highlight=False, markup=False, soft_wrap=True)
        self.start(what)

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def __rich__(self) -> RenderableType:
        self._spinner.update(text=f"{self._what} ({time.monotonic() - self._since:.0f}s)")
        return self._spinner


async def stream_turn(
    host: Host,
    message: str,
    *,
    agent: str,
    conversation: str,
    session: SessionSelector = "bound",
    attachments: tuple[Attachment, ...] = (),
    out: TextIO | None = None,
    progress: Console | None = None,
    request_id: str | None = None,
) -> TurnResult:
    """Run a turn for the local terminal user, printing text deltas to ``out``.

    ``progress`` (stderr) shows how long the turn has waited for its model;
    ``request_id`` (default: a new one) is what ``interrupted_turn`` looks up.
    """
    request = TurnRequest(
        input=message,
        principal=terminal_user(conversation),
        request_id=request_id or new_id("req"),
        core_id=agent,
        session=session,
        attachments=attachments,
    )
    return await _streamed(
        host,
        lambda event: event.request_id == request.request_id,
        lambda: host.turns.run(request),
        out,
        Waiting(progress),
    )


async def stream_answer(
    host: Host,
    approval_id: str,
    decision: ApprovalDecision,
    *,
    by: PrincipalScope,
    out: TextIO | None = None,
    progress: Console | None = None,
    shown_on: Console | None = None,
) -> TurnResult:
    """Answer an approval and stream the continuation turn it runs.

    The continuation runs in the approval's session, and a session runs one
    turn at a time, so that session's events are the continuation's. The
    stored call is printed on ``shown_on`` (``render_approval``, headed as an
    answer being given: the store may still refuse it) before the answer is
    recorded: what is approved is what was read.
    """
    approval = await host.approvals.get(by, approval_id)
    if shown_on is not None:
        render_approval(shown_on, approval)

    return await _streamed(
        host,
        lambda event: event.session_id == approval.session_id,
        lambda: host.approvals.answer(approval_id, decision, by=by),
        out,
        Waiting(progress),
    )


async def stream_resume(
    host: Host,
    approval_id: str,
    *,
    by: PrincipalScope,
    out: TextIO | None = None,
    progress: Console | None = None,
) -> TurnResult:
    """Resume an answered approval and stream the continuation turn it runs (if any)."""
    approval = await host.approvals.get(by, approval_id)
    return await _streamed(
        host,
        lambda event: event.session_id == approval.session_id,
        lambda: host.approvals.resume(approval_id, by=by),
        out,
        Waiting(progress),
    )


def event_text(event: TurnEvent) -> str | None:
    """What the terminal shows of ``event`` on the turn's stream, if anything.

    The model's words, a server's diagnostics and effect names are never
    written with their control characters: a streamed ESC could clear the
    screen and paint a fake approval prompt above the real one.
    """
    if event.kind == "text.delta":
        return prose_text(str(event.data["text"]))
    if event.kind == "provider.completed" and event.data.get("tool_calls"):
        called = event.data.get("effects_called") or event.data["tool_calls"]
        return f"[calling {', '.join(printable(str(name)) for name in called)}]\n"
    if event.kind == "mcp.unavailable":
        # Why a declared server's tools are missing from this turn.
        detail = printable(str(event.data.get("detail") or event.data.get("state")))
        return f"[MCP server {printable(str(event.data['server']))} unavailable: {detail}]\n"
    return None


async def _streamed(
    host: Host,
    accepts: Callable[[TurnEvent], bool],
    run_turn: Callable[[], Awaitable[TurnResult]],
    out: TextIO | None,
    waiting: Waiting,
) -> TurnResult:
    result: TurnResult | None = None
    failure: HostkitError | None = None
    # Looked up now, not when this module loaded: the entry point replaces sys.stdout
    # with one whose reader may leave (| head) without cutting the turn off (hostkit._stdio).
    sink = sys.stdout if out is None else out
    # Whether anything reached ``out``: a turn refused before it streamed prints nothing there.
    wrote = False
    # Why ``out`` took no more (a full disk): the turn goes on, the command says so after it.
    unwritable: OSError | None = None

    def emit(text: str) -> None:
        nonlocal wrote, unwritable
        if unwritable is not None:
            return
        try:
            sink.write(text)
            sink.flush()
        except OSError as exc:
            unwritable = exc
            return
        wrote = True

    async with host.events.subscribe(accepts) as events:

        async def run() -> None:
            nonlocal result, failure
            try:
                result = await run_turn()
            except HostkitError as exc:
                failure = exc
            finally:
                tg.cancel_scope.cancel()

        def show(event: TurnEvent) -> None:
            nonlocal wrote
            if event.kind == "turn.waiting":
                waiting.say(f"waiting for session {event.session_id}: another turn runs in it")
            elif event.kind == "provider.started":
                summary = event.data.get("summary")
                waiting.start("summarizing earlier context" if summary else "waiting for the model")
            elif event.kind in ("provider.responded", "provider.failed"):
                # Tools run next, and may ask for an approval on this terminal.
                waiting.stop()
            shown = event_text(event)
            if shown is not None:
                waiting.stop()
                emit(shown)

        approver = host.approvals.runtime.provider
        console = approver if isinstance(approver, ConsoleApprover) else None
        if console is not None:
            # A prompt may come before the model is called (an MCP server's connect).
            before, console.before_prompt = console.before_prompt, waiting.stop
        try:
            waiting.start("starting the turn")  # admission and tool discovery come first
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                async for event in events:
                    show(event)
            # The turn ended: what it emitted last may still be buffered (its final text).
            while True:
                try:
                    show(events.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                    break
        finally:
            waiting.stop()
            if console is not None:
                console.before_prompt = before
    if failure is not None:
        if wrote:
            emit("\n")
        raise failure
    assert result is not None
    if not wrote and result.text:
        # A turn that had already ended (an approval answered again, a resume): its
        # recorded answer, as the stream would have shown it.
        emit(prose_text(result.text))
    if wrote:
        emit("\n")  # flushed: the outcome line that may follow starts a line of its own
    if unwritable is not None:
        raise HostkitError(
            f"could not write the answer ({unwritable.strerror or unwritable}): the turn "
            f"ended {result.outcome}; `hostkit sessions` shows it"
        )
    return result
