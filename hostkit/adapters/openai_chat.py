"""``OpenAIChatProvider``: the ModelProvider over the chat completions API.

One adapter serves OpenAI and the OpenAI-compatible servers people run
locally (vLLM, llama.cpp server, Ollama), through the official ``openai`` SDK
(``pip install hostkit[openai]``).

The SDK's own retries are off (``max_retries=0``). hostkit retries with its
``RetryPolicy`` so that one policy governs every provider and so that the
line between "no response arrived" (retry) and "a response arrived" (never
request again) is drawn in one place (``hostkit.adapters._streaming``), where
it can be tested, rather than inside the SDK. A non-streamed call counts as
arrived once the status line and headers are in; a streamed call once its
first chunk is. This module holds only what is OpenAI's: credentials, the
wire format of messages and tools, and how chunks and usage read.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import urlsplit

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import ChoiceDelta

from hostkit.adapters import NO_API_KEY, unset_default_key
from hostkit.adapters._sdk import SdkErrors
from hostkit.adapters._streaming import Draft, SdkModelProvider
from hostkit.adapters._wire import bounded_client
from hostkit.errors import ConfigError
from hostkit.freeze import thaw
from hostkit.types import (
    IMAGE_TYPES,
    NO_ATTACHMENTS,
    AttachmentPart,
    AttachmentSupport,
    ModelLimits,
    ModelMessage,
    ModelRequest,
    ToolDefinition,
    stand_in,
)

__all__ = ["OpenAIChatProvider"]

DEFAULT_LIMITS = ModelLimits(context_window=128_000, max_output_tokens=4096)
# OpenAI's vision models take images as data URLs and PDFs as file parts; text goes inline.
OPENAI_ATTACHMENTS = AttachmentSupport(IMAGE_TYPES | {"text/plain", "application/pdf"})

# Local servers ignore the key, but the SDK refuses to build a client without one.
_PLACEHOLDER_KEY = "not-needed"
_OPENAI_HOST = "api.openai.com"


class OpenAIChatProvider(SdkModelProvider[openai.AsyncOpenAI, ChatCompletionChunk]):
    """A model behind the chat completions API, normalized to hostkit's values.

    ``base_url`` selects an OpenAI-compatible server; without it the SDK's
    default (or ``OPENAI_BASE_URL``) is used. ``api_key`` may be omitted for
    a local server: a placeholder is sent, and ``OPENAI_API_KEY`` is *not*
    read, so an OpenAI key never travels to a third-party ``base_url``.
    Without either, the key comes from ``OPENAI_API_KEY`` and its absence is a
    ``ConfigError`` at construction. Attachments: against OpenAI itself,
    images, PDF and text (``OPENAI_ATTACHMENTS``); against another server
    (``base_url`` or ``OPENAI_BASE_URL``) none unless ``attachments=`` says
    what that server's model takes (many local models read no images).
    Limits default to a 128k window and 4k output. The SDK client is built
    on first use in a worker thread (building it reads certificates and
    package metadata, which would block the event loop). Use as an async
    context manager or call ``aclose()``.
    """

    _default_name = "openai"
    _default_limits = DEFAULT_LIMITS
    _base_url_env = "OPENAI_BASE_URL"
    _errors = SdkErrors.of(openai, base=openai.OpenAIError)
    _request_id_header = "x-request-id"
    # OpenAI's error code and llama.cpp's error type; vLLM says it only in prose.
    _overflow_markers = frozenset({"context_length_exceeded", "exceed_context_size_error"})
    _overflow_prose = re.compile(
        r"maximum context length|context[ _]length[ _]exceeded|exceeds? the available context"
        r"|context (size|window) (has been |was )?exceeded|too long for the context",
        re.IGNORECASE,
    )
    _unit = "chunk"
    # prompt_tokens already includes cached tokens; the cache buckets are subsets.
    _cache_in_input = True
    _stream_params: ClassVar[Mapping[str, Any]] = {"stream_options": {"include_usage": True}}

    def _default_attachments(self, base_url: str | None) -> AttachmentSupport:
        # Where the SDK will send requests: the given URL, else OPENAI_BASE_URL, else OpenAI.
        target = base_url or os.environ.get("OPENAI_BASE_URL")
        if target is None or urlsplit(target).hostname == _OPENAI_HOST:
            return OPENAI_ATTACHMENTS
        return NO_ATTACHMENTS

    def _take_credentials(self, api_key: str | None) -> None:
        local = self._base_url is not None
        if api_key is None and not local and not os.environ.get("OPENAI_API_KEY"):
            missing = unset_default_key("openai", base_url=None)
            if missing is not None:
                raise ConfigError(NO_API_KEY.format(variable=missing), key="api_key_env")
            local = True  # the server OPENAI_BASE_URL names, with no key set: keyless
        self._api_key = _PLACEHOLDER_KEY if api_key is None and local else api_key

    def _build_client(self) -> openai.AsyncOpenAI:
        try:
            client = openai.AsyncOpenAI(
                api_key=self._api_key,
                base_url=self._base_url,
                timeout=self._timeout_s,
                max_retries=0,
                http_client=bounded_client(openai.DefaultAsyncHttpxClient),
            )
        except openai.OpenAIError as exc:
            raise ConfigError("the openai SDK found no credentials", key="api_key_env") from exc
        self._secret = client.api_key
        # OpenAI's reasoning models reject max_tokens; compatible servers may not know the new name.
        if client.base_url.host == _OPENAI_HOST:
            self._max_tokens_key = "max_completion_tokens"
        # The SDK imports its chat resources at their first use (tens of ms): here, in the
        # worker thread, not at the first request on the event loop.
        self._endpoint(client)
        return client

    def _endpoint(self, client: openai.AsyncOpenAI) -> Any:
        return client.chat.completions

    def _wire_request(self, request: ModelRequest) -> dict[str, Any]:
        wire: dict[str, Any] = {"messages": [_wire_message(m) for m in request.messages]}
        if request.tools:
            wire["tools"] = [_wire_tool(tool) for tool in request.tools]
        if request.temperature is not None:
            wire["temperature"] = request.temperature
        return wire

    def _read(self, body: object, draft: Draft) -> None:
        if not isinstance(body, ChatCompletion) or not body.choices:
            raise TypeError("the body is not a chat completion with at least one choice")
        message = body.choices[0].message
        draft.add_text(message.content or message.refusal or "")
        for index, call in enumerate(message.tool_calls or ()):
            if call.type == "function":
                fragments = (call.function.arguments or "",)
                draft.open_call(
                    index, call_id=call.id, name=call.function.name, fragments=fragments
                )
        draft.report_usage(_token_counts(body.usage))
        draft.finish = body.choices[0].finish_reason
        draft.model = body.model
        draft.response_id = body.id

    def _apply(self, item: ChatCompletionChunk, draft: Draft) -> str:
        draft.response_id = draft.response_id or item.id
        draft.model = draft.model or item.model
        if item.usage is not None:
            draft.report_usage(_token_counts(item.usage))
        delta_text = ""
        for choice in item.choices or ():
            if choice.finish_reason:
                # The SDK swallows ``[DONE]``; a finish reason is what says the answer is whole.
                draft.finish = choice.finish_reason
                draft.ended = True
            # Typed as always present, but a compatible server may send ``"delta": null``.
            delta: ChoiceDelta | None = choice.delta
            if delta is None:
                continue
            if delta.content:
                delta_text += draft.add_text(delta.content)
            for fragment in delta.tool_calls or ():
                function = fragment.function
                name = function.name if function is not None else None
                call = draft.call(_call_index(draft, fragment.index, fragment.id, name))
                draft.identify(call, call_id=fragment.id, name=name)
                if function is not None:
                    draft.add_fragment(call, function.arguments or "")
        return delta_text

    def _unkept_output(self, item: ChatCompletionChunk) -> bool:
        # A refusal, or the reasoning compatible servers stream before the answer under a
        # field of their own (``reasoning_content``, ``reasoning``), for minutes at a time.
        for choice in item.choices or ():
            delta: ChoiceDelta | None = choice.delta
            if delta is not None and (
                delta.refusal or any(value for value in (delta.model_extra or {}).values())
            ):
                return True
        return False

    def _status_detail(self, exc: openai.APIStatusError) -> str:
        body = exc.body
        if isinstance(body, Mapping):
            message = body.get("message")
            if isinstance(message, str) and message:
                return message
        if isinstance(body, str) and body:
            return body
        return exc.message


def _call_index(draft: Draft, index: object, call_id: str | None, name: str | None) -> int:
    """The draft index of the call a streamed tool-call fragment belongs to.

    Servers that send no ``index`` (some compatible ones) still send the id
    and name on a call's first fragment only: such a fragment opens a new call
    (unless it repeats the id of the call opened last), and one with neither
    continues the call opened last.
    """
    if isinstance(index, int) and not isinstance(index, bool):
        return index
    last = draft.last_call
    if last is not None and (
        not (call_id or name) or (call_id and call_id == draft.calls[last].call_id)
    ):
        return last
    return max(draft.calls, default=-1) + 1


def _token_counts(usage: Any) -> dict[str, object]:
    """A usage block for ``Draft.report_usage``; prompt_tokens already counts the cached ones.

    Read with ``getattr``: the SDK builds the block unvalidated, so any field may be missing.
    """
    if usage is None:
        return {}
    details = getattr(usage, "prompt_tokens_details", None)
    return {
        "input": getattr(usage, "prompt_tokens", None),
        "output": getattr(usage, "completion_tokens", None),
        "cache_read": getattr(details, "cached_tokens", None),
        "cache_write": getattr(details, "cache_write_tokens", None),
    }


def _wire_message(message: ModelMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.attachments:
        parts = [_wire_part(part) for part in message.attachments]
        if message.content:
            parts.append({"type": "text", "text": message.content})
        wire["content"] = parts
    if message.name:
        wire["name"] = message.name
    if message.role == "assistant" and message.tool_calls:
        # The API's convention for "only tool calls" is a null content, not "".
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": json.dumps(thaw(call.arguments), allow_nan=False),
                },
            }
            for call in message.tool_calls
        ]
    return wire


def _wire_part(part: AttachmentPart) -> dict[str, Any]:
    """One attachment as a content part: image as a data URL, PDF as a file, text inline."""
    attachment = part.attachment
    if part.data is None:
        return {"type": "text", "text": stand_in(attachment)}
    if attachment.media_type == "text/plain":
        text = part.data.decode("utf-8")
        return {"type": "text", "text": f"[attachment {attachment.name}]\n{text}"}
    url = f"data:{attachment.media_type};base64,{base64.b64encode(part.data).decode('ascii')}"
    if attachment.media_type == "application/pdf":
        return {"type": "file", "file": {"filename": attachment.name, "file_data": url}}
    return {"type": "image_url", "image_url": {"url": url}}


def _wire_tool(tool: ToolDefinition) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": thaw(tool.parameters),
        },
    }
