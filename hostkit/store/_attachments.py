"""The store's attachments group: content-addressed bytes, each copy owned by one principal.

A row is keyed by ``(principal_id, ref)``: the same bytes added by two
principals are two rows, so no principal can learn (or use) what another
stored by guessing a digest. Nothing deletes a row: a turn's transcript
references its attachments for as long as the turn is kept.
"""

from __future__ import annotations

import hashlib
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from hostkit.errors import InvalidValue
from hostkit.store._owned import now
from hostkit.store._turn_values import check_id
from hostkit.types import MAX_ATTACHMENT_BYTES, check_content, content_ref

if TYPE_CHECKING:
    from hostkit.store._row_store import RowStore

__all__ = ["AttachmentStore", "SqlAttachmentStore", "StoredAttachment"]

# One turn's worth of refs per lookup: TurnRequest allows far fewer.
_MAX_LOOKUP = 64


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


def _digest(data: bytes, media_type: str) -> str:
    """Validate and hash (in a worker thread: a few milliseconds per MiB)."""
    check_content(data, media_type)
    return content_ref(hashlib.sha256(data).hexdigest())


def _refs(refs: Sequence[str]) -> list[str]:
    unique = list(dict.fromkeys(refs))
    if len(unique) > _MAX_LOOKUP:
        raise InvalidValue(f"at most {_MAX_LOOKUP} attachment refs per lookup")
    for ref in unique:
        check_id("ref", ref)
    return unique


class SqlAttachmentStore(AttachmentStore):
    """The SQLite adapter of AttachmentStore: the ``attachments`` table (schema v9)."""

    def __init__(self, db: RowStore) -> None:
        self._db = db

    async def add(self, *, principal_id: str, data: bytes, media_type: str) -> StoredAttachment:
        check_id("principal_id", principal_id)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidValue("attachment data must be bytes")
        blob = bytes(data)
        if not 0 < len(blob) <= MAX_ATTACHMENT_BYTES:
            raise InvalidValue(f"an attachment is 1-{MAX_ATTACHMENT_BYTES} bytes")
        if not isinstance(media_type, str):
            raise InvalidValue("media_type must be text")
        ref = await anyio.to_thread.run_sync(_digest, blob, media_type)

        def insert(conn: sqlite3.Connection) -> StoredAttachment:
            conn.execute(
                "INSERT INTO attachments (principal_id, ref, media_type, size, data, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (principal_id, ref) DO NOTHING",
                [principal_id, ref, media_type, len(blob), blob, now(conn)],
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
        check_id("principal_id", principal_id)
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
        check_id("principal_id", principal_id)
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
