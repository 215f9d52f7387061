"""The ModelProvider protocol every provider adapter implements."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol, runtime_checkable

from hostkit.errors import ProviderError, type_name
from hostkit.types import (
    NO_ATTACHMENTS,
    AttachmentSupport,
    ModelLimits,
    ModelRequest,
    ModelResponse,
    StreamEvent,
)

__all__ = ["ModelProvider", "attachment_support", "open_stream"]


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

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Text deltas then one ``done`` event, the last: any async iterator. One with
        ``aclose`` (an async generator) is closed with it once the caller stops reading
        (``open_stream``), which releases the connection early."""
        ...

    async def aclose(self) -> None: ...


@asynccontextmanager
async def open_stream(
    provider: ModelProvider, request: ModelRequest
) -> AsyncIterator[AsyncIterator[StreamEvent]]:
    """``provider.stream(request)``, closed on exit (``aclose``, when it has one).

    What the Host reads a stream with: the documented ``AsyncIterator`` needs
    no ``aclose`` (``contextlib.aclosing`` would fail on one without), and
    anything that is no async iterator (a coroutine returning a list, a
    synchronous generator) is a ``ProviderError`` naming the provider, not a
    crash of whoever reads it.
    """
    events: object = provider.stream(request)
    if not isinstance(events, AsyncIterator):
        if inspect.iscoroutine(events):
            events.close()  # never awaited: closed, so no "never awaited" warning follows
        returned = type_name(events)
        raise ProviderError(
            f"stream() returned {returned}, not an async iterator", provider=provider.name
        )
    try:
        yield events
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()


def attachment_support(provider: object) -> AttachmentSupport:
    """What ``provider`` accepts as attachments: its ``attachment_support``, else nothing."""
    support = getattr(provider, "attachment_support", None)
    return support if isinstance(support, AttachmentSupport) else NO_ATTACHMENTS
