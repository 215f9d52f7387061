"""``AnthropicProvider``: the ModelProvider over Anthropic's messages API.

Built on the official ``anthropic`` SDK (``pip install hostkit[anthropic]``).
As in the OpenAI adapter, the SDK's own retries are off (``max_retries=0``)
and hostkit's ``RetryPolicy`` decides: only failures before any response
arrived are retried (429, 5xx, 529 overloaded, connection errors); a
response that arrived — its headers for ``complete``, its first event for
``stream`` — is never requested again.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anthropic
import anyio
import httpx2
from anthropic.types import Message, RawMessageStreamEvent

from hostkit.adapters._sdk import SdkProvider
from hostkit.errors import ConfigError, ProviderError
from hostkit.freeze import thaw
from hostkit.providers import (
    RetryPolicy,
    call_with_retries,
    parse_tool_arguments,
    to_finish_reason,
)
from hostkit.types import (
    ModelLimits,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    ToolCall,
    Usage,
)

__all__ = ["AnthropicProvider"]

DEFAULT_LIMITS = ModelLimits(context_window=200_000, max_output_tokens=8192)

_PLACEHOLDER_KEY = "not-needed"
_TOKEN_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)
# "prompt is too long: 215000 tokens > 200000 maximum", and the variant that counts max_tokens in:
# "input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000".
_CONTEXT_PROSE = re.compile(
    r"prompt is too long|exceeds? (the )?context (limit|window)", re.IGNORECASE
)


class AnthropicProvider(SdkProvider[anthropic.AsyncAnthropic]):
    """A Claude model behind the messages API, normalized to hostkit's values.

    System messages become the ``system`` parameter, tool results become
    ``tool_result`` blocks in a user message. ``api_key`` may be omitted with
    a ``base_url`` (a keyless gateway gets a placeholder, never the
    environment's key); without either, the key comes from
    ``ANTHROPIC_API_KEY`` (or a bearer ``ANTHROPIC_AUTH_TOKEN``) and its
    absence is a ``ConfigError`` at construction. Credentials are always passed
    to the SDK explicitly, so it never falls back to profile files on disk.
    The SDK client is built on first use in a worker thread.
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        limits: ModelLimits | None = None,
        timeout_s: float = 60.0,
        retry: RetryPolicy | None = None,
        name: str = "anthropic",
    ) -> None:
        super().__init__(
            model=model,
            name=name,
            base_url=base_url,
            limits=limits or DEFAULT_LIMITS,
            timeout_s=timeout_s,
            retry=retry,
        )
        self._auth_token: str | None = None
        if api_key is None and base_url is not None:
            api_key = _PLACEHOLDER_KEY
        elif api_key is None:
            api_key = os.environ.get("ANTHROPIC_API_KEY") or None
            self._auth_token = None if api_key else os.environ.get("ANTHROPIC_AUTH_TOKEN") or None
            if api_key is None and self._auth_token is None:
                raise ConfigError(
                    "no API key: pass api_key or set ANTHROPIC_API_KEY", key="api_key"
                )
        self._api_key = api_key
        self._secret = api_key or self._auth_token or ""

    @property
    def limits(self) -> ModelLimits:
        """Limits the ContextManager budgets against (200k/8k unless configured)."""
        return self._limits

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send one message request; see ``ModelProvider`` for errors and retries."""
        client = await self._sdk()
        params = _params(self._model, request)

        async def attempt() -> ModelResponse:
            try:
                async with client.messages.with_streaming_response.create(**params) as raw:
                    # The status line and headers are in: from here on, nothing is re-sent.
                    try:
                        message = await raw.parse()
                        return self._response(message, request_id=raw.request_id)
                    except Exception as exc:
                        raise self._arrived_error("unreadable response", exc) from exc
            except anthropic.AnthropicError as exc:
                raise self._error(exc) from exc

        return await call_with_retries(attempt, policy=self._retry)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Yield text deltas, then one ``done`` event with the full normalized response.

        Failures before the first event are retried like ``complete``; once an
        event has arrived a failure (a dropped connection, an ``error`` event)
        raises ``ProviderError`` and nothing is re-sent. Close the iterator
        (``contextlib.aclosing``) if you stop early.
        """
        client = await self._sdk()
        params = {**_params(self._model, request), "stream": True}

        async def open_stream() -> tuple[
            anthropic.AsyncStream[RawMessageStreamEvent], _Events, str
        ]:
            try:
                events = await client.messages.create(**params)
            except anthropic.AnthropicError as exc:
                raise self._error(exc) from exc
            state = _Events(request_id=events.response.headers.get("request-id"))
            try:
                first = await self._pull(events, state, before_first=True)
            except BaseException:
                await events.close()
                raise
            return events, state, first or ""

        events, state, text = await call_with_retries(open_stream, policy=self._retry)
        try:
            while True:
                if text:
                    yield StreamEvent(kind="text", text=text)
                pulled = await self._pull(events, state, before_first=False)
                if pulled is None:
                    break
                text = pulled
        finally:
            with anyio.CancelScope(shield=True):
                await events.close()
        yield StreamEvent(kind="done", response=state.response(self._name, self._model))

    def _build_client(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            api_key=self._api_key,
            auth_token=self._auth_token,
            base_url=self._base_url,
            timeout=self._timeout_s,
            max_retries=0,
        )

    def _response(self, message: object, *, request_id: str | None) -> ModelResponse:
        if not isinstance(message, Message) or not isinstance(message.content, list):
            raise TypeError("the body is not a message with a list of content blocks")
        text: list[str] = []
        calls: list[ToolCall] = []
        for block in message.content:
            if block.type == "text":
                text.append(block.text)
            elif block.type == "tool_use":
                calls.append(ToolCall(block.id, block.name, _tool_input(block.input)))
        return ModelResponse(
            text="".join(text),
            tool_calls=tuple(calls),
            usage=_usage(_token_counts(message.usage)),
            finish_reason=to_finish_reason(message.stop_reason),
            provider=self._name,
            model=message.model or self._model,
            provider_request_id=request_id or message.id or None,
        )

    async def _pull(
        self,
        events: anthropic.AsyncStream[RawMessageStreamEvent],
        state: _Events,
        *,
        before_first: bool,
    ) -> str | None:
        """Read one event into ``state``; its text delta, or None at the end of the stream."""
        try:
            event = await events.__anext__()
        except StopAsyncIteration:
            if state.count == 0:
                raise ProviderError("stream ended before any event", provider=self._name) from None
            return None
        except (anthropic.APIConnectionError, httpx2.TransportError) as exc:
            # The SDK's event stream lets the HTTP client's read errors through unwrapped.
            if before_first:
                message = f"connection lost: {self._redact(exc)}"
                raise ProviderError(message, provider=self._name, retryable=True) from exc
            raise self._arrived_error("stream broke off", exc) from exc
        except Exception as exc:
            raise self._arrived_error("stream failed", exc) from exc
        try:
            return state.add(event)
        except Exception as exc:
            raise self._arrived_error("malformed stream event", exc) from exc

    def _error(self, exc: anthropic.AnthropicError) -> ProviderError:
        """Map an SDK error raised before any response arrived."""
        if isinstance(exc, anthropic.APIStatusError):
            detail = self._scrub(exc.api_message or exc.message)
            return self._status_error(
                exc.status_code,
                detail,
                request_id=exc.request_id,
                headers=exc.response.headers,
                overflow=_CONTEXT_PROSE.search(detail) is not None,
            )
        if isinstance(exc, anthropic.APIConnectionError):
            timed_out = isinstance(exc, anthropic.APITimeoutError)
            return self._connection_error(exc, timed_out=timed_out)
        return ProviderError(self._redact(exc), provider=self._name)

    def _arrived_error(self, what: str, exc: BaseException) -> ProviderError:
        """A failure after a response arrived: reported, never retried."""
        if isinstance(exc, anthropic.APIStatusError):
            # An `error` event inside a 200 stream: the SDK dresses it as a status error.
            detail = self._scrub(exc.api_message or exc.message)
            return ProviderError(f"{what}: {detail}", provider=self._name, status=200)
        return super()._arrived_error(what, exc)


class _Events:
    """Accumulates stream events into the response ``complete`` would have returned."""

    def __init__(self, *, request_id: str | None) -> None:
        self.request_id = request_id
        self.count = 0
        self.text: list[str] = []
        self.tools: dict[int, tuple[str, str, Any, list[str]]] = {}
        self.message_id: str | None = None
        self.model: str | None = None
        self.stop_reason: str | None = None
        self.tokens: dict[str, int] = {}

    def add(self, event: RawMessageStreamEvent) -> str:
        self.count += 1
        if event.type == "message_start":
            self.message_id = event.message.id
            self.model = event.message.model
            self.tokens.update(_token_counts(event.message.usage))
        elif event.type == "content_block_start":
            block = event.content_block
            if block.type == "tool_use":
                self.tools[event.index] = (block.id, block.name, block.input, [])
            elif block.type == "text" and block.text:
                self.text.append(block.text)
                return block.text
        elif event.type == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta":
                self.text.append(delta.text)
                return delta.text
            if delta.type == "input_json_delta":
                self.tools[event.index][3].append(delta.partial_json)
        elif event.type == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            # message_delta repeats counts cumulatively; a later value wins.
            self.tokens.update(_token_counts(event.usage))
        return ""

    def response(self, provider: str, model: str) -> ModelResponse:
        calls = []
        for _, (call_id, name, start_input, parts) in sorted(self.tools.items()):
            raw = "".join(parts)
            arguments = parse_tool_arguments(raw) if raw else _tool_input(start_input)
            calls.append(ToolCall(call_id, name, arguments))
        return ModelResponse(
            text="".join(self.text),
            tool_calls=tuple(calls),
            usage=_usage(self.tokens),
            finish_reason=to_finish_reason(self.stop_reason),
            provider=provider,
            model=self.model or model,
            provider_request_id=self.request_id or self.message_id,
        )


def _params(model: str, request: ModelRequest) -> dict[str, Any]:
    system = "\n\n".join(m.content for m in request.messages if m.role == "system" and m.content)
    params: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_output_tokens,
        "messages": _wire_messages(request.messages),
    }
    if system:
        params["system"] = system
    if request.tools:
        params["tools"] = [
            {
                "name": tool.name,
                "description": tool.description,
                "input_schema": thaw(tool.parameters),
            }
            for tool in request.tools
        ]
    # No temperature: the messages API this SDK speaks has no sampling parameters, and
    # smuggling one in through extra_body would fail every request that set it.
    return params


def _wire_messages(messages: tuple[ModelMessage, ...]) -> list[dict[str, Any]]:
    """Map neutral messages to the API's turns.

    The API has no system or tool role: system text goes to ``system``, and
    each run of tool messages becomes one user turn of ``tool_result`` blocks,
    which must directly follow the assistant turn that asked for them.
    """
    wire: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None
    for message in messages:
        if message.role == "system":
            continue
        if message.role == "tool":
            if results is None:
                results = []
                wire.append({"role": "user", "content": results})
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id,
                    "content": message.content,
                }
            )
            continue
        results = None
        if message.role == "user":
            wire.append({"role": "user", "content": message.content})
            continue
        blocks: list[dict[str, Any]] = []
        if message.content:
            blocks.append({"type": "text", "text": message.content})
        blocks.extend(
            {
                "type": "tool_use",
                "id": call.call_id,
                "name": call.name,
                "input": thaw(call.arguments),
            }
            for call in message.tool_calls
        )
        # The API rejects empty assistant turns, and an empty answer carries nothing to resend.
        if blocks:
            wire.append({"role": "assistant", "content": blocks})
    return wire


def _tool_input(value: object) -> Mapping[str, Any]:
    """A tool_use ``input`` as a mapping (the API sends an object; anything else is kept raw)."""
    if isinstance(value, Mapping):
        return value
    return {"_raw": str(value)[:2000]}


def _token_counts(usage: Any) -> dict[str, int]:
    """The reported token fields of a usage block; absent and null ones are left out."""
    counts = {field: getattr(usage, field, None) for field in _TOKEN_FIELDS}
    return {field: value for field, value in counts.items() if value is not None}


def _usage(tokens: Mapping[str, int]) -> Usage:
    """Anthropic's input_tokens exclude cache reads and writes; hostkit's include them.

    Adding them back makes ``input_tokens`` mean "every prompt token the
    model read" for every provider, which is what context calibration compares
    its estimate against.
    """
    read = tokens.get("cache_read_input_tokens", 0)
    write = tokens.get("cache_creation_input_tokens", 0)
    return Usage(
        input_tokens=tokens.get("input_tokens", 0) + read + write,
        output_tokens=tokens.get("output_tokens", 0),
        cache_read_tokens=read,
        cache_write_tokens=write,
    )
