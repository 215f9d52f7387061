"""``SdkProvider``: the lifecycle and error plumbing the SDK-backed providers share.

``OpenAIChatProvider`` and ``AnthropicProvider`` differ in wire format and in
how each SDK reports failures, but not in how they hold their client: built
on first use in a worker thread under a lock, refused once closed, closed
idempotently (shielded from cancellation) by ``aclose`` or ``async with``.
They also draw the same line between a status error (retried on 408, 429 and
5xx, honouring the server's requested delay) and an error after a response
arrived (never retried), and keep their API key out of every message.

This module imports no vendor SDK, so importing it never needs an extra.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from types import TracebackType
from typing import Generic, Protocol, Self, TypeVar

import anyio

from hostkit.errors import ConfigError, ContextOverflow, ProviderError
from hostkit.providers import RetryPolicy, retry_after_seconds
from hostkit.types import ModelLimits

__all__ = ["SdkProvider"]

# Statuses where the server did no work we could repeat: rate limits, timeouts, outages.
_RETRYABLE_STATUS = frozenset({408, 429})


class _Client(Protocol):
    async def close(self) -> None: ...


ClientT = TypeVar("ClientT", bound=_Client)


class SdkProvider(ABC, Generic[ClientT]):
    """Holds an SDK client of type ``ClientT`` for a ModelProvider adapter.

    Subclasses validate their credentials after ``__init__`` here, implement
    ``_build_client`` (run in a worker thread) and the ``limits`` property,
    and get their client with ``await self._sdk()``. ``_secret`` is the key
    ``_scrub`` removes from messages; set it once it is known.
    """

    def __init__(
        self,
        *,
        model: str,
        name: str,
        base_url: str | None,
        limits: ModelLimits,
        timeout_s: float,
        retry: RetryPolicy | None,
    ) -> None:
        if not model:
            raise ConfigError("must name a model", key="model")
        if timeout_s <= 0:
            raise ConfigError("must be a positive number of seconds", key="timeout_s")
        self._model = model
        self._name = name
        self._base_url = base_url
        self._limits = limits
        self._timeout_s = timeout_s
        self._retry = retry or RetryPolicy()
        self._secret = ""
        self._client: ClientT | None = None
        self._lock = anyio.Lock()
        self._closed = False

    @property
    def name(self) -> str:
        """Provider id used in usage records and calibration."""
        return self._name

    @property
    def model(self) -> str:
        """The model id requests are sent to."""
        return self._model

    async def aclose(self) -> None:
        """Close the SDK client; idempotent, and safe before first use."""
        async with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _sdk(self) -> ClientT:
        async with self._lock:
            if self._closed:
                raise ProviderError("provider is closed", provider=self._name)
            if self._client is None:
                # Building the client reads certificates and metadata: not on the event loop.
                self._client = await anyio.to_thread.run_sync(self._build_client)
            return self._client

    @abstractmethod
    def _build_client(self) -> ClientT:
        """Construct the SDK client (in a worker thread); raise ``ConfigError`` if it cannot."""

    def _status_error(
        self,
        status: int,
        detail: str,
        *,
        request_id: str | None,
        headers: Mapping[str, str],
        overflow: bool,
    ) -> ProviderError:
        """Map an HTTP error status; ``overflow`` says the body reads as "context too long"."""
        message = f"HTTP {status}: {detail}" + (f" (request {request_id})" if request_id else "")
        if status == 400 and overflow:
            return ContextOverflow(message, provider=self._name, status=status)
        return ProviderError(
            message,
            provider=self._name,
            status=status,
            retryable=status in _RETRYABLE_STATUS or status >= 500,
            retry_after=retry_after_seconds(headers),
        )

    def _connection_error(self, exc: BaseException, *, timed_out: bool) -> ProviderError:
        """No response arrived (connect failure or timeout): retryable."""
        kind = "timed out" if timed_out else "could not connect"
        return ProviderError(f"{kind}: {self._redact(exc)}", provider=self._name, retryable=True)

    def _arrived_error(self, what: str, exc: BaseException) -> ProviderError:
        """A failure after a response arrived: reported, never retried."""
        return ProviderError(f"{what}: {self._redact(exc)}", provider=self._name, status=200)

    def _redact(self, exc: BaseException) -> str:
        value = str(exc) or type(exc).__name__
        # The SDK's "Connection error." says nothing; the transport error it wraps does.
        cause = str(exc.__cause__ or "")
        if cause and cause not in value:
            value = f"{value} ({cause})"
        return self._scrub(value)

    def _scrub(self, value: str) -> str:
        # Local servers and gateways sometimes echo the request; never let the key into a message.
        return value.replace(self._secret, "[redacted]") if len(self._secret) >= 8 else value
