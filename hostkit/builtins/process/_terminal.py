"""The terminal effects: ``terminal.run``, ``terminal.status`` and ``terminal.stop``.

``terminal.run`` starts an argument vector (never a shell line) as an owned
process tree through the Host process lifecycle (``_process.run_process``),
in a directory inside the workspace, with an allowlisted environment plus
exactly the secrets the runtime bound for the call. A foreground run returns
its outcome; a background run returns a random run id at once, and
``terminal.status`` / ``terminal.stop`` answer for it to the same owner and
session only (anyone else gets the answer a missing id gets).

Ownership of background runs: ``TerminalRuns`` is the registry. Each run is
an asyncio task created on the running loop (a turn's task group ends with
the call, a background run must not) whose driver records the outcome or
the error and closes the working-directory descriptor; the tree itself is
owned by the ``ProcessSupervisor``. ``TerminalRuns.aclose()`` refuses new
runs, cancels every live run through its ``ProcessControl`` (single flight
with a supervisor close), and awaits every task with a bound; a task still
running after that is cancelled, which makes ``run_process`` end the tree
shielded. The Host closes the registry after the supervisor; either order
ends every tree.

Sandbox: ``tools(sandbox=...)`` binds one agent's ``SandboxPolicy``
(``_sandbox``); the registry itself is shared by every agent of a workspace.
With ``mode="bubblewrap"`` (the default) each run is spawned inside bwrap,
and where bubblewrap cannot run, ``terminal.run`` is refused before anything
starts, naming what is missing. With ``mode="none"`` the tool's description
and every result say the run is unsandboxed.

Durable background runs: with a ``RunJournal`` (the Host passes one), a
background run is recorded in the store before it is spawned, gets its pid
and start marker once it is, and its end (state, exit code, stream
statistics) is persisted before ``terminal.run.completed`` is announced.
``terminal.status`` answers from that record when the run is not one of this
registry's (another Host process, or before a restart, where it reads
``orphaned``: see ``_terminal_journal``). The record's insert is also where
the per-session limit of live runs holds across Host processes.

Audit view: every started run's ``ToolOutcome.audit`` names the working
directory (as asked and as the Host resolved it), the environment variable
names the child got (bound secrets by name only), the executable found on
the sandbox's ``PATH`` and its real path, the launcher (bwrap or prlimit)
and the sandbox mode. The EffectRuntime persists it with the call.

Secret-bound runs: their full output files are deleted on every end path
(exit, deadline, stop, cancellation, Host close, error); only redacted tails
survive.

Blocking work (``which``, probing bwrap, opening the directory, closing it)
runs in worker threads: the Host shares its event loop with turns, widgets
and the inbox.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import AsyncResource
from pydantic import Field

from hostkit._free_space import free_bytes_at
from hostkit.builtins.files import WorkspaceScope
from hostkit.builtins.process._process import (
    DEFAULT_CONFIRM_S,
    DEFAULT_DRAIN_GRACE_S,
    DEFAULT_GRACE_S,
    DEFAULT_TAIL_CHARS,
    ProcessControl,
    ProcessOutcome,
    ProcessSupervisor,
    opaque_artifact_dir,
    run_process,
)
from hostkit.builtins.process._sandbox import (
    MB,
    SandboxPolicy,
    SandboxUnavailable,
    probe_bubblewrap,
)
from hostkit.builtins.process._terminal_checks import (
    DEFAULT_ENV_ALLOWLIST,
    EXECUTION_CONTROL_TARGETS,
    MAX_ARGV_ITEMS,
    MAX_SECRETS,
    child_environment,
    drop_artifacts,
    in_workspace,
    launch_argv,
    open_workdir,
    outcome_view,
    program_refusal,
    resolve_program,
    run_preflight,
    secret_program_refusal,
    swappable,
)
from hostkit.builtins.process._terminal_journal import RunJournal, ending_of, record_view
from hostkit.effects import AuthoredTool, BuiltinOutcome, ToolContext, ToolOutcome
from hostkit.errors import ConfigError, HostkitError, UserError, bounded
from hostkit.store import NewTerminalRun, TerminalRunLimit
from hostkit.types import is_count, is_seconds, new_id

__all__ = ["DEFAULT_ENV_ALLOWLIST", "EXECUTION_CONTROL_TARGETS", "TerminalRuns"]

DEFAULT_START_TIMEOUT_S = 10.0  # a background run must be spawned and recorded by then
DEFAULT_MAX_FINISHED_RUNS = 256  # finished background runs kept for status, all sessions
STATUS_TIMEOUT_S = 10.0  # terminal.status only reads the registry
_SLACK_S = 2.0  # beyond the lifecycle's own bounds, for the worker-thread hops
_NOT_FOUND = "no such run in this session"

_ARGV_HELP = (
    "Program and arguments as a list (no shell): argv[0] is a program name found on "
    "PATH or an absolute path."
)
_CWD_HELP = "Working directory relative to the workspace root; absolute paths and '..' refused."
_SECRETS_HELP = (
    "Names of granted secrets to bind as environment variables (foreground runs only; "
    "never for shells or wrappers)."
)


_UNSANDBOXED_NOTE = 'UNSANDBOXED (sandbox = "none"): the program runs with the Host\'s rights. '


@dataclass(eq=False)
class _BackgroundRun:
    run_id: str
    key: tuple[str, str]  # (owner, session id)
    sandbox: str
    turn_id: str
    control: ProcessControl = field(default_factory=ProcessControl)
    done: anyio.Event = field(default_factory=anyio.Event)
    # Set when the process tree ended (before its end is recorded): the lease keeper stops.
    exited: anyio.Event = field(default_factory=anyio.Event)
    began: float = field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None
    outcome: ProcessOutcome | None = None
    error: str | None = None
    redact: Callable[[str], str] = str  # the call's redactor, for what the journal keeps


class TerminalRuns(AsyncResource):
    """The terminal effects bound to one supervisor and workspace, and their background runs.

    ``tools()`` returns the three AuthoredTools. ``aclose()`` (idempotent,
    shielded) ends every background run and waits for it, bounded by the
    lifecycle's grace, confirmation and drain times; after it, ``terminal.run``
    is refused. Limits: ``deadline_s`` defaults to ``default_deadline_s`` and
    may not exceed ``max_deadline_s``; at most ``max_background`` live
    background runs per session, whoever started them (with a ``journal``, counted
    by the store across every Host on the database); ``max_finished_runs`` finished
    background runs are kept in memory for ``terminal.status`` (oldest dropped
    first; with a ``journal`` the store still answers for them).
    """

    def __init__(
        self,
        *,
        supervisor: ProcessSupervisor,
        workspace: WorkspaceScope,
        artifact_root: Path,
        artifact_key: bytes,
        env_allowlist: Sequence[str] = DEFAULT_ENV_ALLOWLIST,
        default_deadline_s: float = 60.0,
        max_deadline_s: float = 600.0,
        max_background: int = 8,
        max_finished_runs: int = DEFAULT_MAX_FINISHED_RUNS,
        grace_s: float = DEFAULT_GRACE_S,
        confirm_s: float = DEFAULT_CONFIRM_S,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        bwrap: str = "bwrap",
        journal: RunJournal | None = None,
        artifact_reserve_bytes: int = 0,
    ) -> None:
        # NaN passes comparisons like "< 1" and then limits nothing; inf never ends a run.
        for key, seconds, zero in (
            ("max_deadline_s", max_deadline_s, False),
            ("grace_s", grace_s, True),  # 0: KILL at once, as the process runner allows
            ("confirm_s", confirm_s, False),
            ("start_timeout_s", start_timeout_s, False),
        ):
            if not is_seconds(seconds, zero=zero):
                raise ConfigError("must be a finite number of seconds", key=key)
        if not is_seconds(default_deadline_s, high=max_deadline_s):
            raise ConfigError("must be in (0, max_deadline_s]", key="default_deadline_s")
        for key, count in (
            ("max_background", max_background),
            ("max_finished_runs", max_finished_runs),
        ):
            if not is_count(count):
                raise ConfigError("must be a positive integer", key=key)
        if not is_count(artifact_reserve_bytes, low=0):
            raise ConfigError("must be a whole number of bytes", key="artifact_reserve_bytes")
        opaque_artifact_dir(artifact_root, "", key=artifact_key)  # refuses a short key now
        self._supervisor = supervisor
        self._workspace = workspace
        self._artifact_root = Path(artifact_root)
        self._artifact_key = artifact_key
        self._env_allowlist = tuple(env_allowlist)
        self._default_deadline_s = default_deadline_s
        self._max_deadline_s = max_deadline_s
        self._max_background = max_background
        self._max_finished = max_finished_runs
        self._grace_s = grace_s
        self._confirm_s = confirm_s
        self._start_timeout_s = start_timeout_s
        self._bwrap = bwrap
        # How long ending a tree may take once asked: TERM grace, KILL confirmation, drain.
        self._end_s = grace_s + confirm_s + 2 * DEFAULT_DRAIN_GRACE_S + _SLACK_S
        self._runs: dict[str, _BackgroundRun] = {}
        self._journal = journal
        self._reserve = artifact_reserve_bytes
        self._closed = False

    async def aclose(self) -> None:
        """Refuse new runs, end every background run and wait for its task (bounded)."""
        self._closed = True
        runs = [run for run in self._runs.values() if not run.done.is_set()]
        for run in runs:
            run.control.cancel()
        with anyio.CancelScope(shield=True):
            if not await self._all_done(runs):
                # The driver is stuck (spawn or drain): cancelling its task makes
                # run_process end the tree shielded and record the outcome.
                for run in runs:
                    if run.task is not None and not run.done.is_set():
                        run.task.cancel()
                await self._all_done(runs)

    def tools(self, *, sandbox: SandboxPolicy | None = None) -> list[AuthoredTool]:
        """``terminal.run``, ``terminal.status`` and ``terminal.stop`` for one agent's policy.

        ``sandbox`` defaults to bubblewrap with no network and default limits.
        """
        policy = SandboxPolicy() if sandbox is None else sandbox
        return [self._run_tool(policy), self._status_tool(), self._stop_tool()]

    # --- tools --------------------------------------------------------------------------

    def _run_tool(self, policy: SandboxPolicy) -> AuthoredTool:
        async def run(
            ctx: ToolContext,
            argv: tuple[str, ...] = Field(description=_ARGV_HELP, max_length=MAX_ARGV_ITEMS),
            cwd: str = Field(".", description=_CWD_HELP, min_length=1),
            deadline_s: float = Field(
                self._default_deadline_s,
                gt=0,
                le=self._max_deadline_s,
                allow_inf_nan=False,
                description="Seconds before the command's whole process tree is ended.",
            ),
            background: bool = Field(
                False, description="Return a run id at once; see terminal.status/stop."
            ),
            secrets: tuple[str, ...] = Field((), description=_SECRETS_HELP, max_length=MAX_SECRETS),
        ) -> ToolOutcome:
            return await self._start(ctx, policy, argv, cwd, deadline_s, background, secrets)

        note = "" if policy.sandboxed else _UNSANDBOXED_NOTE
        return AuthoredTool(
            "terminal.run",
            run,
            description=(
                f"{note}Run a program (argument list, no shell) in the workspace with a deadline. "
                f"Returns exit code and the last {DEFAULT_TAIL_CHARS:,} characters of stdout "
                "and stderr; "
                "background=true returns a run id for terminal.status and terminal.stop."
            ),
            timeout_s=self._max_deadline_s + self._end_s + self._start_timeout_s,
            preflight=run_preflight(
                workspace=self._workspace,
                max_deadline_s=self._max_deadline_s,
                env_allowlist=self._env_allowlist,
                secret_programs=policy.secret_programs,
            ),
            secrets_argument="secrets",
            approval_warning=None if policy.sandboxed else _UNSANDBOXED_NOTE.strip(),
        )

    def _status_tool(self) -> AuthoredTool:
        async def status(
            ctx: ToolContext, run_id: str = Field(description="A run id from terminal.run.")
        ) -> ToolOutcome:
            run = self._lookup(ctx, run_id)
            if run is None:
                return await self._durable_report(ctx, run_id)
            return self._report(run)

        return AuthoredTool(
            "terminal.status",
            status,
            description="A background run's state: running, or how it ended with its output.",
            timeout_s=STATUS_TIMEOUT_S,
        )

    def _stop_tool(self) -> AuthoredTool:
        async def stop(
            ctx: ToolContext, run_id: str = Field(description="A run id from terminal.run.")
        ) -> ToolOutcome:
            run = self._lookup(ctx, run_id)
            if run is None:
                found = await self._durable_report(ctx, run_id)
                if isinstance(found.output, dict) and found.output.get("status") == "running":
                    # Recorded by another, live Host process: only that one owns the tree.
                    return BuiltinOutcome(
                        "denied", found.output, "the run belongs to another Host process"
                    )
                return found
            # Single flight: the control and the tree end once; every caller waits on `done`.
            run.control.cancel()
            with anyio.move_on_after(self._end_s):
                await run.done.wait()
            if not run.done.is_set():
                return ToolOutcome(
                    "indeterminate",
                    {"run_id": run.run_id, "status": "stopping"},
                    f"the run did not end within {self._end_s:g} s of the stop",
                )
            return self._report(run)

        return AuthoredTool(
            "terminal.stop",
            stop,
            description=(
                "Stop a background run and its whole process tree; reports cancelled only "
                "once every process is confirmed gone."
            ),
            timeout_s=self._end_s + _SLACK_S,
        )

    # --- running ------------------------------------------------------------------------

    async def _start(
        self,
        ctx: ToolContext,
        policy: SandboxPolicy,
        argv: Sequence[str],
        cwd: str,
        deadline_s: float,
        background: bool,
        secrets: Sequence[str],
    ) -> ToolOutcome:
        if self._closed:
            return BuiltinOutcome("denied", None, "the Host is shutting down")
        if set(secrets) != set(ctx.secrets):
            return BuiltinOutcome(
                "denied", None, "the requested secrets were not bound for this call"
            )
        if background and ctx.secrets:
            return BuiltinOutcome("denied", None, "secrets are bound to foreground runs only")
        if ctx.secrets_expire_at is not None:
            remaining = ctx.secrets_expire_at - time.time()
            if remaining <= 0:
                return BuiltinOutcome("denied", None, "the secret binding has expired")
            deadline_s = min(deadline_s, remaining)
        probe = None
        if policy.sandboxed:
            probe = await anyio.to_thread.run_sync(probe_bubblewrap, self._bwrap)
            if not probe.ok:
                return BuiltinOutcome("denied", None, SandboxUnavailable(probe.reason).message)
        env = child_environment(self._env_allowlist, ctx.secrets, os.environ)
        workspace = Path(self._workspace.root)
        found, real = await anyio.to_thread.run_sync(
            resolve_program,
            argv[0],
            env.get("PATH", os.defpath),
            workspace if policy.sandboxed else None,
        )
        if found is None or real is None:
            where = " in the sandbox" if policy.sandboxed else ""
            return BuiltinOutcome(
                "denied", None, f"program {bounded(argv[0], 80)!r} was not found{where}"
            )
        program = found
        if ctx.secrets:
            # The real path: through a link to a shell, or a program the agent put in the
            # workspace.
            root = Path(await anyio.to_thread.run_sync(os.path.realpath, workspace))
            inside = await anyio.to_thread.run_sync(in_workspace, real, root)
            refusal = program_refusal(real, argv, in_workspace=inside)
            if refusal is None:
                refusal = await anyio.to_thread.run_sync(
                    secret_program_refusal, real, tuple(ctx.secrets), policy.secret_programs
                )
            if refusal is not None:
                return BuiltinOutcome("denied", None, refusal)
            # A path with a link the agent could re-point after these checks runs the very
            # file they read, so no other program receives the secret.
            if await anyio.to_thread.run_sync(
                functools.partial(swappable, found, root, sandboxed=policy.sandboxed)
            ):
                program = real
        if self._reserve:
            free = await anyio.to_thread.run_sync(free_bytes_at, self._artifact_root)
            if free < self._reserve:
                return BuiltinOutcome(
                    "denied",
                    None,
                    f"the Host's disk has {free / MB:.0f} MiB free, less than the "
                    f"{self._reserve / MB:.0f} MiB it reserves (host.artifact_reserve_mb): "
                    "no run starts until space is freed",
                )
        opened = await self._workdir(cwd)
        if isinstance(opened, ToolOutcome):
            return opened
        fd, workdir = opened
        # From here the descriptor is owned: closed below, or by the background driver.
        options = {"cwd": workdir, "env": env, "deadline_s": deadline_s, **self._options(ctx)}
        options["max_processes"] = policy.limits.processes
        # The output is kept on the Host's disk, out of the sandbox's file size limit:
        # each stream is held to the same limit.
        options["max_output_bytes"] = policy.limits.file_size_mb * MB
        # ... and all output together leaves the Host's reserve free on the artifacts' disk.
        options["min_free_bytes"] = self._reserve or None
        options["sandboxed"] = policy.sandboxed
        try:
            command, resolved_cwd, launcher = await anyio.to_thread.run_sync(
                launch_argv, probe, policy, [program, *argv[1:]], workspace, fd, self._artifact_root
            )
        except UserError as exc:
            await _close(fd)
            return BuiltinOutcome("denied", None, exc.message)
        audit = {
            "cwd": cwd,
            "cwd_resolved": str(resolved_cwd),
            # Names only: a bound secret is listed by its environment name, never its value.
            "env_keys": sorted(env),
            "bound_env_keys": sorted(ctx.secrets),
            "executable": found,
            "executable_real": real,
            "launcher": launcher,
            "sandbox": policy.mode,
            "background": background,
        }
        if background:
            started = await self._start_background(ctx, policy, command, fd, options, argv, audit)
            run_id = started.output.get("run_id") if isinstance(started.output, dict) else None
            if run_id is None:
                return started  # refused (the per-session limit, no record): nothing ran
            return dataclasses.replace(started, audit={**audit, "run_id": run_id})
        if ctx.secrets_expire_at is not None:
            # The lookups above took time: clamp to what is left of the binding now.
            options["deadline_s"] = min(deadline_s, ctx.secrets_expire_at - time.time())
            if options["deadline_s"] <= 0:
                await _close(fd)
                return BuiltinOutcome("denied", None, "the secret binding has expired")
        control = ProcessControl()
        try:
            await run_process(command, control=control, **options)
        finally:
            with anyio.CancelScope(shield=True):
                await _close(fd)
                if ctx.secrets and control.outcome is not None:
                    # The full streams may hold a bound value: only the redacted tails
                    # survive, whichever way the run ended (cancelled, closed, failed).
                    dropped = await anyio.to_thread.run_sync(drop_artifacts, control.outcome)
                    control.outcome = dropped
        assert control.outcome is not None  # run_process returned
        view = outcome_view(
            control.outcome, ctx.secrets, mask=ctx.redact_bound, sandbox=policy.mode
        )
        return dataclasses.replace(view, audit=audit)

    async def _start_background(
        self,
        ctx: ToolContext,
        policy: SandboxPolicy,
        command: list[str],
        fd: int,
        options: dict[str, Any],
        argv: Sequence[str],
        audit: dict[str, Any],
    ) -> ToolOutcome:
        key = (ctx.owner, ctx.session_id)
        # The limit is the session's, whoever started the runs (the owner key only says who
        # may see or stop one). Counted and registered with no await in between, so this
        # registry's concurrent calls keep it; the journal's insert holds it across Hosts.
        live = sum(
            1 for r in self._runs.values() if r.key[1] == ctx.session_id and not r.done.is_set()
        )
        refusal = "the Host is shutting down" if self._closed else None
        if live >= self._max_background:
            refusal = f"at most {self._max_background} background runs per session"
        if refusal is not None:
            await _close(fd)
            return BuiltinOutcome("denied", None, refusal)
        run = _BackgroundRun(new_id("run"), key, policy.mode, ctx.turn_id, redact=ctx.redact)
        self._runs[run.run_id] = run
        self._forget_finished()
        if self._journal is not None:
            # Durable before the spawn: a crash from here on leaves a record to orphan.
            record = NewTerminalRun(
                run_id=run.run_id,
                session_id=ctx.session_id,
                turn_id=ctx.turn_id,
                call_id=ctx.call_id,
                principal_id=ctx.owner,
                # A secret the agent holds may be part of a path: the row keeps it masked.
                program=ctx.redact(os.path.basename(argv[0]) or argv[0]),
                argc=len(argv),
                cwd=ctx.redact(audit["cwd_resolved"]),
                sandbox=policy.mode,
                host_owner=self._journal.owner_text,
            )
            try:
                await self._journal.begin(record, max_live=self._max_background)
            except HostkitError as exc:
                del self._runs[run.run_id]
                await _close(fd)
                if isinstance(exc, TerminalRunLimit):  # other Hosts' runs fill the session
                    return BuiltinOutcome("denied", None, exc.message)
                return ToolOutcome("failed", None, f"the run could not be recorded: {exc.message}")
        run.task = asyncio.get_running_loop().create_task(
            self._drive(run, command, fd, options), name=f"terminal.run {run.run_id}"
        )
        with anyio.move_on_after(self._start_timeout_s):
            async with anyio.create_task_group() as group:
                group.start_soon(_then_cancel, run.control.wait_started, group.cancel_scope)
                group.start_soon(_then_cancel, run.done.wait, group.cancel_scope)
        owner = run.control.owner
        if owner is not None:
            return ToolOutcome(
                "succeeded",
                {
                    "run_id": run.run_id,
                    "status": "running",
                    "pid": owner.pid,
                    "sandbox": run.sandbox,
                },
            )
        if run.done.is_set():
            return self._report(run)
        run.control.cancel()
        return ToolOutcome(
            "indeterminate",
            {"run_id": run.run_id, "status": "stopping"},
            f"the process did not start within {self._start_timeout_s:g} s; it was asked to stop",
        )

    async def _drive(
        self, run: _BackgroundRun, command: list[str], fd: int, options: dict[str, Any]
    ) -> None:
        """The background task: run to the end, record how, release the directory.

        The end is persisted (with a journal) before ``done`` is set and before
        the completion event, so a status that sees it finished can read it.
        """
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._record_start, run)
                try:
                    run.outcome = await run_process(command, control=run.control, **options)
                except Exception as exc:  # kept for terminal.status; never an unretrieved error
                    run.error = bounded(f"{type(exc).__name__}: {exc}", 300)
                finally:
                    run.exited.set()
                    if run.control.owner is None:
                        group.cancel_scope.cancel()  # never spawned: nothing to record
        finally:
            run.outcome = run.outcome or run.control.outcome
            try:
                with anyio.CancelScope(shield=True):
                    await _close(fd)
                    if self._journal is not None:
                        with anyio.move_on_after(self._end_s):
                            await self._journal.finish(
                                run.run_id,
                                session_id=run.key[1],
                                turn_id=run.turn_id,
                                ending=ending_of(run.outcome, run.error, redact=run.redact),
                            )
            finally:
                run.done.set()

    async def _record_start(self, run: _BackgroundRun) -> None:
        """Persist the root's pid and start marker, then keep the run's lease until it
        exits; failing either, the run may not go on."""
        owner = await run.control.wait_started()
        if owner is None or self._journal is None:
            return
        try:
            await self._journal.started(run.run_id, owner)
        except HostkitError as exc:
            run.control.fail(f"recording the run failed: {exc.message}")
            return
        if not await self._journal.keep(run.run_id, run.exited):
            run.control.fail(
                "another Host recorded this run as orphaned after its lease expired "
                "(this Host could not renew it), so it was stopped"
            )

    async def _workdir(self, cwd: str) -> tuple[int, Path] | ToolOutcome:
        try:
            return await anyio.to_thread.run_sync(open_workdir, self._workspace, cwd)
        except UserError as exc:  # a link out, a missing directory: nothing was started
            return BuiltinOutcome("denied", None, exc.message)

    def _options(self, ctx: ToolContext) -> dict[str, Any]:
        return {
            "supervisor": self._supervisor,
            "artifact_dir": opaque_artifact_dir(
                self._artifact_root, ctx.session_id, key=self._artifact_key
            ),
            "grace_s": self._grace_s,
            "confirm_s": self._confirm_s,
        }

    # --- the registry -------------------------------------------------------------------

    def _lookup(self, ctx: ToolContext, run_id: str) -> _BackgroundRun | None:
        run = self._runs.get(run_id)
        # Another owner's or session's run answers exactly like a missing one.
        return run if run is not None and run.key == (ctx.owner, ctx.session_id) else None

    async def _durable_report(self, ctx: ToolContext, run_id: str) -> ToolOutcome:
        """A run this registry does not hold: its record, if the caller owns one."""
        if self._journal is None:
            return BuiltinOutcome("not_found", None, _NOT_FOUND)
        record = await self._journal.lookup(
            run_id, principal_id=ctx.owner, session_id=ctx.session_id
        )
        if record is None:
            return BuiltinOutcome("not_found", None, _NOT_FOUND)
        return record_view(record)

    def _report(self, run: _BackgroundRun) -> ToolOutcome:
        if not run.done.is_set():
            owner = run.control.owner
            return ToolOutcome(
                "succeeded",
                {
                    "run_id": run.run_id,
                    "status": "running",
                    "pid": owner.pid if owner else None,
                    "elapsed_s": round(time.monotonic() - run.began, 3),
                    "sandbox": run.sandbox,
                },
            )
        if run.outcome is not None:
            # Background runs never hold secrets.
            return outcome_view(run.outcome, {}, run_id=run.run_id, sandbox=run.sandbox)
        return ToolOutcome(
            "failed", {"run_id": run.run_id, "status": "failed"}, run.error or "the run failed"
        )

    def _forget_finished(self) -> None:
        finished = [rid for rid, run in self._runs.items() if run.done.is_set()]
        for run_id in finished[: max(0, len(finished) - self._max_finished)]:
            del self._runs[run_id]

    async def _all_done(self, runs: list[_BackgroundRun]) -> bool:
        with anyio.move_on_after(self._end_s):
            for run in runs:
                await run.done.wait()
            return True
        return False


async def _then_cancel(wait: Callable[[], Awaitable[object]], scope: anyio.CancelScope) -> None:
    await wait()
    scope.cancel()


async def _close(fd: int) -> None:
    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(os.close, fd)
