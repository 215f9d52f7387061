"""Attachments: what a turn may carry besides its text, and how each kind is recognized.

An ``Attachment`` is a reference (``sha256:<hex>`` of the bytes) to content the
Host stored for one principal (``host.attachments.add``); a ``TurnRequest``
carries references, never bytes. The bytes travel only inside the turn that
attached them (``AttachmentPart.data``); the transcript keeps the references,
and a later turn shows the model a one-line stand-in instead of re-sending
them. The allow-list and the magic numbers live here so that the store, the
Host and every provider adapter agree on what a media type means.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hostkit.errors import InvalidTurnRequest, InvalidValue

__all__ = [
    "IMAGE_TYPES",
    "MAX_ATTACHMENT_BYTES",
    "MAX_ATTACHMENT_NAME",
    "MAX_TURN_ATTACHMENT_BYTES",
    "MEDIA_TYPES",
    "NO_ATTACHMENTS",
    "Attachment",
    "AttachmentPart",
    "AttachmentSupport",
    "check_content",
    "content_ref",
    "is_attachment_ref",
    "sanitize_name",
    "stand_in",
]

# One attachment, and all of one turn's together: far above a screenshot or a short PDF,
# well below what a provider request may carry once base64 adds its third.
MAX_ATTACHMENT_BYTES = 5 * 1024 * 1024
MAX_TURN_ATTACHMENT_BYTES = 20 * 1024 * 1024
MAX_ATTACHMENT_NAME = 120

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
MEDIA_TYPES = IMAGE_TYPES | {"text/plain", "application/pdf"}

_REF = re.compile(r"^sha256:[0-9a-f]{64}$")


def is_attachment_ref(value: object) -> bool:
    """Whether ``value`` is an attachment ref: ``sha256:`` and 64 lower-case hex digits."""
    return isinstance(value, str) and _REF.fullmatch(value) is not None


# Path separators and characters that mean something to a shell, a header or markup.
_UNSAFE = re.compile(r'[\\/:*?"<>|`$;&\']')


@dataclass(frozen=True, slots=True)
class Attachment:
    """A bounded reference to input content stored elsewhere (never the bytes).

    ``ref`` is ``sha256:`` and the hex digest of the bytes; ``name`` a
    sanitized file name (``sanitize_name``); ``media_type`` one of
    ``MEDIA_TYPES``; ``size`` the byte count. A value that breaks any of
    these is refused on construction (``InvalidTurnRequest``, which is also
    an ``InvalidValue``).
    """

    name: str
    media_type: str
    size: int
    ref: str

    def __post_init__(self) -> None:
        # Plain copies first: a str subclass's own __eq__ or __hash__ never runs (here, or in a
        # set of refs later).
        for name in ("name", "media_type", "ref"):
            if isinstance(value := getattr(self, name), str):
                object.__setattr__(self, name, str.__str__(value))
        if not isinstance(self.name, str) or not self.name or self.name != sanitize_name(self.name):
            raise InvalidTurnRequest(
                f"an attachment name is 1-{MAX_ATTACHMENT_NAME} plain characters without paths"
            )
        if self.media_type not in MEDIA_TYPES:
            raise InvalidTurnRequest(
                f"attachment media type must be one of {', '.join(sorted(MEDIA_TYPES))}"
            )
        if (
            isinstance(self.size, bool)
            or not isinstance(self.size, int)
            or not 0 < self.size <= MAX_ATTACHMENT_BYTES
        ):
            raise InvalidTurnRequest(f"an attachment is 1-{MAX_ATTACHMENT_BYTES} bytes")
        if not is_attachment_ref(self.ref):
            raise InvalidTurnRequest("an attachment ref is 'sha256:' and 64 hex digits")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "media_type": self.media_type,
            "size": self.size,
            "ref": self.ref,
        }

    @classmethod
    def from_json(cls, data: Any) -> Attachment:
        return cls(
            name=data["name"], media_type=data["media_type"], size=data["size"], ref=data["ref"]
        )


@dataclass(frozen=True, slots=True)
class AttachmentPart:
    """An attachment as a message carries it: the reference, and the bytes while they count.

    ``data`` is set only in the turn that attached it (the provider receives
    the content in its native shape); in the transcript and in later turns it
    is None and providers send ``stand_in(attachment)`` as text instead.
    """

    attachment: Attachment
    data: bytes | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.attachment, Attachment):
            raise InvalidValue("an AttachmentPart needs an Attachment")
        if self.data is not None and len(self.data) != self.attachment.size:
            raise InvalidValue("attachment bytes do not match the attachment's size")


@dataclass(frozen=True, slots=True)
class AttachmentSupport:
    """Which attachments a provider accepts: media types and a per-attachment byte limit.

    Providers expose it as ``attachment_support``; one without it accepts
    none. TurnExecution refuses a turn whose attachments its provider does
    not accept (``AttachmentRefused``) before ``turn.started``.
    """

    media_types: frozenset[str] = frozenset()
    max_bytes: int = MAX_ATTACHMENT_BYTES

    def __init__(self, media_types: Iterable[str] = (), *, max_bytes: int = MAX_ATTACHMENT_BYTES):
        types = frozenset(media_types)
        unknown = types - MEDIA_TYPES
        if unknown:
            raise InvalidValue(f"unknown attachment media types: {', '.join(sorted(unknown))}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise InvalidValue("max_bytes must be a positive integer")
        object.__setattr__(self, "media_types", types)
        object.__setattr__(self, "max_bytes", min(max_bytes, MAX_ATTACHMENT_BYTES))

    def accepts(self, attachment: Attachment) -> bool:
        return attachment.media_type in self.media_types and attachment.size <= self.max_bytes


NO_ATTACHMENTS = AttachmentSupport()


def sanitize_name(name: str) -> str:
    """A display name safe in a transcript, a prompt and a header: the last path component,
    NFC, control and shell/markup characters replaced, at most ``MAX_ATTACHMENT_NAME``."""
    if not isinstance(name, str):
        raise InvalidValue("an attachment name must be text")
    base = re.split(r"[\\/]", name)[-1]
    base = unicodedata.normalize("NFC", base)
    cleaned = "".join(
        "_" if unicodedata.category(ch)[0] in "CZ" and ch != " " else ch for ch in base
    )
    cleaned = _UNSAFE.sub("_", cleaned).strip(" .")
    if len(cleaned) > MAX_ATTACHMENT_NAME:
        stem, dot, suffix = cleaned.rpartition(".")
        keep = suffix if dot and len(suffix) <= 10 else ""
        cut = MAX_ATTACHMENT_NAME - (len(keep) + 1 if keep else 0)
        cleaned = (stem if keep else cleaned)[:cut].rstrip(" .") + (f".{keep}" if keep else "")
    return cleaned


def content_ref(digest: str) -> str:
    """The ref of bytes whose sha256 hex digest is ``digest``."""
    return f"sha256:{digest}"


def check_content(data: bytes, media_type: str) -> None:
    """Refuse (``InvalidValue``) bytes that are not what ``media_type`` says they are.

    Images and PDF by their magic numbers; ``text/plain`` must be UTF-8
    without NUL bytes. So a PNG named ``.jpg`` and declared ``image/jpeg`` is
    refused, and so is a binary file declared as text.
    """
    if not isinstance(media_type, str) or str.__str__(media_type) not in MEDIA_TYPES:
        raise InvalidValue(f"attachment media type must be one of {', '.join(sorted(MEDIA_TYPES))}")
    if media_type == "text/plain":
        if b"\x00" in data:
            raise InvalidValue("the text/plain attachment contains NUL bytes (binary content)")
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidValue("the text/plain attachment is not UTF-8 text") from exc
        return
    if _sniff(data) != media_type:
        found = _sniff(data)
        detail = f"its content is {found}" if found else "its content is not of that type"
        raise InvalidValue(f"the attachment is declared {media_type}, but {detail}")


def _sniff(data: bytes) -> str | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"%PDF-"):
        return "application/pdf"
    return None


def stand_in(attachment: Attachment) -> str:
    """What a later turn's model reads in place of an attachment's bytes (one line)."""
    return (
        f"[attachment {attachment.name} ({attachment.media_type}, {attachment.size} bytes) "
        "was shown in an earlier turn; its content is not repeated]"
    )
