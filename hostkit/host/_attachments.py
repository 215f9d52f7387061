"""``host.attachments``: put content into the Host and get the Attachment a turn carries."""

from __future__ import annotations

import os
from pathlib import Path

import anyio

from hostkit.authority import AuthorityResolver, conversation_principal
from hostkit.errors import InvalidValue, NotFoundOrUnauthorized
from hostkit.store import ATTACHMENT_GRACE_S, RECLAIM_BATCH, RuntimeStore
from hostkit.types import (
    MAX_ATTACHMENT_BYTES,
    Attachment,
    ConversationFacts,
    PrincipalScope,
    plain_text,
    sanitize_name,
)

__all__ = ["SUFFIX_TYPES", "HostAttachments"]

# Longer than any ref the store hands out (``sha256:`` and 64 hex digits).
_MAX_REF = 200
# Longer than any media type hostkit accepts.
_MAX_MEDIA_TYPE = 100

# The media type of a file by its suffix (``add_file``); the content must then agree.
SUFFIX_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".pdf": "application/pdf",
    ".txt": "text/plain",
    ".text": "text/plain",
    ".md": "text/plain",
    ".log": "text/plain",
    ".csv": "text/plain",
}

Principal = ConversationFacts | PrincipalScope


class HostAttachments:
    """Attachments owned by the principal that added them.

    ``principal`` is what the turn's ``TurnRequest.principal`` will be: the
    conversation's authenticated facts, or a scope this Host issued. The
    bytes are stored once per principal under their sha256 (adding them
    again returns the same ref); only that principal can read them or send
    them with a turn. Another principal's ref is ``NotFoundOrUnauthorized``,
    the same answer as a ref that was never added. Limits:
    ``MAX_ATTACHMENT_BYTES`` each, ``MAX_ATTACHMENTS`` and
    ``MAX_TURN_ATTACHMENT_BYTES`` per turn; types: ``MEDIA_TYPES``, with
    content that matches the declared type. Bytes no session's turn or
    transcript references within ``ATTACHMENT_GRACE_S`` of their latest add
    are reclaimed (``reclaim``).
    """

    def __init__(self, *, store: RuntimeStore, authority: AuthorityResolver) -> None:
        self._store = store
        self._authority = authority

    async def add(
        self, principal: Principal, data: bytes, *, name: str, media_type: str
    ) -> Attachment:
        """Store ``data`` for ``principal``; ``InvalidValue`` (nothing stored) when it is bad.

        ``name`` is sanitized (last path component, no control or shell
        characters, at most ``MAX_ATTACHMENT_NAME``); the content must be what
        ``media_type`` says (a PNG declared ``image/jpeg`` is refused).
        """
        owner = self._principal_id(principal)
        media_type = _media_type(media_type)
        clean = sanitize_name(name)
        if not clean:
            raise InvalidValue("the attachment needs a name with at least one usable character")
        stored = await self._store.attachments.add(
            principal_id=owner, data=data, media_type=media_type
        )
        return Attachment(
            name=clean, media_type=stored.media_type, size=stored.size, ref=stored.ref
        )

    async def add_file(
        self, principal: Principal, path: str | Path, *, media_type: str | None = None
    ) -> Attachment:
        """``add`` the file at ``path``, its type from its suffix unless ``media_type`` is given.

        A missing or unreadable file, one over ``MAX_ATTACHMENT_BYTES`` (checked
        before it is read) or of an unknown suffix is ``InvalidValue`` naming it.
        """
        if isinstance(path, str):
            path = str.__str__(path)  # a subclass's own methods never run here
        elif not isinstance(path, os.PathLike):
            raise InvalidValue(f"path must be a path, not {type(path).__name__}")
        file = anyio.Path(path)
        label = sanitize_name(str(path)) or "the file"
        # None or "": the type its suffix says (compared as itself: any other value is checked
        # by ``add``).
        unset = media_type is None or (isinstance(media_type, str) and not str.__len__(media_type))
        kind = SUFFIX_TYPES.get(file.suffix.lower()) if unset else media_type
        if kind is None:
            known = ", ".join(sorted(SUFFIX_TYPES))
            raise InvalidValue(f"{label}: unknown attachment type (known suffixes: {known})")
        try:
            if not await file.is_file():
                what = "a directory, not a file" if await file.is_dir() else "no such file"
                raise InvalidValue(f"{label}: {what}")
            size = (await file.stat()).st_size
            if size > MAX_ATTACHMENT_BYTES:
                raise InvalidValue(
                    f"{label}: {size} bytes is over the attachment limit ({MAX_ATTACHMENT_BYTES})"
                )
            # Read at most one byte over the limit: a file that grew since its stat, or
            # one whose size the kernel reports as 0 (/proc), is never read whole.
            async with await file.open("rb") as stream:
                data = await stream.read(MAX_ATTACHMENT_BYTES + 1)
            if len(data) > MAX_ATTACHMENT_BYTES:
                raise InvalidValue(
                    f"{label}: more than {MAX_ATTACHMENT_BYTES} bytes, over the attachment limit"
                )
        except OSError as exc:
            raise InvalidValue(f"{label}: cannot be read ({exc.strerror or 'I/O error'})") from exc
        return await self.add(principal, data, name=file.name, media_type=kind)

    async def read(self, principal: Principal, attachment: Attachment | str) -> bytes:
        """The bytes of the principal's attachment (or ref); ``NotFoundOrUnauthorized`` else."""
        owner = self._principal_id(principal)
        ref = plain_text(
            attachment.ref if isinstance(attachment, Attachment) else attachment, limit=_MAX_REF
        )
        if ref is None:
            raise InvalidValue("an Attachment or its ref is required")
        found = await self._store.attachments.load(principal_id=owner, refs=[ref])
        data = found.get(ref)
        if data is None:
            raise NotFoundOrUnauthorized("attachment")
        return data

    async def reclaim(
        self, *, grace_s: float = ATTACHMENT_GRACE_S, limit: int = RECLAIM_BATCH
    ) -> int:
        """End up to ``limit`` uploads added over ``grace_s`` ago, deleting the
        attachments no session references.

        One bounded transaction; how many attachments went. One a session's turn
        or transcript references is never deleted (an erase of the session
        deletes it with the last reference); one whose turn was refused, or
        that was never sent, goes after the grace period. ``hostkit serve`` runs
        this in its "retention" daemon; a Host that does not serve may call it
        now and then.
        """
        return await self._store.attachments.reclaim(grace_s=grace_s, limit=limit)

    def _principal_id(self, principal: object) -> str:
        if isinstance(principal, ConversationFacts):
            return conversation_principal(principal)
        if isinstance(principal, PrincipalScope):
            return self._authority.verify(principal).principal_id
        raise InvalidValue("attachments belong to ConversationFacts or a Host-issued scope")


def _media_type(value: object) -> str:
    """``value`` as a plain ``str`` (the store checks it is a known type), else ``InvalidValue``."""
    text = plain_text(value, limit=_MAX_MEDIA_TYPE)
    if text is None:
        raise InvalidValue(f"media_type must be a media type, not {type(value).__name__}")
    return text
