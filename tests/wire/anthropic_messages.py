"""Payloads shaped like the messages API's real answers and event streams.

Field sets follow captured Anthropic responses, including fields hostkit
ignores (``stop_sequence``, ``service_tier``), and streams interleave ``ping``
events the way the API does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from hostkit.types import FinishReason, Usage
from tests.wire.scenario import Answer
from tests.wire.server import Reply, json_reply, sse_reply

__all__ = [
    "KEEP_ALIVE",
    "MODEL",
    "WRONG_SHAPE",
    "answer_events",
    "answer_reply",
    "error",
    "error_reply",
    "event",
    "malformed_event",
    "message",
    "opening_events",
    "overflow_reply",
    "reasoning_events",
    "sse",
    "stream_error",
    "text_block",
    "tool_use_block",
    "unfinished_events",
    "usage",
    "usage_reply",
]

MODEL = "claude-sonnet-4-5-20250929"
# A 200 that parses as JSON but whose content is not a list of blocks.
WRONG_SHAPE = '{"id": "msg_1", "type": "message", "content": "not blocks"}'

_STOP: Mapping[FinishReason, str] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
    # A server tool paused a long turn; no hostkit reason of its own.
    "other": "pause_turn",
}
# What the API sends while the model is busy: an event that adds nothing to the answer.
KEEP_ALIVE = b'event: ping\ndata: {"type": "ping"}\n\n'
_ERROR_KINDS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def usage(
    input_tokens: int, output_tokens: int, *, cache_read: int = 0, cache_write: int = 0
) -> dict[str, Any]:
    """A usage block; ``input_tokens`` excludes both cache buckets, as Anthropic reports it."""
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": cache_write,
        "cache_read_input_tokens": cache_read,
        "service_tier": "standard",
    }


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def tool_use_block(call_id: str, name: str, tool_input: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": dict(tool_input)}


def message(
    content: Sequence[Mapping[str, Any]],
    *,
    stop_reason: str = "end_turn",
    usage_block: Mapping[str, Any] | None = None,
    message_id: str = "msg_01XFDUDYJgAACzvnptvVoYEL",
) -> dict[str, Any]:
    """A non-streamed ``message`` object."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [dict(block) for block in content],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": dict(usage_block or usage(12, 6)),
    }


def event(kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    """One named stream event; its data carries ``type`` like the API's does."""
    return kind, {"type": kind, **fields}


def sse(events: Sequence[tuple[str, Mapping[str, Any]]]) -> tuple[bytes, ...]:
    """Frame events as the API does: ``event: <name>`` then ``data: <json>``."""
    return tuple(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


def error(kind: str, text: str) -> dict[str, Any]:
    """Anthropic's error envelope: ``{"type": "error", "error": {type, message}}``."""
    return {"type": "error", "error": {"type": kind, "message": text}, "request_id": None}


def _usage(normalized: Usage, *, output_tokens: int) -> dict[str, Any]:
    """Anthropic's block for a normalized usage: its input_tokens leave the cache buckets out."""
    read, write = normalized.cache_read_tokens, normalized.cache_write_tokens
    return usage(
        normalized.input_tokens - read - write, output_tokens, cache_read=read, cache_write=write
    )


def _headers(answer: Answer) -> dict[str, str]:
    return {"request-id": answer.request_id} if answer.request_id else {}


def answer_reply(answer: Answer, *, stream: bool) -> Reply:
    """The whole answer as Anthropic sends it: a message, or its event stream."""
    if stream:
        return sse_reply(answer_events(answer), headers=_headers(answer))
    blocks = [text_block(answer.text)] if answer.text else []
    blocks += [
        tool_use_block(call.call_id, call.name, json.loads(call.arguments_json))
        for call in answer.calls
    ]
    body = message(
        blocks,
        stop_reason=_STOP[answer.finish],
        usage_block=_usage(answer.usage, output_tokens=answer.usage.output_tokens),
        message_id=answer.response_id,
    )
    return json_reply(body, headers=_headers(answer))


def answer_events(answer: Answer) -> tuple[bytes, ...]:
    """The stream: message_start (input usage), a text block, one block per tool, message_delta.

    A ping follows the first block start and each tool's input begins with
    an empty ``input_json_delta``, as the API sends them.
    """
    started = message([], usage_block=_usage(answer.usage, output_tokens=1))
    started.update(id=answer.response_id, stop_reason=None)
    events = [event("message_start", message=started)]
    index = 0
    if answer.deltas:
        text_start = {"type": "text", "text": ""}
        events += [event("content_block_start", index=0, content_block=text_start), event("ping")]
        events += [
            event("content_block_delta", index=0, delta={"type": "text_delta", "text": delta})
            for delta in answer.deltas
        ]
        events.append(event("content_block_stop", index=0))
        index = 1
    for call in answer.calls:
        block = {"type": "tool_use", "id": call.call_id, "name": call.name, "input": {}}
        events.append(event("content_block_start", index=index, content_block=block))
        events += [
            event(
                "content_block_delta",
                index=index,
                delta={"type": "input_json_delta", "partial_json": fragment},
            )
            for fragment in ("", *call.fragments)
        ]
        events.append(event("content_block_stop", index=index))
        index += 1
    stop = {"stop_reason": _STOP[answer.finish], "stop_sequence": None}
    events.append(
        event("message_delta", delta=stop, usage={"output_tokens": answer.usage.output_tokens})
    )
    events.append(event("message_stop"))
    return sse(events)


def unfinished_events(answer: Answer) -> tuple[bytes, ...]:
    """The stream without what finishes it: its blocks, but no message_delta or message_stop."""
    return answer_events(answer)[:-2]


def usage_reply(count: object, *, stream: bool) -> Reply:
    """A one-word answer whose usage reports ``count`` (any JSON value) in every count field."""
    fields = ("input_tokens", "output_tokens", "cache_creation_input_tokens")
    block = dict.fromkeys((*fields, "cache_read_input_tokens"), count)
    if not stream:
        return json_reply(message([text_block("ok")], usage_block=block))
    started = message([], usage_block=block)
    started.update(stop_reason=None)
    text = {"type": "text", "text": ""}
    stop = {"stop_reason": "end_turn", "stop_sequence": None}
    events = [
        event("message_start", message=started),
        event("content_block_start", index=0, content_block=text),
        event("content_block_delta", index=0, delta={"type": "text_delta", "text": "ok"}),
        event("content_block_stop", index=0),
        event("message_delta", delta=stop, usage={"output_tokens": count}),
        event("message_stop"),
    ]
    return sse_reply(sse(events))


def opening_events(answer: Answer) -> tuple[bytes, ...]:
    """The stream through its first text delta: message_start, block start, ping, delta."""
    assert answer.deltas, "the answer has no text to open with"
    return answer_events(answer)[:4]


def reasoning_events(count: int) -> tuple[bytes, ...]:
    """A thinking block of ``count`` deltas (index 0 like the text block after it: the adapter
    keeps the index of tool blocks only)."""
    thinking = {"type": "thinking", "thinking": "", "signature": ""}
    delta = {"type": "thinking_delta", "thinking": "Hmm. "}
    return sse(
        [
            event("content_block_start", index=0, content_block=thinking),
            *[event("content_block_delta", index=0, delta=delta)] * count,
            event("content_block_stop", index=0),
        ]
    )


def malformed_event() -> bytes:
    """A named stream event whose data is not JSON."""
    return b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": \n\n'


def stream_error(text: str) -> bytes:
    """An ``error`` event inside a 200 stream (e.g. overloaded after some text)."""
    return sse([event("error", error={"type": "overloaded_error", "message": text})])[0]


def error_reply(status: int, text: str, *, headers: Mapping[str, str] | None = None) -> Reply:
    """An error status with Anthropic's envelope and the error type it uses for that status."""
    kind = _ERROR_KINDS.get(status, "api_error")
    return json_reply(error(kind, text), status=status, headers=headers)


def overflow_reply() -> Reply:
    """Anthropic's answer to a prompt longer than the model's window."""
    body = error("invalid_request_error", "prompt is too long: 215000 tokens > 200000 maximum")
    return json_reply(body, status=400)
