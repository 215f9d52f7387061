"""The store's attachments group: content-addressed bytes, each copy owned by one principal.

A row is keyed by ``(principal_id, ref)``: the same bytes added by two
principals are two rows, so no principal can learn (or use) what another
stored by guessing a digest.

Bytes are kept while something holds them, and only then:

- a *reference* (a row in ``attachment_refs``: principal, ref, session) says a
  session's turn or transcript carries them. The admission of a turn carrying
  them writes it, in its own transaction (refusing the turn when the bytes are
  gone), as does any transcript write naming them; erasing the session
  deletes the session's references;
- a *pending upload* (a row in ``attachments_pending`` with its count of
  ``uploads``) says an add waits for its turn. Every add counts one more and
  restarts the grace period; the first take of the bytes by a session counts
  one off, so two outstanding uploads of the same bytes (for two
  conversations) are two marks, and one turn taking them leaves the other.

The bytes go when the last holder goes: an erase deletes them once no
reference and no pending upload remains, and ``reclaim`` deletes pending
uploads older than the grace period (an upload no turn took: its turn
refused, never sent, or lost to a crash before admission) and the bytes with
them unless a reference holds them, in bounded batches, so uploads cannot
fill the database.
"""

from __future__ import annotations

import hashlib
import sqlite3
from abc import ABC, abstractmethod
from collections import Counter
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
    "release_session",
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
        """End up to ``limit`` pending uploads added over ``grace_s`` ago, deleting their
        bytes unless a reference holds them; how many attachments were deleted.

        One transaction, oldest first; ``limit`` is at most ``MAX_RECLAIM`` so a
        pass never holds the write lock long. The age is by the database clock
        (of the latest add: each add restarts it). A turn admitted concurrently
        either keeps its rows (its admission committed first) or is refused as if
        they were never added.
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


def _due(
    conn: sqlite3.Connection, cutoff: str, most: int, *, referenced: bool
) -> list[tuple[str, str]]:
    """Up to ``most`` pending uploads last added before ``cutoff``, oldest first, of bytes
    a session references (or of bytes none does)."""
    found = conn.execute(
        "SELECT p.principal_id, p.ref FROM attachments_pending p WHERE p.added_at < ? "
        f"AND {'' if referenced else 'NOT '}EXISTS (SELECT 1 FROM attachment_refs r "
        "WHERE r.principal_id = p.principal_id AND r.ref = p.ref) ORDER BY p.added_at LIMIT ?",
        [cutoff, most],
    )
    return [(str(principal_id), str(ref)) for principal_id, ref in found]


def attached_refs(
    message: ModelMessage | Mapping[str, Any] | None, *, unique: bool = True
) -> list[str]:
    """The refs of the attachments a message carries: a ``ModelMessage``, or the stored
    form of one (``{"attachments": [{"ref": ...}, ...]}``, as ``to_json`` writes it);
    each once, or (``unique=False``) once per attachment."""
    refs: list[str] = []
    if isinstance(message, ModelMessage):
        refs = [part.attachment.ref for part in message.attachments]
    elif message is not None:
        listed = message.get("attachments")
        if isinstance(listed, Sequence) and not isinstance(listed, str):
            found = (item.get("ref") for item in listed if isinstance(item, Mapping))
            refs = [ref for ref in found if isinstance(ref, str)]
    return list(dict.fromkeys(refs)) if unique else refs


def keep_attachments(
    conn: sqlite3.Connection,
    principal_id: str,
    session_id: str,
    refs: Iterable[str],
    *,
    required: bool,
) -> None:
    """``session_id`` references the principal's attachments among ``refs`` (its turn or
    transcript carries them), in the caller's transaction; with ``required``, refuse
    (``InvalidTurnRequest``) unless every one exists.

    Admission calls it with ``required`` and takes one pending upload per time
    its turn carries the bytes (the command line adds a file again for each turn
    and each ``--attach``); an attachment reclaimed after the turn's
    pre-admission check refuses the turn as a ref never added would be, rather
    than admitting a turn whose bytes are gone. A transcript write takes one only
    with the session's first reference to the bytes: the turn's input written
    after its admission takes none, so it cannot take the upload another
    conversation's turn still waits for.
    (On PostgreSQL a reclaim or an erase racing this reads what it writes, so
    one of the two is run again and sees what the other did.)
    """
    carried = Counter(refs)
    wanted = list(carried)
    for start in range(0, len(wanted), _MAX_LOOKUP):
        chunk = wanted[start : start + _MAX_LOOKUP]
        marks = ", ".join("?" * len(chunk))
        present = {
            row[0]
            for row in conn.execute(
                f"SELECT ref FROM attachments WHERE principal_id = ? AND ref IN ({marks})",
                [principal_id, *chunk],
            )
        }
        missing = [ref for ref in chunk if ref not in present]
        if required and missing:
            raise InvalidTurnRequest(
                f"attachment {missing[0]} was not found for this principal "
                "(host.attachments.add it)"
            )
        for ref in chunk:
            if ref not in present:
                continue
            first = _reference(conn, principal_id, ref, session_id)
            taken = carried[ref] if required else int(first)
            if taken:
                _take_uploads(conn, principal_id, ref, taken)


def _reference(conn: sqlite3.Connection, principal_id: str, ref: str, session_id: str) -> bool:
    """Record that ``session_id`` holds the bytes; whether it did not already."""
    return (
        conn.execute(
            "INSERT INTO attachment_refs (principal_id, ref, session_id) VALUES (?, ?, ?) "
            "ON CONFLICT (principal_id, ref, session_id) DO NOTHING",
            [principal_id, ref, session_id],
        ).rowcount
        == 1
    )


def _take_uploads(conn: sqlite3.Connection, principal_id: str, ref: str, taken: int) -> None:
    """``taken`` pending uploads of the bytes fewer (the row goes with the last)."""
    key = [principal_id, ref]
    gone = conn.execute(
        "DELETE FROM attachments_pending WHERE principal_id = ? AND ref = ? AND uploads <= ?",
        [*key, taken],
    ).rowcount
    if gone == 0:
        conn.execute(
            "UPDATE attachments_pending SET uploads = uploads - ? "
            "WHERE principal_id = ? AND ref = ?",
            [taken, *key],
        )


def _drop_unheld(conn: sqlite3.Connection, principal_id: str, ref: str) -> int:
    """Delete the bytes unless a reference or a pending upload still holds them (one
    statement, by the keys of both): 1 if they went, else 0."""
    return int(
        conn.execute(
            "DELETE FROM attachments WHERE principal_id = ? AND ref = ? AND NOT EXISTS ("
            "SELECT 1 FROM attachment_refs r WHERE r.principal_id = ? AND r.ref = ?) "
            "AND NOT EXISTS (SELECT 1 FROM attachments_pending p "
            "WHERE p.principal_id = ? AND p.ref = ?)",
            [principal_id, ref] * 3,
        ).rowcount
    )


def release_session(conn: sqlite3.Connection, session_id: str) -> int:
    """Delete ``session_id``'s references, then the bytes nothing else holds, in the
    caller's transaction (an erase); how many attachments went. Reads the session's
    references only, never another session's transcript."""
    held = conn.execute(
        "SELECT principal_id, ref FROM attachment_refs WHERE session_id = ?", [session_id]
    ).fetchall()
    conn.execute("DELETE FROM attachment_refs WHERE session_id = ?", [session_id])
    return sum(_drop_unheld(conn, str(principal_id), str(ref)) for principal_id, ref in held)


def _refs(refs: Sequence[str]) -> list[str]:
    unique = list(dict.fromkeys(refs))
    if len(unique) > _MAX_LOOKUP:
        raise InvalidValue(f"at most {_MAX_LOOKUP} attachment refs per lookup")
    for ref in unique:
        ref = check_id("ref", ref)
    return unique


class SqlAttachmentStore(AttachmentStore):
    """The SQL adapter of AttachmentStore: the ``attachments`` table (schema v9), its
    pending uploads (v22, counted from v26) and the sessions referencing it (v26)."""

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
            conn.execute(
                "INSERT INTO attachments (principal_id, ref, media_type, size, data, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (principal_id, ref) DO NOTHING",
                [principal_id, ref, media_type, len(blob), blob, at],
            )
            cursor = conn.cursor()
            cursor.row_factory = sqlite3.Row
            row = cursor.execute(
                "SELECT media_type FROM attachments WHERE principal_id = ? AND ref = ?",
                [principal_id, ref],
            ).fetchone()
            if row["media_type"] != media_type:
                raise InvalidValue(f"this content was already added as {row['media_type']}")
            # One more upload waits for its turn, also of bytes a turn took before: a
            # reference may go (its session erased) before this upload's turn comes.
            conn.execute(
                "INSERT INTO attachments_pending (principal_id, ref, added_at, uploads) "
                "VALUES (?, ?, ?, 1) ON CONFLICT (principal_id, ref) DO UPDATE SET "
                "added_at = excluded.added_at, uploads = attachments_pending.uploads + 1",
                [principal_id, ref, at],
            )
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
            cutoff = _cutoff(conn, grace_s)
            # Uploads of bytes a session references end apart (nothing to delete, cheap):
            # a pass's count is then what it deleted, and the retention daemon's passes
            # go on while one deletes a full batch.
            held = _due(conn, cutoff, most, referenced=True)
            due = _due(conn, cutoff, most, referenced=False)
            for principal_id, ref in (*held, *due):
                conn.execute(
                    "DELETE FROM attachments_pending WHERE principal_id = ? AND ref = ?",
                    [principal_id, ref],
                )
            return sum(_drop_unheld(conn, principal_id, ref) for principal_id, ref in due)

        return await self._db.write(delete)
