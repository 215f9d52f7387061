"""The store's attachments group: content-addressed bytes, each copy owned by one principal.

A row is keyed by ``(principal_id, ref)``: the same bytes added by two
principals are two rows, so no principal can learn (or use) what another
stored by guessing a digest.

An attachment is *pending* (a row in ``attachments_pending``) from the moment
it is added until a turn takes it: the admission of a turn carrying it
deletes that row in its own transaction (and refuses the turn when the
attachment is gone), as does any transcript write naming it. Turns and
messages are never deleted, so a taken attachment is kept for good. One no
turn ever took (its turn refused, never sent, or lost to a crash before
admission) is reclaimed once pending longer than a grace period:
``reclaim`` deletes such rows in bounded batches, so uploads cannot fill the
database. Adding the same bytes again restarts a pending row's grace period.
"""

from __future__ import annotations

import hashlib
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio

from hostkit.errors import InvalidTurnRequest, InvalidValue
from hostkit.store._checks import check_count
from hostkit.store._owned import now
from hostkit.store._turn_values import check_id
from hostkit.types import (
    MAX_ATTACHMENT_BYTES,
    ModelMessage,
    check_content,
    check_key,
    content_ref,
    is_seconds,
)

if TYPE_CHECKING:
    from hostkit.store._row_store import RowStore

__all__ = [
    "ATTACHMENT_GRACE_S",
    "MAX_RECLAIM",
    "RECLAIM_BATCH",
    "AttachmentStore",
    "SqlAttachmentStore",
    "StoredAttachment",
    "attached_refs",
    "keep_attachments",
]

# One turn's worth of refs per lookup: TurnRequest allows far fewer.
_MAX_LOOKUP = 64
# How long an attachment no turn took is kept: room for a client to send its turn (and
# for that turn to wait for a busy session) before the bytes are reclaimed.
ATTACHMENT_GRACE_S = 86_400.0
_MAX_GRACE_S = 3_650 * 86_400.0
# Rows a reclaim pass deletes by default (one write transaction).
RECLAIM_BATCH = 100
# Rows one ``reclaim`` deletes at most: up to 5 MiB each, in one write transaction.
MAX_RECLAIM = 1_000


@dataclass(frozen=True, slots=True)
class StoredAttachment:
    """What the store knows about one principal's attachment (not its bytes)."""

    ref: str
    media_type: str
    size: int


class AttachmentStore(ABC):
    """Attachment bytes by ``(principal_id, ref)``; every adapter implements this group.

    ``add`` validates before it writes (``InvalidValue``, nothing stored):
    at most ``MAX_ATTACHMENT_BYTES``, non-empty, and content that is what
    ``media_type`` says (``check_content``). Lookups answer only the
    principal's own rows; a ref the principal does not have is absent from
    the answer, whether it exists for someone else or not at all.
    """

    @abstractmethod
    async def add(self, *, principal_id: str, data: bytes, media_type: str) -> StoredAttachment:
        """Store ``data`` for ``principal_id`` (idempotent for the same bytes and type)."""

    @abstractmethod
    async def describe(
        self, *, principal_id: str, refs: Sequence[str]
    ) -> Mapping[str, StoredAttachment]:
        """The principal's attachments among ``refs`` (at most 64), without their bytes."""

    @abstractmethod
    async def load(self, *, principal_id: str, refs: Sequence[str]) -> Mapping[str, bytes]:
        """The bytes of the principal's attachments among ``refs`` (at most 64)."""

    @abstractmethod
    async def reclaim(
        self, *, grace_s: float = ATTACHMENT_GRACE_S, limit: int = RECLAIM_BATCH
    ) -> int:
        """Delete up to ``limit`` attachments no turn took, pending over ``grace_s``; how many.

        One transaction, oldest first; ``limit`` is at most ``MAX_RECLAIM`` so a
        pass never holds the write lock long. The age is by the database clock.
        A turn admitted concurrently either keeps its rows (its admission
        committed first) or is refused as if they were never added.
        """


def _digest(data: bytes, media_type: str) -> str:
    """Validate and hash (in a worker thread: a few milliseconds per MiB)."""
    check_content(data, media_type)
    return content_ref(hashlib.sha256(data).hexdigest())


def _cutoff(conn: sqlite3.Connection, grace_s: float) -> str:
    """``now(conn)`` less ``grace_s``, in the ISO text ``added_at`` is written in (``<`` orders)."""
    moment = datetime.strptime(now(conn), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    before = moment - timedelta(seconds=grace_s)
    return before.strftime("%Y-%m-%dT%H:%M:%S.") + f"{before.microsecond // 1000:03d}Z"


def attached_refs(message: ModelMessage | Mapping[str, Any] | None) -> list[str]:
    """The refs of the attachments a message carries: a ``ModelMessage``, or the stored
    form of one (``{"attachments": [{"ref": ...}, ...]}``, as ``to_json`` writes it)."""
    if message is None:
        return []
    if isinstance(message, ModelMessage):
        return list(dict.fromkeys(part.attachment.ref for part in message.attachments))
    listed = message.get("attachments")
    if not isinstance(listed, Sequence) or isinstance(listed, str):
        return []
    refs = (item.get("ref") for item in listed if isinstance(item, Mapping))
    return list(dict.fromkeys(ref for ref in refs if isinstance(ref, str)))


def keep_attachments(
    conn: sqlite3.Connection, principal_id: str, refs: Iterable[str], *, required: bool
) -> None:
    """The principal's attachments among ``refs`` are no longer pending (a turn references
    them), in the caller's transaction; with ``required``, refuse (``InvalidTurnRequest``)
    unless every one exists.

    Admission calls it with ``required``: an attachment reclaimed after the
    turn's pre-admission check refuses the turn as a ref never added would
    be, rather than admitting a turn whose bytes are gone. (On PostgreSQL the
    reclaim and this delete the same pending row, so one of two concurrent
    transactions is run again and sees what the other did.)
    """
    wanted = list(dict.fromkeys(refs))
    for start in range(0, len(wanted), _MAX_LOOKUP):
        chunk = wanted[start : start + _MAX_LOOKUP]
        marks = ", ".join("?" * len(chunk))
        conn.execute(
            f"DELETE FROM attachments_pending WHERE principal_id = ? AND ref IN ({marks})",
            [principal_id, *chunk],
        )
        if not required:
            continue
        present = {
            row[0]
            for row in conn.execute(
                f"SELECT ref FROM attachments WHERE principal_id = ? AND ref IN ({marks})",
                [principal_id, *chunk],
            )
        }
        missing = [ref for ref in chunk if ref not in present]
        if missing:
            raise InvalidTurnRequest(
                f"attachment {missing[0]} was not found for this principal "
                "(host.attachments.add it)"
            )


def _refs(refs: Sequence[str]) -> list[str]:
    unique = list(dict.fromkeys(refs))
    if len(unique) > _MAX_LOOKUP:
        raise InvalidValue(f"at most {_MAX_LOOKUP} attachment refs per lookup")
    for ref in unique:
        ref = check_id("ref", ref)
    return unique


class SqlAttachmentStore(AttachmentStore):
    """The SQLite adapter of AttachmentStore: the ``attachments`` table (schema v9)."""

    def __init__(self, db: RowStore) -> None:
        self._db = db

    async def add(self, *, principal_id: str, data: bytes, media_type: str) -> StoredAttachment:
        principal_id = check_key("principal_id", principal_id)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidValue("attachment data must be bytes")
        blob = bytes(data)
        if not 0 < len(blob) <= MAX_ATTACHMENT_BYTES:
            raise InvalidValue(f"an attachment is 1-{MAX_ATTACHMENT_BYTES} bytes")
        if not isinstance(media_type, str):
            raise InvalidValue("media_type must be text")
        ref = await anyio.to_thread.run_sync(_digest, blob, media_type)

        def insert(conn: sqlite3.Connection) -> StoredAttachment:
            at = now(conn)
            added = conn.execute(
                "INSERT INTO attachments (principal_id, ref, media_type, size, data, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (principal_id, ref) DO NOTHING",
                [principal_id, ref, media_type, len(blob), blob, at],
            )
            if added.rowcount == 1:
                conn.execute(
                    "INSERT INTO attachments_pending (principal_id, ref, added_at) "
                    "VALUES (?, ?, ?)",
                    [principal_id, ref, at],
                )
            else:
                # Added again before a turn took it: its grace period starts over. (One a
                # turn took has no pending row, and stays kept.)
                conn.execute(
                    "UPDATE attachments_pending SET added_at = ? WHERE principal_id = ? "
                    "AND ref = ?",
                    [at, principal_id, ref],
                )
            cursor = conn.cursor()
            cursor.row_factory = sqlite3.Row
            row = cursor.execute(
                "SELECT media_type FROM attachments WHERE principal_id = ? AND ref = ?",
                [principal_id, ref],
            ).fetchone()
            if row["media_type"] != media_type:
                raise InvalidValue(f"this content was already added as {row['media_type']}")
            return StoredAttachment(ref, media_type, len(blob))

        return await self._db.write(insert)

    async def describe(
        self, *, principal_id: str, refs: Sequence[str]
    ) -> Mapping[str, StoredAttachment]:
        principal_id = check_key("principal_id", principal_id)
        wanted = _refs(refs)
        if not wanted:
            return {}

        def select(conn: sqlite3.Connection) -> Mapping[str, StoredAttachment]:
            cursor = conn.cursor()
            cursor.row_factory = sqlite3.Row
            marks = ", ".join("?" * len(wanted))
            rows = cursor.execute(
                f"SELECT ref, media_type, size FROM attachments "
                f"WHERE principal_id = ? AND ref IN ({marks})",
                [principal_id, *wanted],
            ).fetchall()
            return {
                row["ref"]: StoredAttachment(row["ref"], row["media_type"], int(row["size"]))
                for row in rows
            }

        return await self._db.read(select)

    async def load(self, *, principal_id: str, refs: Sequence[str]) -> Mapping[str, bytes]:
        principal_id = check_key("principal_id", principal_id)
        wanted = _refs(refs)
        if not wanted:
            return {}

        def select(conn: sqlite3.Connection) -> Mapping[str, bytes]:
            cursor = conn.cursor()
            cursor.row_factory = sqlite3.Row
            marks = ", ".join("?" * len(wanted))
            rows = cursor.execute(
                f"SELECT ref, data FROM attachments WHERE principal_id = ? AND ref IN ({marks})",
                [principal_id, *wanted],
            ).fetchall()
            return {row["ref"]: bytes(row["data"]) for row in rows}

        return await self._db.read(select)

    async def reclaim(
        self, *, grace_s: float = ATTACHMENT_GRACE_S, limit: int = RECLAIM_BATCH
    ) -> int:
        if not is_seconds(grace_s, zero=True, high=_MAX_GRACE_S):
            raise InvalidValue(f"grace_s must be 0-{_MAX_GRACE_S:.0f} seconds")
        most = check_count("limit", limit, MAX_RECLAIM)

        def delete(conn: sqlite3.Connection) -> int:
            due = conn.execute(
                "SELECT principal_id, ref FROM attachments_pending WHERE added_at < ? "
                "ORDER BY added_at LIMIT ?",
                [_cutoff(conn, grace_s), most],
            ).fetchall()
            deleted = 0
            for principal_id, ref in due:
                # Only a pending row's attachment is deleted: one a turn took has none.
                conn.execute(
                    "DELETE FROM attachments_pending WHERE principal_id = ? AND ref = ?",
                    [principal_id, ref],
                )
                deleted += conn.execute(
                    "DELETE FROM attachments WHERE principal_id = ? AND ref = ?",
                    [principal_id, ref],
                ).rowcount
            return deleted

        return await self._db.write(delete)
