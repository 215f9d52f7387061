"""The Host process lifecycle: spawn, drain, deadline, cancellation and shutdown of a tree.

Foreground and background ``terminal.run`` share this one module so that every
child the Host starts is owned the same way (contract: EffectRuntime, terminal
execution):

- POSIX: a new session and process group per spawn; TERM, then KILL after a
  grace period. (Windows Job Objects are a later adapter.)
- An owner record of pid, pgid, spawn id and OS start time. Every signal sent
  by pid goes through a ``psutil.Process`` whose identity includes that start
  time, so a recycled pid is never signalled.
- Descendants are tracked, not only the group: a grandchild that called
  ``setsid()`` leaves the group but is found by ancestry in periodic
  snapshots and again at kill time, and is killed with the rest.
- stdout and stderr are drained continuously into bounded tails and, in full,
  into private artifact files. An artifact write failure is a terminal error
  but draining goes on, so the child never blocks on a full pipe.
- Cancellation is single-flight and reports ``cancelled`` only once every
  tracked process is confirmed gone; otherwise ``indeterminate``.

Every ``/proc`` read (psutil) and file write runs in a worker thread: the Host
shares its event loop with turns, widgets and the inbox.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import hashlib
import hmac
import math
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

import anyio
import psutil
from anyio.abc import ByteReceiveStream, Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from hostkit.errors import InvalidValue, RuntimeFailure, bounded
from hostkit.types import new_id

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
READ_CHUNK_BYTES = 256 * 1024
WRITE_QUEUE_CHUNKS = 16  # chunks in flight to one artifact writer: bounds memory, not speed
WRITE_BATCH_BYTES = 4 * 1024 * 1024  # one worker-thread hop writes up to this much
ARTIFACT_DIR_MODE = 0o700
ARTIFACT_FILE_MODE = 0o600
OPAQUE_NAME_HEX = 32
MIN_KEY_BYTES = 16
_POLL_S = 0.02  # while waiting for signalled processes to disappear
START_TIME_SLACK_S = 1.0  # psutil start times sit on a whole-second boot-time base

ProcessStatus = Literal["exited", "timed_out", "cancelled", "indeterminate", "failed"]
_Cause = Literal["exited", "deadline", "cancelled", "shutdown", "drain_failed", "abandoned"]
_REASONS: dict[_Cause, str] = {
    "deadline": "deadline of {deadline:g} s passed; the process tree was ended",
    "cancelled": "cancelled; the process tree was ended",
    "shutdown": "Host shutdown; the process tree was ended",
    "drain_failed": "reading the output failed; the process tree was ended",
    "abandoned": "the awaiting task was cancelled; the process tree was ended",
}
_STATUS: dict[_Cause, ProcessStatus] = {
    "exited": "exited",
    "deadline": "timed_out",
    "cancelled": "cancelled",
    "shutdown": "cancelled",
    "drain_failed": "failed",
    "abandoned": "cancelled",
}


@dataclass(frozen=True, slots=True)
class ProcessOwner:
    """Who the Host started: enough to find, revalidate and end the tree later.

    ``create_time`` is the OS start time (psutil, seconds since the epoch);
    None only when the process was gone before it could be read, and then
    nothing is ever signalled by its pid.
    """

    pid: int
    pgid: int
    spawn_id: str
    create_time: float | None
    platform: str


@dataclass(frozen=True, slots=True)
class StreamCapture:
    """One stream's bounded tail and totals, and where its full text was kept.

    ``tail`` is the last ``tail_chars`` characters (UTF-8, undecodable bytes
    replaced); ``truncated`` says the stream was longer than that.
    ``artifact`` is None when no file was written (the run never started).
    """

    tail: str
    total_bytes: int
    total_chars: int
    truncated: bool
    artifact: Path | None


@dataclass(frozen=True, slots=True)
class ProcessOutcome:
    """How one run ended, recorded after cleanup finished.

    ``status``: ``exited`` (the command ended on its own; any exit code),
    ``timed_out``, ``cancelled`` (explicit cancel, Host shutdown, or the
    awaiting task cancelled), ``failed`` (the command ended but writing an
    artifact or reading a pipe failed, see ``stream_error``) or
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
        self.outcome: ProcessOutcome | None = None

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
        if self._cancel_requested:
            tree.request_stop("cancelled")

    def _finish(self, outcome: ProcessOutcome) -> None:
        self.outcome = outcome
        self._started.set()


class ProcessSupervisor:
    """Owns every process tree the Host starts; closing it ends them all.

    ``aclose()`` is idempotent, shielded, and returns once every owned tree
    was ended (or given up on after the TERM grace and KILL confirmation
    time); each run then reports ``cancelled`` or ``indeterminate``. Runs
    refused after close raise ``RuntimeFailure`` before anything is spawned.
    """

    def __init__(self) -> None:
        self._trees: set[_Tree] = set()
        self._closed = False

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

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


# --- process trees --------------------------------------------------------------------


def _lookup_root(pid: int) -> tuple[psutil.Process, float] | None:
    try:
        root = psutil.Process(pid)
        return root, root.create_time()
    except psutil.Error:
        return None


def _scan(
    root: psutil.Process | None,
    not_before: float,
    pgid: int,
    known: Mapping[int, psutil.Process],
) -> dict[int, psutil.Process]:
    """The live, non-zombie members of one tree: known ones, their group/session, descendants.

    Group and session members count only when they started no earlier than
    ``not_before``. Identity is pid plus start time (``psutil.Process.__eq__``).
    """
    own = os.getpid()
    live: dict[int, psutil.Process] = {}
    children: dict[int, list[psutil.Process]] = {}
    for pid in psutil.pids():
        if pid == own:
            continue
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                children.setdefault(proc.ppid(), []).append(proc)
            ours = proc == known.get(pid) or proc == root
            if ours or (
                pgid in (os.getpgid(pid), os.getsid(pid)) and proc.create_time() >= not_before
            ):
                live[pid] = proc
        except (psutil.Error, OSError):
            continue
    pending = list(live.values())
    while pending:
        for child in children.get(pending.pop().pid, ()):
            if child.pid not in live:
                live[child.pid] = child
                pending.append(child)
    return live


def _signal(
    members: Sequence[psutil.Process], sig: int, root: psutil.Process | None, pgid: int
) -> None:
    # killpg only while the root is unreaped: its pid, and so the group id, cannot be reused.
    if root is not None and root.is_running():
        with contextlib.suppress(OSError):
            os.killpg(pgid, sig)
    for proc in members:
        try:
            proc.send_signal(sig)  # psutil refuses a pid whose start time changed
        except psutil.Error:
            continue


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_gone(members: Sequence[psutil.Process], timeout_s: float) -> None:
    # A worker-thread poll: these are not our children, so there is nothing to wait on.
    deadline = time.monotonic() + timeout_s
    while any(_alive(proc) for proc in members) and time.monotonic() < deadline:
        time.sleep(_POLL_S)


class _Tree:
    """One owned process tree: owner record, descendants seen so far, single-flight ending."""

    def __init__(
        self,
        process: Process,
        *,
        spawn_id: str,
        spawned_at: float,
        grace_s: float,
        confirm_s: float,
    ) -> None:
        self.process = process
        self.spawn_id = spawn_id
        self._spawned_at = spawned_at
        self.owner: ProcessOwner | None = None
        self.stop_requested = anyio.Event()
        self.stop_cause: _Cause | None = None
        self._grace_s = grace_s
        self._confirm_s = confirm_s
        self._root: psutil.Process | None = None
        self._known: dict[int, psutil.Process] = {}
        self._recorded = anyio.Event()
        self._ending: anyio.Event | None = None
        self._confirmed = False

    async def record(self) -> ProcessOwner:
        """Read the root's OS start time and write the owner record."""
        pid = self.process.pid
        found = None
        try:
            found = await anyio.to_thread.run_sync(_lookup_root, pid)
        finally:
            self._root, started = found if found else (None, None)
            self.owner = ProcessOwner(
                pid=pid,
                pgid=pid,
                spawn_id=self.spawn_id,
                create_time=started,
                platform=sys.platform,
            )
            self._recorded.set()
        return self.owner

    def tracked_pids(self) -> frozenset[int]:
        return frozenset(self._known)

    def request_stop(self, cause: _Cause) -> None:
        """Record the first reason to end the tree and wake the run; idempotent."""
        if self.stop_cause is None:
            self.stop_cause = cause
        self.stop_requested.set()

    async def watch(self, interval_s: float) -> None:
        """Snapshot descendants while the tree runs, so ones that detach are still known."""
        while True:
            await anyio.sleep(interval_s)
            await self._refresh()

    async def terminate(self, cause: _Cause) -> bool:
        """End the tree once, whoever asks; every caller gets whether it is confirmed gone."""
        self.request_stop(cause)
        if self._ending is None:
            self._ending = anyio.Event()
            try:
                with anyio.CancelScope(shield=True):
                    await self._recorded.wait()
                    self._confirmed = await self._end()
            finally:
                self._ending.set()
        else:
            await self._ending.wait()
        return self._confirmed

    async def _refresh(self) -> list[psutil.Process]:
        before = dict(self._known)
        # Without the root's own start time (it was reaped before it could be read), the
        # wall clock at spawn is the bound; psutil's boot-time base is only whole seconds.
        started = self.owner.create_time if self.owner else None
        not_before = self._spawned_at - START_TIME_SLACK_S if started is None else started
        pgid = self.process.pid
        live = await anyio.to_thread.run_sync(_scan, self._root, not_before, pgid, before)
        self._known.update(live)
        for pid, proc in before.items():
            if pid not in live and self._known.get(pid) is proc:
                del self._known[pid]
        return list(live.values())

    async def _end(self) -> bool:
        members = await self._refresh()
        if not members:
            return True
        pgid = self.process.pid
        await anyio.to_thread.run_sync(_signal, members, signal.SIGTERM, self._root, pgid)
        await anyio.to_thread.run_sync(_wait_gone, members, self._grace_s)
        with anyio.move_on_after(self._confirm_s):
            while members := await self._refresh():
                await anyio.to_thread.run_sync(_signal, members, signal.SIGKILL, self._root, pgid)
                await anyio.sleep(_POLL_S)
            return True
        return False


# --- streams --------------------------------------------------------------------------


def _prepare_artifacts(directory: Path, spawn_id: str) -> tuple[int, Path, int, Path]:
    directory.mkdir(mode=ARTIFACT_DIR_MODE, parents=True, exist_ok=True)
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise OSError(f"{directory} is not a directory owned by this user")
    os.chmod(directory, ARTIFACT_DIR_MODE)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    opened: list[tuple[int, Path]] = []
    try:
        for name in ("stdout", "stderr"):
            path = directory / f"{spawn_id}.{name}"
            fd = os.open(path, flags, ARTIFACT_FILE_MODE)
            opened.append((fd, path))
            os.fchmod(fd, ARTIFACT_FILE_MODE)  # exact, whatever the umask
    except OSError:
        _discard(opened)
        raise
    (out_fd, out_path), (err_fd, err_path) = opened
    return out_fd, out_path, err_fd, err_path


def _discard(opened: Sequence[tuple[int, Path]]) -> None:
    for fd, path in opened:
        os.close(fd)
        path.unlink(missing_ok=True)


def _write_chunks(fd: int, chunks: Sequence[bytes]) -> None:
    for chunk in chunks:
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]


def _close_artifact(fd: int, *, sync: bool) -> None:
    try:
        if sync:
            os.fsync(fd)  # the artifact is the durable record of the output
    finally:
        os.close(fd)


class _Sink:
    """One stream: a bounded tail and totals, and a writer that keeps the full stream on disk."""

    def __init__(self, *, name: str, fd: int, path: Path, tail_chars: int) -> None:
        self.name = name
        self.path = path
        self.error: str | None = None
        self.eof = anyio.Event()
        self.closed = anyio.Event()
        self._fd: int | None = fd
        self._tail_chars = tail_chars
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._tail = ""
        self._bytes = 0
        self._chars = 0

    def capture(self) -> StreamCapture:
        """The stream as seen so far."""
        return StreamCapture(
            tail=self._tail,
            total_bytes=self._bytes,
            total_chars=self._chars,
            truncated=self._chars > self._tail_chars,
            artifact=self.path,
        )

    async def run(self, stream: ByteReceiveStream, on_failure: Callable[[], None]) -> None:
        """Drain ``stream`` to its end, handing chunks to the artifact writer."""
        send, receive = anyio.create_memory_object_stream[bytes](WRITE_QUEUE_CHUNKS)
        async with anyio.create_task_group() as group:
            group.start_soon(self._persist, receive)
            async with send:
                await self._drain(stream, send, on_failure)

    async def _drain(
        self,
        stream: ByteReceiveStream,
        send: MemoryObjectSendStream[bytes],
        on_failure: Callable[[], None],
    ) -> None:
        try:
            while True:
                try:
                    chunk = await stream.receive(READ_CHUNK_BYTES)
                except anyio.EndOfStream:
                    break
                self._take(chunk)
                await send.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            self.error = self.error or bounded(f"reading {self.name} failed: {exc!r}")
            on_failure()
        finally:
            self._take(b"", final=True)
            self.eof.set()

    def _take(self, chunk: bytes, *, final: bool = False) -> None:
        self._bytes += len(chunk)
        text = self._decoder.decode(chunk, final)
        self._chars += len(text)
        if len(text) >= self._tail_chars:
            self._tail = text[len(text) - self._tail_chars :]
        elif text:
            self._tail = (self._tail + text)[-self._tail_chars :]

    async def _persist(self, receive: MemoryObjectReceiveStream[bytes]) -> None:
        try:
            async with receive:
                async for chunk in receive:
                    batch, size = [chunk], len(chunk)
                    while size < WRITE_BATCH_BYTES:
                        try:
                            more = receive.receive_nowait()
                        except (anyio.WouldBlock, anyio.EndOfStream):
                            break
                        batch.append(more)
                        size += len(more)
                    await self._write(batch)
        finally:
            with anyio.CancelScope(shield=True):
                await self._close(sync=self.error is None)
                self.closed.set()

    async def _write(self, batch: list[bytes]) -> None:
        # After a failure the chunks are dropped, but still consumed: the drain never stalls.
        if self._fd is None:
            return
        try:
            await anyio.to_thread.run_sync(_write_chunks, self._fd, batch)
        except OSError as exc:
            self.error = bounded(f"{self.name} artifact write failed: {exc.strerror or exc!r}")
            await self._close(sync=False)

    async def _close(self, *, sync: bool) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            await anyio.to_thread.run_sync(functools.partial(_close_artifact, fd, sync=sync))
        except OSError as exc:
            self.error = self.error or bounded(f"{self.name} artifact sync failed: {exc!r}")


# --- running one command --------------------------------------------------------------


def _check_options(
    argv: Sequence[str], env: Mapping[str, str], limits: Mapping[str, float]
) -> list[str]:
    if isinstance(argv, str) or not argv:
        raise InvalidValue("argv must be a non-empty sequence of strings")
    for arg in argv:
        if not isinstance(arg, str) or "\0" in arg:
            raise InvalidValue("argv items must be strings without NUL")
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidValue("environment keys and values must be strings")
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise InvalidValue(f"invalid environment entry {bounded(key, 60)!r}")
    for name, value in limits.items():
        if not math.isfinite(value) or value < 0 or (value == 0 and name != "grace_s"):
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
) -> tuple[Process, tuple[_Sink, _Sink]]:
    """Create the artifact files, then the process in a new session; undo the files on failure."""
    try:
        out_fd, out_path, err_fd, err_path = await anyio.to_thread.run_sync(
            _prepare_artifacts, artifact_dir, spawn_id
        )
    except OSError as exc:
        raise RuntimeFailure(f"cannot create the process artifacts: {exc}") from exc
    try:
        process = await anyio.open_process(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        await anyio.to_thread.run_sync(_discard, [(out_fd, out_path), (err_fd, err_path)])
        raise RuntimeFailure(f"cannot start {command[0]!r}: {exc.strerror or exc!r}") from exc
    sinks = (
        _Sink(name="stdout", fd=out_fd, path=out_path, tail_chars=tail_chars),
        _Sink(name="stderr", fd=err_fd, path=err_path, tail_chars=tail_chars),
    )
    return process, sinks


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
    ``confirm_s`` passes (``indeterminate``).

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
    command = _check_options(argv, env, limits)
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
    spawn_id = new_id("spawn")
    spawned_at = time.time()
    # Shielded: a cancellation landing between creating the files or the process and
    # adopting it would leak them. Both steps are short; cancellation lands right after.
    with anyio.CancelScope(shield=True):
        process, sinks = await _spawn(
            command,
            cwd=cwd,
            env=environment,
            artifact_dir=Path(artifact_dir),
            spawn_id=spawn_id,
            tail_chars=tail_chars,
        )
    tree = _Tree(
        process, spawn_id=spawn_id, spawned_at=spawned_at, grace_s=grace_s, confirm_s=confirm_s
    )
    supervisor._adopt(tree)
    try:
        run = _Run(process, tree, sinks, deadline_s=deadline_s, began=began)
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
    ) -> None:
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
            group.start_soon(self.sinks[0].run, stdout, self._drain_failed)
            group.start_soon(self.sinks[1].run, stderr, self._drain_failed)
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
        cause = self.tree.stop_cause or "abandoned"
        # The pipes were abandoned with the task, not left open: nothing to downgrade for.
        return self._outcome(cause, confirmed=confirmed, drained=True)

    def _drain_failed(self) -> None:
        self.tree.request_stop("drain_failed")

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
        status = _STATUS[cause]
        if cause == "exited":
            reason = _exit_reason(code)
            if stream_error is not None:
                status, reason = "failed", f"{reason}; {stream_error}"
        else:
            reason = _REASONS[cause].format(deadline=self.deadline_s)
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
