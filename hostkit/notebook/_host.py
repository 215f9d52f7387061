"""The Host on the kernel's own event loop: ``await hostkit.notebook.start()``.

A cell starts a turn as a task on the running loop and returns its panel at
once; the turn fills the panel as events arrive. Nothing here decides
policy: approvals go through the Host's ApprovalRuntime, inspectors draw the
Host's own view-models.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import os
import signal
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import psutil
from anyio.abc import AsyncResource

from hostkit.daemon import DaemonExit
from hostkit.errors import (
    ConfigError,
    InvalidValue,
    NotFoundOrUnauthorized,
    ScopeError,
    StoreClosed,
    UnboundToken,
    UserError,
)
from hostkit.host import (
    Agent,
    Host,
    HostConfig,
    ReloadOutcome,
    RuntimeCapabilities,
    unknown_agent,
)
from hostkit.inbox import ChannelInbox
from hostkit.inspect import inbox_of
from hostkit.notebook._approver import WidgetApprover
from hostkit.notebook._catalog import CatalogInspector
from hostkit.notebook._cores import CoreHistory
from hostkit.notebook._dashboard import Dashboard, RunningTurn
from hostkit.notebook._inbox import InboxMonitor
from hostkit.notebook._inspector_html import esc, panel_html, row_html, table_html, title_html
from hostkit.notebook._inspectors import BudgetInspector, ContextInspector, shut_down_panels
from hostkit.notebook._interrupt import watch_interrupts
from hostkit.notebook._plain import plain_text
from hostkit.notebook._serve import ServeHandle
from hostkit.notebook._shutdown import watch_shutdown
from hostkit.notebook._turn import ApprovalRow, Pulse, TurnView
from hostkit.types import (
    Attachment,
    ConversationFacts,
    FreshSession,
    PrincipalScope,
    ResumeSession,
    SessionSelector,
    TurnCancelResult,
    TurnRequest,
    TurnResult,
    TurnToken,
    is_seconds,
    new_id,
)

__all__ = ["NotebookHost", "current", "start"]

_current: NotebookHost | None = None
_starting: asyncio.Future[None] | None = None
# How long a stop waits for a turn still being admitted (a session busy elsewhere).
_ADMISSION_WAIT_S = 10.0
# How long it then waits for the stopped admission to end (a committed one records its end).
_STOPPED_WAIT_S = 30.0
# How long a kernel shutdown waits for the loop to update the widgets before doing it itself.
_SHUTDOWN_WAIT_S = 1.0


class NotebookHost(AsyncResource):
    """A Host for one kernel: ``chat`` starts turns, ``host`` is the full Host.

    Turns run as the notebook principal in ``conversation`` on the
    ``notebook`` channel, so every cell of a notebook continues one session
    per agent unless ``session=`` says otherwise (another agent than the
    default one talks in ``<conversation>/<agent>``: ``facts_for``).
    """

    def __init__(
        self,
        host: Host,
        approver: WidgetApprover,
        *,
        conversation: str = "notebook",
        principal: str = "local",
    ) -> None:
        self.host = host
        self.approver = approver
        self.facts = ConversationFacts(
            channel="notebook", conversation_key=conversation, principal_key=principal
        )
        self.views: dict[str, TurnView] = {}
        self.last_view: TurnView | None = None
        self._by_turn: dict[str, TurnView] = {}
        self._asked = Pulse()  # fired when a panel here asks for a click (TurnView.wait)
        self._tasks: set[asyncio.Task[Any]] = set()
        # Each running turn's cancellation token and its owner's scope, read when it starts.
        self._tokens: dict[TurnView, asyncio.Task[tuple[TurnToken, PrincipalScope] | None]] = {}
        self._stop_scope: PrincipalScope | None = None
        # Each driven turn's cancel scope: what a stop cancels while the turn is admitted.
        self._admitting: dict[TurnView, anyio.CancelScope] = {}
        self._monitors: weakref.WeakSet[InboxMonitor] = weakref.WeakSet()
        self.serving: ServeHandle | None = None
        self._serve_lock = asyncio.Lock()
        self.config_source: HostConfig | Path | None = None
        self.capabilities: RuntimeCapabilities | None = None
        self.closed = False
        self._shut_down = False
        self._loop: asyncio.AbstractEventLoop | None = None
        approver.bind(self._by_turn.get)

    @property
    def default_agent(self) -> str:
        # A notebook that defined its own agent talks to it unless told otherwise.
        if self.host.agents:
            return self.host.agents[0].name
        agents = self.host.config.agents
        return "assistant" if "assistant" in agents else next(iter(agents))

    def facts_for(self, agent: str | None = None) -> ConversationFacts:
        """The conversation ``agent``'s turns run in: this notebook's own for its default
        agent, ``<conversation>/<agent>`` for any other (as the CLI keeps
        ``terminal/<agent>``), so two agents never read each other's transcript."""
        if agent is None or agent == self.default_agent:
            return self.facts
        return dataclasses.replace(
            self.facts, conversation_key=f"{self.facts.conversation_key}/{agent}"
        )

    def chat(
        self,
        message: str,
        *,
        agent: str | None = None,
        session: str | SessionSelector | None = None,
        attachments: Sequence[Attachment] = (),
    ) -> TurnView:
        """Start a turn as a task on the running loop and return its panel at once.

        ``session``: None (this notebook's conversation), ``"new"`` (a fresh
        session), a session id to resume, or a selector. ``attachments`` come
        from ``await nb.attach(path)``.
        """
        self._check_open()
        view = TurnView(message, agent or self.default_agent)
        self.run_in(view, message, session=session, attachments=attachments)
        return view

    def _check_open(self) -> None:
        """Every helper says the same once the Host is closed (not the store's own words)."""
        if self.closed:
            raise UserError("this NotebookHost is closed: hostkit.notebook.start() opens another")

    async def attach(
        self, path: str | os.PathLike[str], *, media_type: str | None = None
    ) -> Attachment:
        """Store a file for this notebook's principal; pass the result to ``chat(attachments=)``."""
        self._check_open()
        if not isinstance(path, str | os.PathLike) or not isinstance(os.fspath(path), str):
            raise InvalidValue(f"path must be a str or os.PathLike, not {type(path).__name__}")
        return await self.host.attachments.add_file(
            self.facts, os.fspath(path), media_type=media_type
        )

    async def scope(self, *, agent: str | None = None) -> PrincipalScope:
        """The scope of ``agent``'s conversation (default: the default agent's): what its
        sessions are owned by. An agent the Host does not have is refused before a session
        is bound for it (an inspector asked for a misspelled agent made one)."""
        self._check_open()
        if agent is not None and not isinstance(agent, str):
            raise InvalidValue(f"agent must be an agent's name, not {type(agent).__name__}")
        known = sorted(self.host.config.agents)
        if agent is not None and agent not in known:
            raise InvalidValue(unknown_agent(agent, known))
        return await self.host.authority.for_conversation(self.facts_for(agent))

    async def context_inspector(
        self, *, turn_id: str | None = None, agent: str | None = None
    ) -> ContextInspector:
        """The context decisions of ``agent``'s latest turn here (or of ``turn_id``)."""
        scope = await self.scope(agent=agent)
        return await ContextInspector.load(
            self.host, scope, session_id=None if turn_id else scope.session_id, turn_id=turn_id
        )

    async def budget_inspector(self, *, agent: str | None = None) -> BudgetInspector:
        """Token usage, calibration and cost of ``agent``'s session here."""
        scope = await self.scope(agent=agent)
        return await BudgetInspector.load(self.host, scope, scope.session_id or "")

    async def tool_catalog(self, *, agent: str | None = None) -> CatalogInspector:
        """The agent's tools with their provenance, with this conversation's live MCP tools.

        Declared MCP servers this session holds no connection to are listed
        with their last recorded state; nothing is connected to draw it.
        """
        session_id = (await self.scope(agent=agent)).session_id
        return await CatalogInspector.load(
            self.host, agent or self.default_agent, session_id=session_id
        )

    async def dashboard(
        self, scope: PrincipalScope | None = None, *, reason: str = "notebook dashboard"
    ) -> Dashboard:
        """Sessions, running turns, pending approvals and this session's budget in one widget.

        ``scope`` defaults to an audited operator scope (``reason`` is
        recorded): the dashboard shows every session of the database, and
        its approval buttons answer as that operator.
        """
        self._check_open()
        if scope is None:
            scope = await self.host.operator(self.facts.principal_key, reason=reason)
        own = (await self.scope()).session_id
        return await Dashboard.load(
            self.host,
            scope,
            session_id=own,
            running=self.running_turns(),
            waiting=self.waiting_rows(),
        )

    async def inbox_monitor(
        self,
        inbox: ChannelInbox | None = None,
        *,
        reason: str = "notebook inbox monitor",
        watch: bool = True,
        limit: int = 50,
    ) -> InboxMonitor:
        """The ChannelInbox's counts per channel and its dead letters, with Requeue buttons.

        ``inbox`` defaults to the one in the Host's store. Requeues act as an
        audited operator scope (``reason`` is recorded when it is issued; each
        requeue records its own). ``watch`` refreshes it every 2 s for 5
        minutes, on the loop; ``monitor.stop()`` ends that sooner.
        """
        self._check_open()
        if inbox is not None and not isinstance(inbox, ChannelInbox):
            raise InvalidValue(f"inbox must be a ChannelInbox, not {type(inbox).__name__}")
        scope = await self.host.operator(self.facts.principal_key, reason=reason)
        monitor = await InboxMonitor.load(
            inbox if inbox is not None else inbox_of(self.host), scope=scope, limit=limit
        )
        self._monitors.add(monitor)
        if watch:
            monitor.watch()
        return monitor

    async def core_history(self, core_id: str, *, limit: int = 50) -> CoreHistory:
        """A CoreHistory widget of ``core_id``: revisions, promotions with their gates, pins.

        The live revision is marked, each gate shows passed or failed, an MCP
        change shows its secret-safe security diff, and every session shows
        the revision its latest turn ran on. ``await widget.refresh()`` reads
        it again.
        """
        self._check_open()
        return await CoreHistory.load(self.host, core_id, limit=limit)

    async def serve(
        self,
        *,
        port: int | None = 0,
        listen: str | None = None,
        every_s: float = 1.0,
        display: bool = True,
        **options: Any,
    ) -> ServeHandle:
        """Run the Host's daemon (``hostkit serve``) on this kernel's loop; a live status widget.

        ``port``/``listen`` override ``[serve]`` (``port=0``: a free port;
        ``handle.url`` is the address). ``options`` go to ``Host.serve``
        (``env``: where channel secrets are read, default ``os.environ``).
        The widget (``handle.monitor``) is displayed unless ``display=False``
        and refreshes every ``every_s`` seconds while serving. One daemon per
        kernel: a second ``serve`` while serving is a ``UserError``.
        """
        async with self._serve_lock:
            self._check_open()
            if self.serving is not None and self.serving.running:
                raise UserError(
                    f"this kernel already serves on {self.serving.url}: "
                    "await nb.stop_serving() first"
                )
            handle = await ServeHandle.start(
                self.host, port=port, listen=listen, every_s=every_s, **options
            )
            self.serving = handle
        if display and handle.monitor is not None:
            from IPython.display import display as show

            show(handle.monitor)  # type: ignore[no-untyped-call]
        return handle

    async def reload(self, *, display: bool = True) -> ReloadOutcome:
        """Re-read ``hostkit.toml`` and the cores' live refs: a new generation if anything changed.

        Turns running now finish on their generation; the next ``chat`` uses
        the new one. A configuration that fails validation changes nothing and
        the outcome says why (``outcome.rejected``, ``outcome.reason``). The
        outcome is displayed unless ``display=False`` (docs/generations.md).
        """
        self._check_open()
        outcome = await self.host.reload()
        if display:
            from IPython.display import display as show

            show(outcome)  # type: ignore[no-untyped-call]
        return outcome

    async def stop_serving(self, *, deadline_s: float | None = None) -> DaemonExit | None:
        """Drain and stop the daemon ``serve`` started (None if none runs; safe to repeat).

        New webhooks are refused at once (``/readyz`` answers 503), turns in
        flight get ``deadline_s`` (default ``[serve] drain_timeout_s``) to
        finish, and every lease is released; the widget shows the end.
        """
        # Checked before the handle is let go: a refused deadline must leave the daemon
        # stoppable, not running with nothing left that can stop it.
        if deadline_s is not None and not is_seconds(deadline_s, high=86_400, zero=True):
            raise InvalidValue("deadline_s must be a number of seconds from 0 to 86400")
        async with self._serve_lock:
            handle, self.serving = self.serving, None
            if handle is None:
                return None
            return await handle.stop(deadline_s=deadline_s)

    def running_turns(self) -> tuple[RunningTurn, ...]:
        """The turns this kernel's panels are running, with the effect awaiting a click if any."""
        return tuple(
            RunningTurn(
                agent=view.agent,
                turn_id=view.turn_id,
                message=view.message if len(view.message) <= 120 else view.message[:119] + "…",
                waiting_for=row.effect if (row := view.pending_row) is not None else None,
            )
            for view in list(self.views.values())
            if not view.done
        )

    def waiting_rows(self) -> tuple[ApprovalRow, ...]:
        """Approval rows waiting for a click, in this kernel's panels and ``approver.orphans``."""
        views = [*self.views.values(), self.approver.orphans]
        return tuple(row for view in views for row in view.rows if row.waiting)

    def facts_table(self) -> tuple[tuple[str, str], ...]:
        """What the repr shows: database, agents, running turns, approvals waiting for a click."""
        if self.closed:
            return (("state", "closed"),)
        agents = ", ".join(
            f"{name} (default)" if name == self.default_agent else name
            for name in self.host.config.agents
        )
        return (
            ("database", self.host.config.store_location),
            ("agents", agents),
            ("running turns", str(self.host.turns.active_turns)),
            ("approvals waiting for a click", str(len(self.waiting_rows()))),
            ("conversation", f"{self.facts.channel}/{self.facts.conversation_key}"),
        )

    def __repr__(self) -> str:
        lines = [f"  {name}: {value}" for name, value in self.facts_table()]
        return "\n".join(["NotebookHost", *lines])

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(plain_text(repr(self)))

    def _repr_html_(self) -> str:
        body = "".join(row_html(name, value) for name, value in self.facts_table())
        return panel_html(
            title_html("NotebookHost"),
            table_html(("", "this kernel's Host"), body),
            f"<div><small>{esc('await nb.dashboard() shows sessions, turns and approvals')}"
            "</small></div>",
        )

    def run_in(
        self,
        view: TurnView,
        message: str,
        *,
        session: str | SessionSelector | None = None,
        attachments: Sequence[Attachment] = (),
    ) -> None:
        """Run a turn that fills an existing panel (the ``%%agent`` magic makes the panel first)."""
        request = TurnRequest(
            input=message,
            principal=self.facts_for(view.agent),
            request_id=new_id("req"),
            core_id=view.agent,
            session=_selector(session),
            attachments=tuple(attachments),
        )
        self.last_view = view
        # Registered now, not when the task runs: an interrupt of this very cell finds it.
        self.views[request.request_id] = view
        view.bind(self.stop, panels=self._by_turn.get, asked=self._asked)
        task = asyncio.get_running_loop().create_task(self._drive(view, request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        view._task = task

    async def stop(self, view: TurnView) -> TurnCancelResult | None:
        """Cancel the panel's turn through its cancellation token (the Stop button's action).

        A turn still being admitted is waited for (bounded); then its
        admission is cancelled through a cancel scope, never the task: an
        admission that has committed (shielded) still runs to its recorded
        end, ``cancelled``. None when no turn was admitted (the panel then ends
        with that error).
        """
        with anyio.move_on_after(_ADMISSION_WAIT_S):
            await view.admitted.wait()
        if view.turn_id is None:
            admission = self._admitting.get(view)
            if admission is None:
                return None
            admission.cancel()
            with anyio.move_on_after(_STOPPED_WAIT_S):
                await view._done.wait()
            ended = view.result
            if ended is None:
                return None
            return TurnCancelResult(ended.turn_id, "cancelled", ended.outcome)
        held = self._tokens.get(view)
        token = await held if held is not None else None
        scope = await self.scope(agent=view.agent)
        if token is None:
            # It ended before its token was read: the owner-checked cancel says how.
            answer = await self.host.turns.cancel(view.turn_id, scope)
        else:
            answer = await self.host.turns.cancel_token(*token)
        # The end is durable; the panel's own task shows it a step later. Waited for
        # (bounded), so whoever awaited the stop finds the panel ended, as on admission.
        with anyio.move_on_after(_STOPPED_WAIT_S):
            await view._done.wait()
        return answer

    async def _token_of(self, turn_id: str, agent: str) -> tuple[TurnToken, PrincipalScope] | None:
        try:
            return await self._read_token(turn_id, agent)
        except (StoreClosed, ScopeError):
            # Read beside its turn, which may end (and the Host close) first: nothing to
            # stop. The store may close between reading the binding and signing the scope.
            if self.host.store.closed:
                return None
            raise

    async def _read_token(
        self, turn_id: str, agent: str
    ) -> tuple[TurnToken, PrincipalScope] | None:
        # The scope of the conversation the turn ran in: its agent's, never the default's
        # (which would bind a session for an agent this cell did not talk to).
        scope = await self.scope(agent=agent)
        try:
            return await self.host.turns.cancellation_token(turn_id, scope), scope
        except UnboundToken:  # it has ended already
            return None
        except NotFoundOrUnauthorized:
            # A turn in a session the conversation has since left (``session="new"``
            # moved it on): this notebook started it, so its operator may stop it.
            scope = await self._stopper()
        try:
            return await self.host.turns.cancellation_token(turn_id, scope), scope
        except UnboundToken:
            return None

    async def _stopper(self) -> PrincipalScope:
        """An operator scope (audited once) for stopping turns this notebook started."""
        if self._stop_scope is None:
            self._stop_scope = await self.host.operator(
                self.facts.principal_key, reason="notebook: stop a turn this notebook started"
            )
        return self._stop_scope

    async def _drive(self, view: TurnView, request: TurnRequest) -> None:

        def mine(event: Any) -> bool:
            return bool(event.request_id == request.request_id)

        result: TurnResult | None = None
        try:
            async with (
                self.host.events.subscribe(mine) as events,
                anyio.create_task_group() as group,
            ):
                group.start_soon(self._pump, view, events)
                with anyio.CancelScope() as self._admitting[view]:
                    result = await self.host.turns.run(request)
                group.cancel_scope.cancel()
                # What the turn emitted last may still be queued: apply it now.
                while True:
                    try:
                        self._apply(view, events.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
            if result is None:  # stopped while being admitted
                if view.turn_id is None:
                    view.finish(None, UserError("stopped before the turn was admitted"))
                    return
                # Admitted as it was stopped: the same request answers with its recorded end.
                result = await self.host.turns.run(request)
        except Exception as exc:
            view.finish(None, _leaf(exc))
            return
        finally:
            self._admitting.pop(view, None)
            self.views.pop(request.request_id, None)
            if view.turn_id is not None:
                self._by_turn.pop(view.turn_id, None)
            self._tokens.pop(view, None)
        view.finish(result)

    async def _pump(self, view: TurnView, events: Any) -> None:
        async for event in events:
            self._apply(view, event)

    def _apply(self, view: TurnView, event: Any) -> None:
        if event.kind == "turn.started":
            self._by_turn[event.turn_id] = view
            loop = asyncio.get_running_loop()
            self._tokens[view] = loop.create_task(self._token_of(event.turn_id, view.agent))
        view.apply(event)

    async def aclose(self) -> None:
        """Cancel running turns, close the Host (pending prompts are withdrawn)."""
        global _current
        if self.closed:
            return
        self.closed = True
        if _current is self:
            _current = None
        atexit.unregister(self._emergency_stop)
        await self.stop_serving()  # drains its turns before the Host's own close ends them
        for monitor in list(self._monitors):
            monitor.stop()  # nothing left to read once the store closes
        await self.host.aclose()  # ends running turns: their tasks finish their panels
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)

    def kernel_shut_down(self) -> None:
        """The kernel is shutting down (restart or Shut Down) with this Host open: every
        panel's live widgets say so and offer nothing that cannot act any more.

        Each waiting row closes saying its approval stays pending (the next Host
        pauses its turn ``needs_user``) and where to answer it; Stop buttons go
        off; each running turn's outcome says what became of it. Run on the loop
        when it answers within a second (the hook may run on the control
        thread), else here: the loop may be busy for good.
        """
        if self.closed or self._shut_down:
            return
        loop = self._loop
        if loop is None or loop.is_closed() or _on(loop):
            self._close_widgets()
            return
        done = threading.Event()

        def close_there() -> None:
            try:
                self._close_widgets()
            finally:
                done.set()

        with contextlib.suppress(RuntimeError):  # a loop closing meanwhile
            loop.call_soon_threadsafe(close_there)
        if not done.wait(_SHUTDOWN_WAIT_S):
            self._close_widgets()

    def _close_widgets(self) -> None:
        if self._shut_down:
            return
        self._shut_down = True
        for view in list(self.views.values()):
            view.shut_down()
        self.approver.shut_down()
        shut_down_panels()

    def _emergency_stop(self) -> None:
        """Interpreter exit without ``aclose()``: end every process tree the Host owns.

        The loop is gone, so this is synchronous: the widgets are closed first
        (when the kernel's shutdown request did not already), then each tree's
        group is killed after its root's start time is checked (never a recycled
        pid). SQLite needs nothing: the next Host marks this process's turns
        ``lost``, or ``needs_user`` where one waited for an approval.
        """
        if self.closed:
            return
        with contextlib.suppress(Exception):
            self._close_widgets()
        for owner in self.host.processes.supervisor.owners():
            with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
                root = psutil.Process(owner.pid)
                if owner.create_time is not None and root.create_time() == owner.create_time:
                    os.killpg(owner.pgid, signal.SIGKILL)


def _selector(session: str | SessionSelector | None) -> SessionSelector:
    if session is None:
        return "bound"
    if session == "new":
        return FreshSession()
    if isinstance(session, str) and session != "bound":
        return ResumeSession(session)
    return session  # type: ignore[return-value]


def _on(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether this thread runs ``loop`` now."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _kernel_shutting_down() -> None:
    """The kernel's shutdown hook: the kernel's Host, if one is open, closes its widgets."""
    if _current is not None:
        _current.kernel_shut_down()


def _running_views() -> tuple[TurnView, ...]:
    """The panels of the kernel's Host whose turns still run (for the interrupt hook)."""
    return tuple(_current.views.values()) if _current is not None else ()


def current() -> NotebookHost | None:
    """The kernel's NotebookHost, if ``start()`` (or a ``%%agent`` cell) opened one."""
    return _current


def _leaf(exc: Exception) -> Exception:
    """The error itself, not the group a task group wraps one error in: ``await view``
    raises what a caller can catch (``TurnRejected``), and the panel says it."""
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        inner = exc.exceptions[0]
        if not isinstance(inner, Exception):
            break
        exc = inner
    return exc


async def _resolved(config: HostConfig | str | Path | None) -> HostConfig | Path | None:
    """A configuration file as the absolute path it named when the Host started (a later
    ``chdir`` does not make another file the same)."""
    if isinstance(config, str | Path):
        return Path(await (await anyio.Path(config).expanduser()).resolve())
    return config


async def _same_source(asked: HostConfig | str | Path, current: object) -> bool:
    """Whether ``asked`` names the configuration the running Host was started from: a path
    given as text or relative names the same file as its absolute ``Path``."""
    return asked == current or await _resolved(asked) == current


async def start(
    config: HostConfig | str | Path | None = None,
    *,
    capabilities: RuntimeCapabilities | None = None,
    conversation: str | None = None,
    agents: Sequence[Agent] = (),
) -> NotebookHost:
    """Open the kernel's Host on the running loop (once per kernel; later calls return it).

    ``config``: a HostConfig, a hostkit.toml path, or None for ``./hostkit.toml``
    when present, else the default (embedded SQLite ``hostkit.db`` here, the
    local model). ``agents`` are ``hostkit.Agent`` values defined in the
    notebook; they join the configuration's agents (``nb.chat(..., agent=name)``).
    """
    global _current, _starting
    # Two cells (two %%agent magics) may start at once: they share one start.
    while _starting is not None:
        await asyncio.shield(_starting)
    if _current is not None and not _current.closed:
        differs = [
            part
            for part, same in (
                (
                    "configuration",
                    config is None or await _same_source(config, _current.config_source),
                ),
                # By identity: a cell that builds them anew (a new ScriptedModel) would
                # otherwise be handed the running Host, still on the old ones.
                (
                    "capabilities object",
                    capabilities is None or capabilities is _current.capabilities,
                ),
                ("agents", not agents or tuple(agents) == _current.host.agents),
                (
                    "conversation",
                    conversation is None or conversation == _current.facts.conversation_key,
                ),
            )
            if not same
        ]
        if differs:
            raise ConfigError(
                f"a Host already runs in this kernel with another {' and '.join(differs)} "
                "than this start's; await hostkit.notebook.current().aclose() first"
            )
        return _current
    _starting = asyncio.get_running_loop().create_future()
    try:
        if config is None and await anyio.Path("hostkit.toml").exists():
            config = Path("hostkit.toml")
        approver = WidgetApprover()
        host = await Host.open(config, capabilities=capabilities, approver=approver, agents=agents)
        notebook = NotebookHost(host, approver, conversation=conversation or "notebook")
        notebook.config_source, notebook.capabilities = await _resolved(config), capabilities
        notebook._loop = asyncio.get_running_loop()
        _current = notebook
        watch_interrupts(_running_views)
        watch_shutdown(_kernel_shutting_down)
    finally:
        _starting.set_result(None)
        _starting = None
    atexit.register(notebook._emergency_stop)
    return notebook
