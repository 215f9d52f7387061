"""The Host process lifecycle: spawn, drain, deadline, cancellation and shutdown of a tree.

Foreground and background ``terminal.run`` share this one lifecycle so that
every child the Host starts is owned the same way (contract: EffectRuntime,
terminal execution):

- POSIX: a new session and process group per spawn; TERM, then KILL after a
  grace period. (Windows Job Objects are a later adapter.) On Linux the
  spawned root is a per-run subreaper init (``_reaper``): orphans stay in the
  tree, and when the command ends the init ends everything left. The
  Host's process is a subreaper as well while an unsandboxed run lives
  (``adopting``), as a second net.
- An owner record of pid, pgid, spawn id and OS start time. Every signal sent
  by pid goes through a ``psutil.Process`` whose identity includes that start
  time, so a recycled pid is never signalled.
- Descendants are tracked, not only the group: a grandchild that called
  ``setsid()`` leaves the group but is found by ancestry in periodic
  snapshots and again at kill time, and is killed with the rest.
- stdout and stderr are drained continuously into bounded tails and, in full,
  into private artifact files. An artifact write failure (or the caller's
  own record failing, ``ProcessControl.fail``) ends the tree through the same
  single-flight end and the run is ``failed``; draining goes on meanwhile, so
  the child never blocks on a full pipe.
- Cancellation is single-flight and reports ``cancelled`` only once every
  tracked process is confirmed gone; otherwise ``indeterminate``.

This module holds the public values, the supervisor, the caller's control
and ``run_process``; the tree lives in ``_process_tree`` and the output
streams in ``_process_streams``. ``ProcessOwner`` and ``StreamCapture`` are
defined there and re-exported here.

Every ``/proc`` read (psutil) and file write runs in a worker thread: the Host
shares its event loop with turns, widgets and the inbox.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import anyio
from anyio.abc import AsyncResource, Process

from hostkit.builtins.process._process_streams import (
    StreamCapture,
    _discard,
    _prepare_artifacts,
    _Sink,
    _write_chunks,
)
from hostkit.builtins.process._process_tree import ProcessOwner, _Cause, _Tree
from hostkit.builtins.process._reaper import adopting, read_report, spawn_under_init
from hostkit.errors import InvalidValue, RuntimeFailure, bounded
from hostkit.types import is_count, is_seconds, new_id

__all__ = [
    "DEFAULT_CONFIRM_S",
    "DEFAULT_DRAIN_GRACE_S",
    "DEFAULT_GRACE_S",
    "DEFAULT_SNAPSHOT_INTERVAL_S",
    "DEFAULT_TAIL_CHARS",
    "ProcessControl",
    "ProcessOutcome",
    "ProcessOwner",
    "ProcessStatus",
    "ProcessSupervisor",
    "StreamCapture",
    "opaque_artifact_dir",
    "run_process",
]

DEFAULT_TAIL_CHARS = 12_000  # per stream, the contract's foreground tail
DEFAULT_GRACE_S = 2.0  # between TERM and KILL
DEFAULT_CONFIRM_S = 5.0  # after KILL, how long to wait for every tracked process to go
DEFAULT_SNAPSHOT_INTERVAL_S = 0.25  # descendant snapshots while the tree runs
DEFAULT_DRAIN_GRACE_S = 2.0  # for end-of-stream once the tree is gone
OPAQUE_NAME_HEX = 32
MIN_KEY_BYTES = 16

ProcessStatus = Literal["exited", "timed_out", "cancelled", "indeterminate", "failed"]
_REASONS: dict[_Cause, str] = {
    "deadline": "deadline of {deadline:g} s passed; the process tree was ended",
    "cancelled": "cancelled; the process tree was ended",
    "shutdown": "Host shutdown; the process tree was ended",
    "drain_failed": "reading the output failed; the process tree was ended",
    "write_failed": "{failure}; the process tree was ended",
    "abandoned": "the awaiting task was cancelled; the process tree was ended",
    "process_limit": "more than {processes} processes; the process tree was ended",
}
_STATUS: dict[_Cause, ProcessStatus] = {
    "exited": "exited",
    "deadline": "timed_out",
    "cancelled": "cancelled",
    "shutdown": "cancelled",
    "drain_failed": "failed",
    "write_failed": "failed",
    "abandoned": "cancelled",
    "process_limit": "failed",
}


@dataclass(frozen=True, slots=True)
class ProcessOutcome:
    """How one run ended, recorded after cleanup finished.

    ``status``: ``exited`` (the command ended on its own; any exit code),
    ``timed_out``, ``cancelled`` (explicit cancel, Host shutdown, or the
    awaiting task cancelled), ``failed`` (writing an artifact or the caller's
    record, or reading a pipe, failed and the tree was ended, see
    ``stream_error``; or the tree grew past its process limit) or
    ``indeterminate`` (the tree could not be confirmed gone, or its pipes
    never closed). ``exit_code`` is negative for a signal, None when unknown.
    A ``stream_error`` on a timed-out or cancelled run is reported without
    changing its status: the caller asked for that end.
    """

    status: ProcessStatus
    exit_code: int | None
    reason: str
    owner: ProcessOwner | None
    stdout: StreamCapture
    stderr: StreamCapture
    cleanup_confirmed: bool
    stream_error: str | None
    duration_s: float

    @property
    def started(self) -> bool:
        """Whether a process was spawned at all (False after a cancel before spawn)."""
        return self.owner is not None


def opaque_artifact_dir(root: Path, identifier: str, *, key: bytes) -> Path:
    """Return ``root / HMAC-SHA256(key, identifier)`` (hex, truncated): an artifact directory.

    Raw session ids never become path components: a hex name cannot traverse,
    listing ``root`` reveals no ids, and the key stops anyone from computing a
    session's directory from a guessed id.
    """
    if len(key) < MIN_KEY_BYTES:
        raise InvalidValue(f"artifact key must be at least {MIN_KEY_BYTES} bytes")
    digest = hmac.new(key, identifier.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return Path(root) / digest.hexdigest()[:OPAQUE_NAME_HEX]


class ProcessControl:
    """The caller's handle on one ``run_process`` call: cancel it, see its owner and outcome.

    An explicit cancel must *return* a ``cancelled`` outcome after cleanup;
    cancelling the awaiting task can only re-raise. When that task is
    cancelled anyway, ``outcome`` still holds the typed outcome, so the caller
    can persist it before re-raising. Create it inside the event loop; one
    control serves one run.
    """

    def __init__(self) -> None:
        self._cancel_requested = False
        self._claimed = False
        self._tree: _Tree | None = None
        self._started = anyio.Event()
        self._failure: str | None = None
        self.outcome: ProcessOutcome | None = None

    def fail(self, reason: str) -> None:
        """The caller could not keep its record of the run (a task log write failed).

        Ends the tree through the same single-flight end as an artifact write
        failure: the outcome is ``failed`` with ``reason`` (unless another end
        came first). Idempotent; the first reason is kept; safe before the spawn.
        """
        if self._failure is None:
            self._failure = bounded(reason)
        if self._tree is not None:
            self._tree.request_stop("write_failed")

    @property
    def failure(self) -> str | None:
        """The reason given to ``fail()``, if it was called."""
        return self._failure

    def cancel(self) -> None:
        """Ask the run to end its tree; idempotent, never blocks, safe before the spawn."""
        self._cancel_requested = True
        if self._tree is not None:
            self._tree.request_stop("cancelled")

    @property
    def cancel_requested(self) -> bool:
        """Whether ``cancel()`` was called."""
        return self._cancel_requested

    @property
    def owner(self) -> ProcessOwner | None:
        """The owner record once the process is spawned."""
        return None if self._tree is None else self._tree.owner

    async def wait_started(self) -> ProcessOwner | None:
        """Wait until the process is spawned and recorded (None if it never will be)."""
        await self._started.wait()
        return self.owner

    def tracked_pids(self) -> frozenset[int]:
        """Pids of the tree seen so far that were alive at the last snapshot."""
        return frozenset() if self._tree is None else self._tree.tracked_pids()

    def _claim(self) -> None:
        if self._claimed:
            raise InvalidValue("a ProcessControl serves one run_process call")
        self._claimed = True

    def _attach(self, tree: _Tree) -> None:
        self._tree = tree
        self._started.set()
        if self._failure is not None:
            tree.request_stop("write_failed")
        if self._cancel_requested:
            tree.request_stop("cancelled")

    def _finish(self, outcome: ProcessOutcome) -> None:
        self.outcome = outcome
        self._started.set()


class ProcessSupervisor(AsyncResource):
    """Owns every process tree the Host starts; closing it ends them all.

    ``aclose()`` is idempotent, shielded, and returns once every owned tree
    was ended (or given up on after the TERM grace and KILL confirmation
    time); each run then reports ``cancelled`` or ``indeterminate``. Runs
    refused after close raise ``RuntimeFailure`` before anything is spawned.
    """

    def __init__(self) -> None:
        self._trees: set[_Tree] = set()
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether ``aclose()`` has begun."""
        return self._closed

    def owners(self) -> tuple[ProcessOwner, ...]:
        """Owner records of the trees currently running (for status views)."""
        return tuple(tree.owner for tree in self._trees if tree.owner is not None)

    async def aclose(self) -> None:
        """End every owned tree: TERM, grace, KILL, confirm."""
        self._closed = True
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as group:
                for tree in list(self._trees):
                    group.start_soon(tree.terminate, "shutdown")

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeFailure("the process supervisor is closed")

    def _adopt(self, tree: _Tree) -> None:
        # Synchronous and right after the spawn: a concurrent aclose() either
        # sees this tree or has already set _closed, which stops it here.
        self._trees.add(tree)
        if self._closed:
            tree.request_stop("shutdown")

    def _release(self, tree: _Tree) -> None:
        self._trees.discard(tree)


# --- running one command --------------------------------------------------------------


def _encodable(value: str | os.PathLike[str]) -> bool:
    """Whether ``value`` becomes bytes for the kernel: a lone surrogate (``"\\ud800"``)
    does not, and would fail the spawn only after its files were made."""
    try:
        os.fsencode(value)
    except UnicodeError:
        return False
    return True


def _check_options(
    argv: Sequence[str], env: Mapping[str, str], cwd: Path, limits: Mapping[str, float]
) -> list[str]:
    if isinstance(argv, str) or not argv:
        raise InvalidValue("argv must be a non-empty sequence of strings")
    for arg in argv:
        if not isinstance(arg, str) or "\0" in arg:
            raise InvalidValue("argv items must be strings without NUL")
        if not _encodable(arg):
            raise InvalidValue("argv items must be text the file system can encode")
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidValue("environment keys and values must be strings")
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise InvalidValue(f"invalid environment entry {bounded(key, 60)!r}")
        if not _encodable(key) or not _encodable(value):
            # The name may itself be what cannot be encoded: shown escaped, bounded.
            raise InvalidValue(
                f"environment entry {bounded(ascii(key), 60)} is not text the file "
                "system can encode"
            )
    if not _encodable(cwd):
        raise InvalidValue("the working directory is not text the file system can encode")
    for name, limit in limits.items():
        if not is_seconds(limit, zero=name == "grace_s"):
            raise InvalidValue(f"{name} must be a positive finite number")
    return list(argv)


def _empty(path: Path | None = None) -> StreamCapture:
    return StreamCapture(tail="", total_bytes=0, total_chars=0, truncated=False, artifact=path)


async def _spawn(
    command: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    artifact_dir: Path,
    spawn_id: str,
    tail_chars: int,
    max_output_bytes: int | None,
    min_free_bytes: int | None,
) -> tuple[Process, tuple[_Sink, _Sink], int | None]:
    """Create the artifact files, then the process in a new session; undo the files on failure.

    Also returns the read end of the per-run init's status pipe (None without an init).
    """
    try:
        out_fd, out_path, err_fd, err_path = await anyio.to_thread.run_sync(
            _prepare_artifacts, artifact_dir, spawn_id
        )
    except OSError as exc:
        raise RuntimeFailure(f"cannot create the process artifacts: {exc}") from exc
    try:
        process, report = await spawn_under_init(
            command,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except BaseException as exc:
        # Whatever stopped the spawn (an OSError, or any other error the spawn raised
        # before the process existed), the files and their descriptors go with it.
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_discard, [(out_fd, out_path), (err_fd, err_path)])
        if isinstance(exc, OSError):
            raise RuntimeFailure(
                f"cannot start {bounded(command[0], 120)!r}: {exc.strerror or exc!r}"
            ) from exc
        raise
    sinks = (
        _Sink(
            name="stdout",
            fd=out_fd,
            path=out_path,
            tail_chars=tail_chars,
            write_chunks=_write_chunks,
            max_bytes=max_output_bytes,
            min_free_bytes=min_free_bytes,
        ),
        _Sink(
            name="stderr",
            fd=err_fd,
            path=err_path,
            tail_chars=tail_chars,
            write_chunks=_write_chunks,
            max_bytes=max_output_bytes,
            min_free_bytes=min_free_bytes,
        ),
    )
    return process, sinks, report


async def run_process(
    argv: Sequence[str],
    *,
    supervisor: ProcessSupervisor,
    cwd: Path,
    env: Mapping[str, str],
    deadline_s: float,
    artifact_dir: Path,
    tail_chars: int = DEFAULT_TAIL_CHARS,
    grace_s: float = DEFAULT_GRACE_S,
    control: ProcessControl | None = None,
    confirm_s: float = DEFAULT_CONFIRM_S,
    snapshot_interval_s: float = DEFAULT_SNAPSHOT_INTERVAL_S,
    drain_grace_s: float = DEFAULT_DRAIN_GRACE_S,
    max_processes: int | None = None,
    max_output_bytes: int | None = None,
    min_free_bytes: int | None = None,
    sandboxed: bool = False,
) -> ProcessOutcome:
    """Run ``argv`` as an owned process tree and return how it ended, after cleanup.

    ``env`` is the child's whole environment (an allowlist the caller built;
    ``os.environ`` is never inherited). ``artifact_dir`` is an opaque directory
    (see ``opaque_artifact_dir``); it is created 0o700 and gets two 0o600
    files named by the spawn id. Memory stays bounded however much the child
    prints: two tails of ``tail_chars`` characters and a few queued chunks.

    Ends: on its own (``exited``; descendants still running are then ended
    too), at ``deadline_s`` (``timed_out``), on ``control.cancel()`` or
    supervisor close (``cancelled``). Ending a tree sends TERM, waits
    ``grace_s``, then KILLs until every tracked process is gone or
    ``confirm_s`` passes (``indeterminate``). A tree seen with more than
    ``max_processes`` processes (besides its root) is ended as ``failed``, and
    so is one whose stdout or stderr passes ``max_output_bytes`` (its artifact
    keeps that much), and so is one whose output would leave less than
    ``min_free_bytes`` free on the artifacts' disk.
    ``argv`` may itself be a sandbox launcher (``_sandbox.sandbox_argv``): say so
    (``sandboxed``), and the Host's process adopts no orphan for it (``adopting``).

    Raises ``InvalidValue`` for bad options and ``RuntimeFailure`` when the
    supervisor is closed or the artifacts or the process cannot be created;
    nothing is left running then. If the awaiting task is cancelled, the tree
    is ended (shielded), ``control.outcome`` is set, and the cancellation
    propagates.
    """
    limits = {
        "deadline_s": deadline_s,
        "grace_s": grace_s,
        "confirm_s": confirm_s,
        "snapshot_interval_s": snapshot_interval_s,
        "drain_grace_s": drain_grace_s,
        "tail_chars": tail_chars,
    }
    command = _check_options(argv, env, Path(cwd), limits)
    if max_output_bytes is not None and (
        isinstance(max_output_bytes, bool)
        or not isinstance(max_output_bytes, int)
        or max_output_bytes < 1
    ):
        raise InvalidValue("max_output_bytes must be a positive integer (or None)")
    if min_free_bytes is not None and not is_count(min_free_bytes, low=0):
        raise InvalidValue("min_free_bytes must be a whole number of bytes (or None)")
    environment = dict(env)
    control = control if control is not None else ProcessControl()
    control._claim()
    supervisor._check_open()
    began = anyio.current_time()
    if control.cancel_requested:
        outcome = ProcessOutcome(
            status="cancelled",
            exit_code=None,
            reason="cancelled before the process started",
            owner=None,
            stdout=_empty(),
            stderr=_empty(),
            cleanup_confirmed=True,
            stream_error=None,
            duration_s=0.0,
        )
        control._finish(outcome)
        return outcome
    # Orphans of an unsandboxed tree come back to this process, never to init, until it
    # was ended.
    with adopting(sandboxed=sandboxed):
        spawn_id = new_id("spawn")
        spawned_at = time.time()
        # Shielded: a cancellation landing between creating the files or the process and
        # adopting it would leak them. Both steps are short; cancellation lands right after.
        with anyio.CancelScope(shield=True):
            process, sinks, report = await _spawn(
                command,
                cwd=cwd,
                env=environment,
                artifact_dir=Path(artifact_dir),
                spawn_id=spawn_id,
                tail_chars=tail_chars,
                max_output_bytes=max_output_bytes,
                min_free_bytes=min_free_bytes,
            )
        tree = _Tree(
            process,
            spawn_id=spawn_id,
            spawned_at=spawned_at,
            grace_s=grace_s,
            confirm_s=confirm_s,
            max_processes=max_processes,
        )
        supervisor._adopt(tree)
        try:
            run = _Run(
                process,
                tree,
                sinks,
                deadline_s=deadline_s,
                began=began,
                max_processes=max_processes,
                report=report,
                control=control,
            )
            try:
                await tree.record()
                control._attach(tree)
                outcome = await run.supervise(
                    snapshot_interval_s=snapshot_interval_s, drain_grace_s=drain_grace_s
                )
            except BaseException:
                with anyio.CancelScope(shield=True):
                    control._finish(await run.abandon(drain_grace_s=drain_grace_s))
                raise
        finally:
            supervisor._release(tree)
            if report is not None:
                os.close(report)
            # A cancellation that lands before a sink's task ran leaves its artifact open.
            with anyio.CancelScope(shield=True):
                for sink in sinks:
                    await sink.release()
        control._finish(outcome)
        return outcome


class _Run:
    """One spawned command from its first drained byte to its recorded outcome."""

    def __init__(
        self,
        process: Process,
        tree: _Tree,
        sinks: tuple[_Sink, _Sink],
        *,
        deadline_s: float,
        began: float,
        max_processes: int | None,
        report: int | None,
        control: ProcessControl,
    ) -> None:
        self.control = control
        self.max_processes = max_processes
        self.report = report
        self.process = process
        self.tree = tree
        self.sinks = sinks
        self.deadline_s = deadline_s
        self.began = began

    async def supervise(
        self, *, snapshot_interval_s: float, drain_grace_s: float
    ) -> ProcessOutcome:
        """Drain, wait for the first end, end the tree, then wait for the streams to close."""
        stdout, stderr = self.process.stdout, self.process.stderr
        assert stdout is not None  # spawned as pipes
        assert stderr is not None
        async with anyio.create_task_group() as group:
            group.start_soon(self.sinks[0].run, stdout, self._drain_failed, self._write_failed)
            group.start_soon(self.sinks[1].run, stderr, self._drain_failed, self._write_failed)
            group.start_soon(self.tree.watch, snapshot_interval_s)
            cause = await self._first_end()
            confirmed = await self.tree.terminate(cause)
            drained = await self._wait_streams(drain_grace_s)
            if drained:
                for sink in self.sinks:
                    await sink.closed.wait()
            group.cancel_scope.cancel()
        await self._close_process(drain_grace_s)
        return self._outcome(cause, confirmed=confirmed, drained=drained)

    async def abandon(self, *, drain_grace_s: float) -> ProcessOutcome:
        """The awaiting task was cancelled or failed: end the tree and record what is known."""
        confirmed = await self.tree.terminate("abandoned")
        await self._close_process(drain_grace_s)
        # Closed before the outcome names them: an empty stream's file is not kept, so
        # the captures must not name it (a cancellation can land before a sink's task ran).
        for sink in self.sinks:
            await sink.release()
        cause = self.tree.stop_cause or "abandoned"
        # The pipes were abandoned with the task, not left open: nothing to downgrade for.
        return self._outcome(cause, confirmed=confirmed, drained=True)

    def _drain_failed(self) -> None:
        self.tree.request_stop("drain_failed")

    def _write_failed(self) -> None:
        # Keeping the output is part of the run's contract: without it the run stops.
        self.tree.request_stop("write_failed")

    async def _first_end(self) -> _Cause:
        fired: list[_Cause] = []

        async def exited(scope: anyio.CancelScope) -> None:
            await self.process.wait()
            fired.append("exited")
            scope.cancel()

        async def stopped(scope: anyio.CancelScope) -> None:
            await self.tree.stop_requested.wait()
            fired.append(self.tree.stop_cause or "cancelled")
            scope.cancel()

        with anyio.move_on_after(self.deadline_s):
            async with anyio.create_task_group() as race:
                race.start_soon(exited, race.cancel_scope)
                race.start_soon(stopped, race.cancel_scope)
        return fired[0] if fired else "deadline"

    async def _wait_streams(self, drain_grace_s: float) -> bool:
        with anyio.move_on_after(drain_grace_s):
            for sink in self.sinks:
                await sink.eof.wait()
            await self.process.wait()
            return True
        return False

    async def _close_process(self, drain_grace_s: float) -> None:
        with anyio.move_on_after(drain_grace_s):
            await self.process.aclose()

    def _outcome(self, cause: _Cause, *, confirmed: bool, drained: bool) -> ProcessOutcome:
        code = self.process.returncode
        stream_error = next((sink.error for sink in self.sinks if sink.error), None)
        stream_error = stream_error or self.control.failure
        status = _STATUS[cause]
        if cause == "exited":
            reason = _exit_reason(code)
            if stream_error is not None:
                status, reason = "failed", f"{reason}; {stream_error}"
            if self.report is not None and read_report(self.report) is None:
                # Killed before it reported: orphans it kept went to the Host, out of sight.
                confirmed = False
                reason = f"{reason}; the run's init was killed, so processes it kept may live"
        else:
            reason = _REASONS[cause].format(
                deadline=self.deadline_s,
                processes=self.max_processes,
                failure=stream_error or "writing the output failed",
            )
        if not confirmed:
            status, reason = "indeterminate", f"{reason}; the process tree was not confirmed gone"
        elif not drained:
            status, reason = "indeterminate", f"{reason}; its output pipes never closed"
        return ProcessOutcome(
            status=status,
            exit_code=code,
            reason=bounded(reason),
            owner=self.tree.owner,
            stdout=self.sinks[0].capture(),
            stderr=self.sinks[1].capture(),
            cleanup_confirmed=confirmed,
            stream_error=stream_error,
            duration_s=anyio.current_time() - self.began,
        )


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "exited; exit status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"
