"""``OpenAIChatProvider``: the ModelProvider over the chat completions API.

One adapter serves OpenAI and the OpenAI-compatible servers people run
locally (vLLM, llama.cpp server, Ollama), through the official ``openai`` SDK
(``pip install hostkit[openai]``).

The SDK's own retries are off (``max_retries=0``). hostkit retries with its
``RetryPolicy`` so that one policy governs every provider and so that the
line between "no response arrived" (retry) and "a response arrived" (never
request again) is drawn here, where it can be tested, rather than inside the
SDK. A non-streamed call counts as arrived once the status line and headers
are in; a streamed call once its first chunk is.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

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
    ToolDefinition,
    Usage,
)

__all__ = ["OpenAIChatProvider"]

DEFAULT_LIMITS = ModelLimits(context_window=128_000, max_output_tokens=4096)

# Local servers ignore the key, but the SDK refuses to build a client without one.
_PLACEHOLDER_KEY = "not-needed"
_OPENAI_HOST = "api.openai.com"
# OpenAI's error code and llama.cpp's error type; vLLM says it only in prose.
_CONTEXT_MARKERS = frozenset({"context_length_exceeded", "exceed_context_size_error"})
_CONTEXT_PROSE = re.compile(
    r"maximum context length|context[ _]length[ _]exceeded|exceeds? the available context"
    r"|context (size|window) (has been |was )?exceeded|too long for the context",
    re.IGNORECASE,
)


class OpenAIChatProvider(SdkProvider[openai.AsyncOpenAI]):
    """A model behind the chat completions API, normalized to hostkit's values.

    ``base_url`` selects an OpenAI-compatible server; without it the SDK's
    default (or ``OPENAI_BASE_URL``) is used. ``api_key`` may be omitted for
    a local server: a placeholder is sent, and ``OPENAI_API_KEY`` is *not*
    read, so an OpenAI key never travels to a third-party ``base_url``.
    Without either, the key comes from ``OPENAI_API_KEY`` and its absence is a
    ``ConfigError`` at construction. The SDK client is built on first use in a
    worker thread (building it reads certificates and package metadata, which
    would block the event loop). Use as an async context manager or call
    ``aclose()``.
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
        name: str = "openai",
    ) -> None:
        super().__init__(
            model=model,
            name=name,
            base_url=base_url,
            limits=limits or DEFAULT_LIMITS,
            timeout_s=timeout_s,
            retry=retry,
        )
        if api_key is None and base_url is None and not os.environ.get("OPENAI_API_KEY"):
            raise ConfigError("no API key: pass api_key or set OPENAI_API_KEY", key="api_key")
        self._api_key = api_key if api_key is not None or base_url is None else _PLACEHOLDER_KEY
        self._max_tokens_key = "max_tokens"

    @property
    def limits(self) -> ModelLimits:
        """Limits the ContextManager budgets against (128k/4k unless configured)."""
        return self._limits

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send one chat completion; see ``ModelProvider`` for errors and retries."""
        client = await self._sdk()
        params = self._params(request)

        async def attempt() -> ModelResponse:
            try:
                creating = client.chat.completions.with_streaming_response.create(**params)
                async with creating as raw:
                    # The status line and headers are in: from here on, nothing is re-sent.
                    try:
                        completion = await raw.parse()
                        return self._response(completion, request_id=raw.request_id)
                    except Exception as exc:
                        raise self._arrived_error("unreadable response", exc) from exc
            except openai.OpenAIError as exc:
                raise self._error(exc) from exc

        return await call_with_retries(attempt, policy=self._retry)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Yield text deltas, then one ``done`` event with the full normalized response.

        Failures before the first chunk are retried like ``complete``; once a
        chunk has arrived a failure raises ``ProviderError`` and nothing is
        re-sent. Close the iterator (``contextlib.aclosing``) if you stop early.
        """
        client = await self._sdk()
        params = {**self._params(request), "stream": True}
        params["stream_options"] = {"include_usage": True}

        async def open_stream() -> tuple[openai.AsyncStream[ChatCompletionChunk], _Chunks, str]:
            try:
                chunks = await client.chat.completions.create(**params)
            except openai.OpenAIError as exc:
                raise self._error(exc) from exc
            state = _Chunks(request_id=chunks.response.headers.get("x-request-id"))
            try:
                first = await self._pull(chunks, state, before_first=True)
            except BaseException:
                await chunks.close()
                raise
            return chunks, state, first or ""

        chunks, state, text = await call_with_retries(open_stream, policy=self._retry)
        try:
            while True:
                if text:
                    yield StreamEvent(kind="text", text=text)
                pulled = await self._pull(chunks, state, before_first=False)
                if pulled is None:
                    break
                text = pulled
        finally:
            with anyio.CancelScope(shield=True):
                await chunks.close()
        yield StreamEvent(kind="done", response=state.response(self._name, self._model))

    def _build_client(self) -> openai.AsyncOpenAI:
        try:
            client = openai.AsyncOpenAI(
                api_key=self._api_key,
                base_url=self._base_url,
                timeout=self._timeout_s,
                max_retries=0,
            )
        except openai.OpenAIError as exc:
            raise ConfigError("the openai SDK found no credentials", key="api_key") from exc
        self._secret = client.api_key
        # OpenAI's reasoning models reject max_tokens; compatible servers may not know the new name.
        if client.base_url.host == _OPENAI_HOST:
            self._max_tokens_key = "max_completion_tokens"
        return client

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self._model,
            "messages": [_wire_message(message) for message in request.messages],
            self._max_tokens_key: request.max_output_tokens,
        }
        if request.tools:
            params["tools"] = [_wire_tool(tool) for tool in request.tools]
        if request.temperature is not None:
            params["temperature"] = request.temperature
        return params

    def _response(self, completion: object, *, request_id: str | None) -> ModelResponse:
        if not isinstance(completion, ChatCompletion) or not completion.choices:
            raise TypeError("the body is not a chat completion with at least one choice")
        message = completion.choices[0].message
        calls = [
            _tool_call(call.id, call.function.name, call.function.arguments, index)
            for index, call in enumerate(message.tool_calls or ())
            if call.type == "function"
        ]
        return ModelResponse(
            text=message.content or message.refusal or "",
            tool_calls=tuple(calls),
            usage=_usage(completion.usage),
            finish_reason=to_finish_reason(completion.choices[0].finish_reason),
            provider=self._name,
            model=completion.model or self._model,
            provider_request_id=request_id or completion.id or None,
        )

    async def _pull(
        self,
        chunks: openai.AsyncStream[ChatCompletionChunk],
        state: _Chunks,
        *,
        before_first: bool,
    ) -> str | None:
        """Read one chunk into ``state``; its text delta, or None at the end of the stream."""
        try:
            chunk = await chunks.__anext__()
        except StopAsyncIteration:
            if state.count == 0:
                raise ProviderError("stream ended before any chunk", provider=self._name) from None
            return None
        except openai.APIConnectionError as exc:
            if before_first:
                raise self._error(exc) from exc
            raise self._arrived_error("stream broke off", exc) from exc
        except Exception as exc:
            raise self._arrived_error("stream failed", exc) from exc
        try:
            return state.add(chunk)
        except Exception as exc:
            raise self._arrived_error("malformed stream chunk", exc) from exc

    def _error(self, exc: openai.OpenAIError) -> ProviderError:
        """Map an SDK error raised before any response arrived."""
        if isinstance(exc, openai.APIStatusError):
            detail = self._scrub(_api_message(exc))
            return self._status_error(
                exc.status_code,
                detail,
                request_id=exc.request_id or exc.response.headers.get("x-request-id"),
                headers=exc.response.headers,
                overflow=exc.code in _CONTEXT_MARKERS
                or exc.type in _CONTEXT_MARKERS
                or _CONTEXT_PROSE.search(detail) is not None,
            )
        if isinstance(exc, openai.APIConnectionError):
            return self._connection_error(exc, timed_out=isinstance(exc, openai.APITimeoutError))
        return ProviderError(self._redact(exc), provider=self._name)


class _Chunks:
    """Accumulates streamed chunks into the response ``complete`` would have returned."""

    def __init__(self, *, request_id: str | None) -> None:
        self.request_id = request_id
        self.count = 0
        self.text: list[str] = []
        self.calls: dict[int, tuple[str, str, list[str]]] = {}
        self.finish: str | None = None
        self.usage: Any = None
        self.model: str | None = None
        self.completion_id: str | None = None

    def add(self, chunk: ChatCompletionChunk) -> str:
        self.count += 1
        self.completion_id = self.completion_id or chunk.id
        self.model = self.model or chunk.model
        if chunk.usage is not None:
            self.usage = chunk.usage
        delta_text = ""
        for choice in chunk.choices or ():
            self.finish = choice.finish_reason or self.finish
            if choice.delta is None:
                continue
            if choice.delta.content:
                self.text.append(choice.delta.content)
                delta_text += choice.delta.content
            for call in choice.delta.tool_calls or ():
                index = call.index if isinstance(call.index, int) else len(self.calls)
                call_id, name, arguments = self.calls.get(index, ("", "", []))
                if call.function is not None:
                    name = name or call.function.name or ""
                    arguments.append(call.function.arguments or "")
                self.calls[index] = (call_id or call.id or "", name, arguments)
        return delta_text

    def response(self, provider: str, model: str) -> ModelResponse:
        calls = [
            _tool_call(call_id, name, "".join(arguments), index)
            for index, (call_id, name, arguments) in sorted(self.calls.items())
        ]
        return ModelResponse(
            text="".join(self.text),
            tool_calls=tuple(calls),
            usage=_usage(self.usage),
            finish_reason=to_finish_reason(self.finish),
            provider=provider,
            model=self.model or model,
            provider_request_id=self.request_id or self.completion_id,
        )


def _wire_message(message: ModelMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.name:
        wire["name"] = message.name
    if message.role == "assistant" and message.tool_calls:
        # The API's convention for "only tool calls" is a null content, not "".
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(thaw(call.arguments))},
            }
            for call in message.tool_calls
        ]
    return wire


def _wire_tool(tool: ToolDefinition) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": thaw(tool.parameters),
        },
    }


def _tool_call(call_id: str | None, name: str, arguments: str | None, index: int) -> ToolCall:
    # Some local servers omit call ids; the tool message still needs one to answer.
    return ToolCall(
        call_id=call_id or f"call_{index}", name=name, arguments=parse_tool_arguments(arguments)
    )


def _usage(usage: Any) -> Usage:
    """OpenAI's prompt_tokens already include cached tokens; the cache buckets are subsets."""
    if usage is None:
        return Usage()
    details = usage.prompt_tokens_details
    return Usage(
        input_tokens=usage.prompt_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
        cache_read_tokens=(details.cached_tokens or 0) if details else 0,
        cache_write_tokens=(details.cache_write_tokens or 0) if details else 0,
    )


def _api_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, Mapping):
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
    if isinstance(body, str) and body:
        return body
    return exc.message
