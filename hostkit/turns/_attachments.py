"""A turn's attachments: checked before admission, loaded for the turn that carries them.

Before ``turn.started`` each referenced attachment must exist for the
request's principal with the declared type and size (else
``InvalidTurnRequest``, the same answer for a missing ref and another
principal's), and the provider the turn is pinned to must accept it (else
``AttachmentRefused`` naming the provider and the type): an attachment is
never dropped silently. The admission transaction persists the user message
with the references; the first step loads the bytes, which travel only in
this turn's provider requests.
"""

from __future__ import annotations

from hostkit.errors import (
    AttachmentRefused,
    InvalidTurnRequest,
    InvalidValue,
    StoreError,
    TurnRejected,
)
from hostkit.providers import ModelProvider, attachment_support
from hostkit.store import RuntimeStore
from hostkit.types import AttachmentPart, ModelMessage, TurnRequest

__all__ = ["check_attachments", "input_message", "loaded_input"]

_NOT_FOUND = "attachment {name!r} was not found for this principal (host.attachments.add it)"


def input_message(request: TurnRequest) -> ModelMessage:
    """The user message as the transcript keeps it: the text and the attachments' references."""
    parts = tuple(AttachmentPart(attachment) for attachment in request.attachments)
    return ModelMessage("user", request.input, attachments=parts)


async def check_attachments(
    store: RuntimeStore, request: TurnRequest, principal_id: str, provider: ModelProvider
) -> None:
    """Refuse the turn (before admission) unless every attachment is owned and accepted."""
    if not request.attachments:
        return
    try:
        stored = await store.attachments.describe(
            principal_id=principal_id, refs=[a.ref for a in request.attachments]
        )
    except InvalidValue as exc:
        raise InvalidTurnRequest(exc.message) from exc
    except StoreError as exc:
        rejected = TurnRejected(f"the store could not check the attachments: {exc.message}")
        rejected.retryable = exc.retryable
        raise rejected from exc
    for attachment in request.attachments:
        found = stored.get(attachment.ref)
        if found is None:
            raise InvalidTurnRequest(_NOT_FOUND.format(name=attachment.name))
        if (found.media_type, found.size) != (attachment.media_type, attachment.size):
            raise InvalidTurnRequest(
                f"attachment {attachment.name!r} is stored as {found.media_type} of "
                f"{found.size} bytes, not {attachment.media_type} of {attachment.size}"
            )
    support = attachment_support(provider)
    for attachment in request.attachments:
        if attachment.media_type not in support.media_types:
            accepted = ", ".join(sorted(support.media_types)) or "none"
            raise AttachmentRefused(
                provider.name,
                attachment.media_type,
                f"provider {provider.name!r} does not accept {attachment.media_type} "
                f"attachments ({attachment.name!r}); it accepts: {accepted}",
            )
        if attachment.size > support.max_bytes:
            raise AttachmentRefused(
                provider.name,
                attachment.media_type,
                f"provider {provider.name!r} accepts attachments of at most "
                f"{support.max_bytes} bytes; {attachment.name!r} has {attachment.size}",
            )


async def loaded_input(
    store: RuntimeStore, request: TurnRequest, principal_id: str
) -> ModelMessage:
    """The user message with its attachments' bytes, as this turn's provider requests carry it."""
    message = input_message(request)
    if not request.attachments:
        return message
    data = await store.attachments.load(
        principal_id=principal_id, refs=[a.ref for a in request.attachments]
    )
    missing = [a.name for a in request.attachments if a.ref not in data]
    if missing:
        # Checked before admission and kept by it for good: only a damaged store gets here.
        raise InvalidValue(f"attachment {missing[0]!r} could not be read")
    parts = tuple(AttachmentPart(a, data[a.ref]) for a in request.attachments)
    return ModelMessage("user", request.input, attachments=parts)
