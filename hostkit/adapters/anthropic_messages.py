"""``AnthropicProvider``: the ModelProvider over Anthropic's messages API.

Built on the official ``anthropic`` SDK (``pip install hostkit[anthropic]``).
As in the OpenAI adapter, the SDK's own retries are off (``max_retries=0``)
and the shared skeleton (``hostkit.adapters._streaming``) decides under
hostkit's ``RetryPolicy``: only failures before any response arrived are
retried (429, 5xx, 529 overloaded, connection errors); a response that
arrived — its headers for ``complete``, its first event for ``stream`` — is
never requested again. This module holds only what is Anthropic's:
credentials, the wire format of messages and tools, and how events and usage
read.
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import os
import re
from typing import Any

import anthropic
import httpx2
from anthropic.types import Message, RawMessageStreamEvent

from hostkit.adapters import NO_API_KEY, unset_default_key
from hostkit.adapters._sdk import SdkErrors
from hostkit.adapters._streaming import Draft, SdkModelProvider
from hostkit.adapters._wire import bounded_client
from hostkit.errors import ConfigError
from hostkit.freeze import thaw
from hostkit.types import (
    IMAGE_TYPES,
    AttachmentPart,
    AttachmentSupport,
    ModelLimits,
    ModelMessage,
    ModelRequest,
    stand_in,
)

__all__ = ["AnthropicProvider"]

DEFAULT_LIMITS = ModelLimits(context_window=200_000, max_output_tokens=8192)
# Image blocks, and document blocks for PDF and text. The API limits an image to 5 MiB
# of base64, which is 3.75 MiB of bytes; one limit for every type keeps it simple.
ANTHROPIC_ATTACHMENTS = AttachmentSupport(
    IMAGE_TYPES | {"text/plain", "application/pdf"}, max_bytes=3 * 1024 * 1024 + 768 * 1024
)

_PLACEHOLDER_KEY = "not-needed"
# What the SDK imports at its first request to put trace context in the request headers.
_TRACE_PROPAGATION = "opentelemetry.propagate"
# Events that only keep a stream open (the SDK yields them, though its event union omits them).
_KEEP_ALIVE_EVENTS = frozenset({"ping"})
# The API's usage fields, by the names the shared draft counts them under.
_TOKEN_FIELDS = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_read_input_tokens": "cache_read",
    "cache_creation_input_tokens": "cache_write",
}


class AnthropicProvider(SdkModelProvider[anthropic.AsyncAnthropic, RawMessageStreamEvent]):
    """A Claude model behind the messages API, normalized to hostkit's values.

    System messages become the ``system`` parameter, tool results become
    ``tool_result`` blocks in a user message, attachments image blocks
    (PNG, JPEG, GIF, WebP) or document blocks (PDF, text;
    ``ANTHROPIC_ATTACHMENTS``). ``api_key`` may be omitted with
    a ``base_url`` (a keyless gateway gets a placeholder, never the
    environment's key); without either, the key comes from
    ``ANTHROPIC_API_KEY`` (or a bearer ``ANTHROPIC_AUTH_TOKEN``) and its
    absence is a ``ConfigError`` at construction. Credentials are always passed
    to the SDK explicitly, so it never falls back to profile files on disk.
    Limits default to a 200k window and 8k output. The SDK client is built on
    first use in a worker thread.
    """

    _default_name = "anthropic"
    _default_limits = DEFAULT_LIMITS
    _base_url_env = "ANTHROPIC_BASE_URL"
    # The SDK's event stream lets the HTTP client's read errors through unwrapped.
    _errors = SdkErrors.of(
        anthropic, base=anthropic.AnthropicError, transport=(httpx2.TransportError,)
    )
    _request_id_header = "request-id"
    # "prompt is too long: 215000 tokens > 200000 maximum", and the variant that counts
    # max_tokens in: "input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000".
    _overflow_prose = re.compile(
        r"prompt is too long|exceeds? (the )?context (limit|window)", re.IGNORECASE
    )
    _unit = "event"
    # input_tokens excludes cache reads and writes; the draft adds them back.
    _cache_in_input = False

    def _default_attachments(self, base_url: str | None) -> AttachmentSupport:
        return ANTHROPIC_ATTACHMENTS

    def _take_credentials(self, api_key: str | None) -> None:
        self._auth_token: str | None = None
        if api_key is None and self._base_url is not None:
            api_key = _PLACEHOLDER_KEY
        elif api_key is None:
            api_key = os.environ.get("ANTHROPIC_API_KEY") or None
            self._auth_token = None if api_key else os.environ.get("ANTHROPIC_AUTH_TOKEN") or None
            missing = unset_default_key("anthropic", base_url=None)
            if missing is not None:
                raise ConfigError(NO_API_KEY.format(variable=missing), key="api_key_env")
        self._api_key = api_key
        self._secret = api_key or self._auth_token or ""

    def _build_client(self) -> anthropic.AsyncAnthropic:
        client = anthropic.AsyncAnthropic(
            api_key=self._api_key,
            auth_token=self._auth_token,
            base_url=self._base_url,
            timeout=self._timeout_s,
            max_retries=0,
            http_client=bounded_client(anthropic.DefaultAsyncHttpxClient),
        )
        # The SDK's first request imports OpenTelemetry's propagators, which look up the
        # installed distributions' entry points (tens of ms): here, in the worker thread,
        # not on the event loop. The SDK tolerates any failure of that import (it says so
        # at its first request), and so does this.
        with contextlib.suppress(Exception):
            importlib.import_module(_TRACE_PROPAGATION)
        return client

    def _endpoint(self, client: anthropic.AsyncAnthropic) -> Any:
        return client.messages

    def _wire_request(self, request: ModelRequest) -> dict[str, Any]:
        messages = request.messages
        system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
        wire: dict[str, Any] = {"messages": _wire_messages(messages)}
        if system:
            wire["system"] = system
        if request.tools:
            wire["tools"] = [
                {
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": thaw(tool.parameters),
                }
                for tool in request.tools
            ]
        # No temperature: the messages API this SDK speaks has no sampling parameters, and
        # smuggling one in through extra_body would fail every request that set it.
        return wire

    def _read(self, body: object, draft: Draft) -> None:
        if not isinstance(body, Message) or not isinstance(body.content, list):
            raise TypeError("the body is not a message with a list of content blocks")
        for index, block in enumerate(body.content):
            if block.type == "text":
                draft.add_text(block.text)
            elif block.type == "tool_use":
                draft.open_call(index, call_id=block.id, name=block.name, start_input=block.input)
        draft.report_usage(_token_counts(body.usage))
        draft.finish = body.stop_reason
        draft.model = body.model
        draft.response_id = body.id

    def _apply(self, item: RawMessageStreamEvent, draft: Draft) -> str:
        if item.type == "message_start":
            draft.response_id = item.message.id
            draft.model = item.message.model
            draft.report_usage(_token_counts(item.message.usage))
        elif item.type == "content_block_start":
            block = item.content_block
            if block.type == "tool_use":
                draft.open_call(
                    item.index, call_id=block.id, name=block.name, start_input=block.input
                )
            elif block.type == "text" and block.text:
                return draft.add_text(block.text)
        elif item.type == "content_block_delta":
            delta = item.delta
            if delta.type == "text_delta":
                return draft.add_text(delta.text)
            if delta.type == "input_json_delta":
                # A fragment for a block that never started is a malformed stream, not a new call.
                draft.add_fragment(draft.calls[item.index], delta.partial_json)
        elif item.type == "message_delta":
            draft.finish = item.delta.stop_reason or draft.finish
            # message_delta repeats counts cumulatively; a later value wins.
            draft.report_usage(_token_counts(item.usage))
        elif item.type == "message_stop":
            draft.ended = True
        return ""

    def _unkept_output(self, item: RawMessageStreamEvent) -> bool:
        # Thinking and server-tool blocks move the answer on too; only a ping is a keep-alive.
        return item.type not in _KEEP_ALIVE_EVENTS

    def _status_detail(self, exc: anthropic.APIStatusError) -> str:
        return exc.api_message or exc.message


def _token_counts(usage: Any) -> dict[str, object]:
    """A usage block for ``Draft.report_usage``; absent or null fields (message_delta) are None."""
    return {key: getattr(usage, field, None) for field, key in _TOKEN_FIELDS.items()}


# The user turn put before a history that begins with an answer.
EARLIER_PART = "(the earlier part of this conversation is not shown)"


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
            if not message.attachments:
                wire.append({"role": "user", "content": message.content})
                continue
            # Attachments first: the API reads an image best before the text about it.
            content = [_wire_block(part) for part in message.attachments]
            if message.content:
                content.append({"type": "text", "text": message.content})
            wire.append({"role": "user", "content": content})
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
    if wire and wire[0]["role"] != "user":
        # "first message must use the user role": history fitted to the window (or after
        # a summary) may begin with an answer.
        wire.insert(0, {"role": "user", "content": EARLIER_PART})
    return wire


def _wire_block(part: AttachmentPart) -> dict[str, Any]:
    """One attachment as a content block: an image block, or a document block (PDF, text)."""
    attachment = part.attachment
    if part.data is None:
        return {"type": "text", "text": stand_in(attachment)}
    if attachment.media_type == "text/plain":
        source: dict[str, Any] = {
            "type": "text",
            "media_type": "text/plain",
            "data": part.data.decode("utf-8"),
        }
    else:
        encoded = base64.b64encode(part.data).decode("ascii")
        source = {"type": "base64", "media_type": attachment.media_type, "data": encoded}
    if attachment.media_type in IMAGE_TYPES:
        return {"type": "image", "source": source}
    return {"type": "document", "source": source, "title": attachment.name}
