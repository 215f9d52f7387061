"""``SdkProvider``: the client lifecycle and error mapping the SDK-backed providers share.

``OpenAIChatProvider`` and ``AnthropicProvider`` differ in wire format, but
not in how they hold their client: built on first use in a worker thread
under a lock, refused once closed, closed idempotently (shielded from
cancellation) by ``aclose`` or ``async with``. Both SDKs are generated from
the same template, so their failures have the same shape too: a status error
(retried on 408, 429 and 5xx, honouring the server's requested delay), a
connection error (no response: retried), anything after a response arrived
(never retried). Each adapter names its SDK's classes in an ``SdkErrors``;
the mapping and the scrubbing of the API key out of every message live here.

This module imports no vendor SDK, so importing it never needs an extra.
"""

from __future__ import annotations

import os
import re
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import anyio

from hostkit.adapters._base import ProviderBase
from hostkit.adapters._bounds import over_bound, refused
from hostkit.errors import ConfigError, ContextOverflow, ProviderError, bounded, scrub_secret
from hostkit.providers import RetryPolicy, http_url_problem, retry_after_seconds
from hostkit.types import AttachmentSupport, ModelLimits, is_seconds

__all__ = ["SdkErrors", "SdkProvider"]

# A provider's request id is header text it controls: at most this much of it is shown.
_REQUEST_ID_CHARS = 128


# Statuses where the server did no work we could repeat: rate limits, timeouts, outages.
_RETRYABLE_STATUS = frozenset({408, 429})
_NEVER = re.compile(r"(?!)")


class _Client(Protocol):
    async def close(self) -> None: ...


ClientT = TypeVar("ClientT", bound=_Client)


@dataclass(frozen=True, slots=True)
class SdkErrors:
    """The exception classes of one SDK that the shared mapping tells apart.

    ``transport`` lists errors of the HTTP client underneath that the SDK lets
    through unwrapped while a stream is read.
    """

    base: type[Exception]
    status: type[Exception]
    connection: type[Exception]
    timeout: type[Exception]
    transport: tuple[type[Exception], ...] = ()

    @classmethod
    def of(
        cls,
        sdk: ModuleType,
        *,
        base: type[Exception],
        transport: tuple[type[Exception], ...] = (),
    ) -> SdkErrors:
        """The classes by the names both SDKs (generated from one template) give them."""
        return cls(
            base=base,
            status=sdk.APIStatusError,
            connection=sdk.APIConnectionError,
            timeout=sdk.APITimeoutError,
            transport=transport,
        )


def _check_base_url(base_url: str | None, variable: str) -> None:
    """Refuse a base URL the HTTP client could not use, given or from ``variable``.

    The client parses it only when the first request goes out: a port past
    65535 or an unclosed ``[`` would fail every turn as an internal error.
    """
    if base_url is not None:
        if (problem := http_url_problem(base_url)) is not None:
            raise ConfigError(problem, key="base_url")
        return
    from_env = os.environ.get(variable)
    # Set but empty is no unset variable: the SDK then sends every request to "".
    if from_env is not None and (problem := http_url_problem(from_env)) is not None:
        raise ConfigError(
            f"{problem}; the SDK sends every request there: fix the variable or unset it",
            key=variable,
        )


class SdkProvider(ProviderBase, Generic[ClientT]):
    """Holds an SDK client of type ``ClientT`` for a ModelProvider adapter.

    Subclasses set the class attributes below, implement
    ``_take_credentials``, ``_build_client`` (run in a worker thread) and
    ``_status_detail``, and get their client with ``await self._sdk()``.
    ``_secret`` is the key ``_scrub`` removes from messages; set it once it
    is known.
    """

    _default_name: ClassVar[str]
    _default_limits: ClassVar[ModelLimits]
    # The environment variable the vendor SDK takes its base URL from when none is given.
    _base_url_env: ClassVar[str]
    _errors: ClassVar[SdkErrors]
    # The response header carrying the provider's request id.
    _request_id_header: ClassVar[str]
    # Error codes/types, and failing that prose, that say "the prompt does not fit".
    _overflow_markers: ClassVar[frozenset[str]] = frozenset()
    _overflow_prose: ClassVar[re.Pattern[str]] = _NEVER

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        limits: ModelLimits | None = None,
        timeout_s: float = 60.0,
        retry: RetryPolicy | None = None,
        name: str | None = None,
        attachments: AttachmentSupport | None = None,
    ) -> None:
        """Validate the options and take the credentials; the client is built on first use.

        ``limits`` and ``name`` default to the adapter's; ``api_key`` is
        resolved by ``_take_credentials`` (which raises ``ConfigError`` when
        there is none). ``attachments`` (what the model accepts) defaults to
        ``_default_attachments(base_url)``.
        """
        if not model:
            raise ConfigError("must name a model", key="model")
        # NaN failed every call with a raw ValueError, and inf waited for ever.
        if not is_seconds(timeout_s, high=86_400):
            raise ConfigError("must be in (0, 86400] seconds", key="timeout_s")
        _check_base_url(base_url, self._base_url_env)
        super().__init__(
            name=name or self._default_name,
            model=model,
            limits=limits or self._default_limits,
            attachments=self._default_attachments(base_url) if attachments is None else attachments,
        )
        self._base_url = base_url
        self._timeout_s = timeout_s
        self._retry = retry or RetryPolicy()
        self._secret = ""
        self._client: ClientT | None = None
        self._lock = anyio.Lock()
        self._closed = False
        self._take_credentials(api_key)

    async def aclose(self) -> None:
        """Close the SDK client; idempotent, and safe before first use."""
        async with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.close()

    async def _sdk(self) -> ClientT:
        async with self._lock:
            if self._closed:
                raise ProviderError("provider is closed", provider=self._name)
            if self._client is None:
                # Building the client reads certificates and metadata: not on the event loop.
                self._client = await anyio.to_thread.run_sync(self._build_client)
            return self._client

    @abstractmethod
    def _default_attachments(self, base_url: str | None) -> AttachmentSupport:
        """What the API at ``base_url`` (None: the vendor's own) accepts unless told."""

    @abstractmethod
    def _take_credentials(self, api_key: str | None) -> None:
        """Decide the credential from ``api_key``, ``self._base_url`` and the environment."""

    @abstractmethod
    def _build_client(self) -> ClientT:
        """Construct the SDK client (in a worker thread); raise ``ConfigError`` if it cannot.

        What the SDK imports only at its first request is imported here too: there,
        on the event loop, it would stall every other session.
        """

    @abstractmethod
    def _status_detail(self, exc: Any) -> str:
        """The API's own message from a status error of this SDK (unscrubbed)."""

    def _error(self, exc: Exception) -> ProviderError:
        """Map an SDK error raised before any response arrived (or a body read past a bound)."""
        bound = over_bound(exc)
        if bound is not None:
            return refused(bound, provider=self._name)
        if isinstance(exc, self._errors.status):
            failed: Any = exc
            detail = self._scrub(self._status_detail(failed))
            headers = failed.response.headers
            markers = self._overflow_markers
            return self._status_error(
                failed.status_code,
                detail,
                request_id=failed.request_id or headers.get(self._request_id_header),
                headers=headers,
                overflow=getattr(failed, "code", None) in markers
                or getattr(failed, "type", None) in markers
                or self._overflow_prose.search(detail) is not None,
            )
        if isinstance(exc, self._errors.connection):
            return self._connection_error(exc, timed_out=isinstance(exc, self._errors.timeout))
        return ProviderError(self._redact(exc), provider=self._name)

    def _status_error(
        self,
        status: int,
        detail: str,
        *,
        request_id: str | None,
        headers: Mapping[str, str],
        overflow: bool,
    ) -> ProviderError:
        """Map an HTTP error status; ``overflow`` says the body reads as "context too long".

        The request id is the provider's header text: bounded, and scrubbed with the rest.
        """
        shown = f" (request {self._request_id(request_id)})" if request_id else ""
        message = self._scrub(f"HTTP {status}: {detail}{shown}")
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
        bound = over_bound(exc)
        if bound is not None:
            return refused(bound, provider=self._name)
        if isinstance(exc, self._errors.status):
            # An `error` event inside a 200 stream, which an SDK may dress as a status error.
            detail = self._scrub(self._status_detail(exc))
        else:
            detail = self._redact(exc)
        return ProviderError(f"{what}: {detail}", provider=self._name, status=200)

    def _redact(self, exc: BaseException) -> str:
        value = str(exc) or type(exc).__name__
        # The SDK's "Connection error." says nothing; the transport error it wraps does.
        cause = str(exc.__cause__ or "")
        if cause and cause not in value:
            value = f"{value} ({cause})"
        return self._scrub(value)

    def _request_id(self, value: str | None) -> str | None:
        """The provider's request id as kept (in errors, responses, usage): header text it
        controls, so bounded and scrubbed of the key a gateway may echo into it."""
        # Scrubbed whole, then cut: a cut first could leave a key's beginning behind.
        return bounded(self._scrub(value), _REQUEST_ID_CHARS) if value else None

    def _scrub(self, value: str) -> str:
        # Local servers and gateways sometimes echo the request; never let the key into a message.
        return scrub_secret(value, self._secret)
