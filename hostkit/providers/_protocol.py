"""The ModelProvider protocol every provider adapter implements."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Protocol, runtime_checkable

from hostkit.types import (
    NO_ATTACHMENTS,
    AttachmentSupport,
    ModelLimits,
    ModelRequest,
    ModelResponse,
    StreamEvent,
)

__all__ = ["ModelProvider", "attachment_support"]


@runtime_checkable
class ModelProvider(Protocol):
    """A model behind a normalized interface.

    ``complete`` returns one ``ModelResponse``. ``stream`` yields text
    increments and ends with one ``kind="done"`` event carrying the complete
    response (same content as ``complete`` would return). Both raise
    ``ContextOverflow`` when the provider refuses the request as too long and
    ``ProviderError`` for other failures after bounded retries; a request whose
    response (or first streamed byte) arrived is never sent again. Cancelling
    the caller cancels the HTTP request. ``aclose`` releases clients and is
    idempotent.

    A provider that takes attachments says which with an
    ``attachment_support`` attribute (an ``AttachmentSupport``); it is not
    part of the protocol, and a provider without it accepts none (see
    ``attachment_support()``).
    """

    @property
    def name(self) -> str:
        """Provider id used in usage records and calibration (e.g. ``openai``)."""
        ...

    @property
    def model(self) -> str:
        """The model id requests are sent to."""
        ...

    @property
    def limits(self) -> ModelLimits:
        """Normalized limits the ContextManager budgets against."""
        ...

    async def complete(self, request: ModelRequest) -> ModelResponse: ...

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        """Text deltas then one ``done`` event; an async generator the caller closes
        (``contextlib.aclosing``) to release the connection early."""
        ...

    async def aclose(self) -> None: ...


def attachment_support(provider: object) -> AttachmentSupport:
    """What ``provider`` accepts as attachments: its ``attachment_support``, else nothing."""
    support = getattr(provider, "attachment_support", None)
    return support if isinstance(support, AttachmentSupport) else NO_ATTACHMENTS
