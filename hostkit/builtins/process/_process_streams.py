"""A run's output streams: bounded tails, totals and private full artifact files.

stdout and stderr are drained continuously into bounded tails and, in full,
into private artifact files (a 0o700 directory, 0o600 files created
exclusively, never through a symlink). A stream that ends empty leaves no
file: its capture names no artifact. While a file is written its descriptor
holds a shared ``flock``, so the retention pass (``_artifact_retention``),
in this Host process or another, never deletes a run's output under it.

An artifact write failure is a terminal error: the sink reports it at once
(the run ends the process tree and fails) and draining goes on until the
tree is gone, so the child never blocks on a full pipe meanwhile. So is a
stream that passes its output limit: the artifact keeps the first
``max_bytes`` and the run fails, as a process fails whose file passes its
size limit (the artifact is the Host's file, on the Host's disk, out of the
sandbox's limits).

Every file write runs in a worker thread: the Host shares its event loop with
turns, widgets and the inbox.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import fcntl
import functools
import os
import secrets
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from hostkit._free_space import free_bytes_at
from hostkit.errors import ConfigError, bounded

__all__ = ["ARTIFACT_KEY_FILE", "StreamCapture", "load_artifact_key"]

READ_CHUNK_BYTES = 256 * 1024
WRITE_QUEUE_CHUNKS = 16  # chunks in flight to one artifact writer: bounds memory, not speed
WRITE_BATCH_BYTES = 4 * 1024 * 1024  # one worker-thread hop writes up to this much
ARTIFACT_DIR_MODE = 0o700
ARTIFACT_FILE_MODE = 0o600


@dataclass(frozen=True, slots=True)
class StreamCapture:
    """One stream's bounded tail and totals, and where its full text was kept.

    ``tail`` is the last ``tail_chars`` characters (UTF-8, undecodable bytes
    replaced); ``truncated`` says the stream was longer than that.
    ``artifact`` is None when no file was kept: the run never started, or the
    stream was empty (its empty file is removed when the stream closes).
    """

    tail: str
    total_bytes: int
    total_chars: int
    truncated: bool
    artifact: Path | None


def _prepare_artifacts(directory: Path, spawn_id: str) -> tuple[int, Path, int, Path]:
    try:
        return _create_artifacts(directory, spawn_id)
    except FileNotFoundError:
        # Retention removed the session's empty directory between the mkdir and the open:
        # make it again, once.
        return _create_artifacts(directory, spawn_id)


def _create_artifacts(directory: Path, spawn_id: str) -> tuple[int, Path, int, Path]:
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
            # Held until the file is closed: retention leaves a locked file alone. A file
            # system without locks leaves the age alone to protect it (no run lasts an hour).
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
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


def _close_artifact(fd: int, path: Path, *, sync: bool) -> bool:
    """Close the artifact; an empty one is removed instead of kept (True then)."""
    try:
        if os.fstat(fd).st_size == 0:
            # No output: nothing to keep, and nothing for retention to find later.
            path.unlink(missing_ok=True)
            return True
        if sync:
            os.fsync(fd)  # the artifact is the durable record of the output
        return False
    finally:
        os.close(fd)


class _Sink:
    """One stream: a bounded tail and totals, and a writer that keeps the full stream on disk."""

    def __init__(
        self,
        *,
        name: str,
        fd: int,
        path: Path,
        tail_chars: int,
        write_chunks: Callable[[int, Sequence[bytes]], None],
        max_bytes: int | None = None,
        min_free_bytes: int | None = None,
    ) -> None:
        self.name = name
        self.path: Path | None = path  # None once an empty file was removed
        self.error: str | None = None
        self.eof = anyio.Event()
        self.closed = anyio.Event()
        self._fd: int | None = fd
        # Handed in by the spawn rather than looked up here, so the writer stays
        # replaceable as ``hostkit.builtins.process._process._write_chunks`` (the disk-full test).
        self._write_chunks = write_chunks
        self._tail_chars = tail_chars
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._tail = ""
        self._bytes = 0
        self._chars = 0
        self._max_bytes = max_bytes
        self._min_free = min_free_bytes
        self._kept = 0  # bytes written to the artifact

    def capture(self) -> StreamCapture:
        """The stream as seen so far."""
        return StreamCapture(
            tail=self._tail,
            total_bytes=self._bytes,
            total_chars=self._chars,
            truncated=self._chars > self._tail_chars,
            artifact=self.path,
        )

    async def run(
        self,
        stream: ByteReceiveStream,
        on_failure: Callable[[], None],
        on_write_failure: Callable[[], None],
    ) -> None:
        """Drain ``stream`` to its end, handing chunks to the artifact writer.

        ``on_failure`` is called when reading the pipe fails, ``on_write_failure``
        when writing the artifact does (``error`` says which); draining goes on.
        """
        send, receive = anyio.create_memory_object_stream[bytes](WRITE_QUEUE_CHUNKS)
        async with anyio.create_task_group() as group:
            group.start_soon(self._persist, receive, on_write_failure)
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

    async def _persist(
        self, receive: MemoryObjectReceiveStream[bytes], on_write_failure: Callable[[], None]
    ) -> None:
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
                    if not await self._write(self._within_limit(batch, size)):
                        on_write_failure()
        finally:
            with anyio.CancelScope(shield=True):
                await self._close(sync=self.error is None)
                self.closed.set()

    def _within_limit(self, batch: list[bytes], size: int) -> list[bytes] | None:
        """``batch``, cut at the output limit; None (and ``error`` set) past it."""
        if self._max_bytes is None or self._kept + size <= self._max_bytes:
            return batch
        room = self._max_bytes - self._kept
        kept: list[bytes] = []
        for chunk in batch:
            if room <= 0:
                break
            kept.append(chunk[:room])
            room -= len(kept[-1])
        if self.error is None:
            limit = _mib(self._max_bytes)
            self.error = (
                f"{self.name} passed the output limit of {limit} (its artifact keeps the "
                f"first {limit})"
            )
        return kept or None

    async def _write(self, batch: list[bytes] | None) -> bool:
        """Write ``batch`` (None: the limit was passed); False once writing has stopped."""
        # After a failure the chunks are dropped, but still consumed: the drain never stalls.
        if self._fd is None:
            return False
        if batch:
            try:
                await anyio.to_thread.run_sync(self._write_leaving_free, self._fd, batch)
            except OSError as exc:
                self.error = bounded(f"{self.name} artifact write failed: {exc.strerror or exc!r}")
                await self._close(sync=False)
                return False
            self._kept += sum(len(chunk) for chunk in batch)
        if self._max_bytes is not None and self.error is not None:
            await self._close(sync=True)  # what it kept is the record of the output
            return False
        return True

    def _write_leaving_free(self, fd: int, batch: Sequence[bytes]) -> None:
        """Worker thread: write ``batch``, unless its disk would keep less than the reserve."""
        if self._min_free is not None:
            size = sum(len(chunk) for chunk in batch)
            if free_bytes_at(fd) - size < self._min_free:
                raise OSError(
                    errno.ENOSPC,
                    f"the disk would keep less than the {_mib(self._min_free)} the Host "
                    "reserves (host.artifact_reserve_mb)",
                )
        self._write_chunks(fd, batch)

    async def release(self) -> None:
        """Close the artifact if the sink's task never got to (a run cancelled as it began);
        after a drained run it is closed already and this does nothing."""
        await self._close(sync=False)

    async def _close(self, *, sync: bool) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        assert self.path is not None  # forgotten only once its file is closed
        close = functools.partial(_close_artifact, fd, self.path, sync=sync)
        try:
            if await anyio.to_thread.run_sync(close):
                self.path = None
        except OSError as exc:
            self.error = self.error or bounded(f"{self.name} artifact sync failed: {exc!r}")


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):g} MiB"


ARTIFACT_KEY_FILE = ".key"


def load_artifact_key(root: Path) -> bytes:
    """The artifact root's HMAC key: created once (0o600, 32 random bytes), then reused.

    A stable key keeps a session's opaque directory the same across Host
    restarts, so its earlier artifacts stay findable (and removable). Blocking
    file I/O: call it in a worker thread.
    """
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = root / ARTIFACT_KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        with open(path, "rb", opener=lambda name, flags: os.open(name, flags | os.O_NOFOLLOW)) as f:
            key = f.read(65)
        if len(key) < 32:
            raise ConfigError(
                f"{path} is not a hostkit artifact key", key="host.artifacts"
            ) from None
        return key
    key = secrets.token_bytes(32)
    try:
        os.write(fd, key)
        os.fsync(fd)
    finally:
        os.close(fd)
    return key
