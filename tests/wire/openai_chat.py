"""Payloads shaped like the chat completions API's (and its compatible servers') real answers.

Field sets follow captured OpenAI responses, including the fields hostkit
ignores (``system_fingerprint``, ``logprobs``, ``refusal``), so the SDK parses
exactly what it would parse in production.
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
    "chunk",
    "completion",
    "error",
    "error_reply",
    "malformed_event",
    "opening_events",
    "overflow_reply",
    "reasoning_events",
    "sse",
    "stream_error",
    "tool_call",
    "tool_call_delta",
    "unfinished_events",
    "usage",
    "usage_reply",
]

MODEL = "gpt-4o-2024-08-06"
# What OpenRouter sends while a model is busy: an SSE comment, which the SDK drops.
KEEP_ALIVE = b": OPENROUTER PROCESSING\n\n"
CREATED = 1_741_569_952
# A 200 that parses as JSON but is no chat completion with a choice.
WRONG_SHAPE = '{"id": "chatcmpl-1", "object": "chat.completion", "choices": []}'

_FINISH: Mapping[FinishReason, str] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
    # DeepSeek's OpenAI-compatible API; no hostkit reason of its own.
    "other": "insufficient_system_resource",
}
_ERROR_KINDS = {429: "requests", 500: "server_error", 502: "server_error", 503: "server_error"}


def usage(
    prompt: int, completion: int, *, cached: int = 0, cache_write: int | None = None
) -> dict[str, Any]:
    """A usage block; ``prompt`` already includes ``cached``, as OpenAI reports it."""
    details: dict[str, Any] = {"cached_tokens": cached, "audio_tokens": 0}
    if cache_write is not None:
        details["cache_write_tokens"] = cache_write
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": details,
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def tool_call(call_id: str, name: str, arguments: Mapping[str, Any] | str) -> dict[str, Any]:
    """A complete tool call; a ``str`` is sent verbatim (to model malformed JSON)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


def completion(
    *,
    text: str | None = None,
    tool_calls: Sequence[Mapping[str, Any]] = (),
    finish_reason: str = "stop",
    usage_block: Mapping[str, Any] | None = None,
    completion_id: str = "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
) -> dict[str, Any]:
    """A non-streamed ``chat.completion`` object with one choice."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": text,
        "refusal": None,
        "annotations": [],
    }
    if tool_calls:
        message["tool_calls"] = list(tool_calls)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": CREATED,
        "model": MODEL,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": dict(usage_block or usage(19, 10)),
        "service_tier": "default",
        "system_fingerprint": "fp_f9f4fb6dbf",
    }


def tool_call_delta(
    index: int, *, call_id: str | None = None, name: str | None = None, arguments: str = ""
) -> dict[str, Any]:
    """One streamed tool-call fragment: the first carries id and name, later ones only JSON."""
    delta: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        delta.update(id=call_id, type="function")
        delta["function"]["name"] = name
    return delta


def chunk(
    *,
    content: str | None = None,
    tool_calls: Sequence[Mapping[str, Any]] = (),
    finish_reason: str | None = None,
    role: str | None = None,
    usage_block: Mapping[str, Any] | None = None,
    completion_id: str = "chatcmpl-stream-1",
) -> dict[str, Any]:
    """A ``chat.completion.chunk``; with ``usage_block`` it is the final usage-only chunk."""
    base: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": MODEL,
        "service_tier": "default",
        "system_fingerprint": "fp_f9f4fb6dbf",
    }
    if usage_block is not None:
        # What stream_options.include_usage adds: no choices, only usage.
        return {**base, "choices": [], "usage": dict(usage_block)}
    delta: dict[str, Any] = {}
    if role is not None:
        delta.update(role=role, content="", refusal=None)
    if content is not None:
        delta["content"] = content
    if tool_calls:
        delta["tool_calls"] = list(tool_calls)
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return {**base, "choices": [choice], "usage": None}


def sse(payloads: Sequence[Mapping[str, Any]], *, done: bool = True) -> tuple[bytes, ...]:
    """Frame chunks as the API does: ``data: <json>`` events, then ``data: [DONE]``."""
    events = [f"data: {json.dumps(payload)}\n\n".encode() for payload in payloads]
    if done:
        events.append(b"data: [DONE]\n\n")
    return tuple(events)


def error(
    message: str,
    *,
    kind: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
) -> dict[str, Any]:
    """OpenAI's error envelope: ``{"error": {message, type, param, code}}``."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _usage(normalized: Usage) -> dict[str, Any]:
    return usage(
        normalized.input_tokens,
        normalized.output_tokens,
        cached=normalized.cache_read_tokens,
        cache_write=normalized.cache_write_tokens or None,
    )


def _headers(answer: Answer) -> dict[str, str]:
    return {"x-request-id": answer.request_id} if answer.request_id else {}


def answer_reply(answer: Answer, *, stream: bool) -> Reply:
    """The whole answer as OpenAI sends it: a completion, or its event stream."""
    if stream:
        return sse_reply(answer_events(answer), headers=_headers(answer))
    body = completion(
        text=answer.text or None,
        tool_calls=[tool_call(c.call_id, c.name, c.arguments_json) for c in answer.calls],
        finish_reason=_FINISH[answer.finish],
        usage_block=_usage(answer.usage),
        completion_id=answer.response_id,
    )
    return json_reply(body, headers=_headers(answer))


def answer_events(answer: Answer) -> tuple[bytes, ...]:
    """The stream: a role chunk, one chunk per text delta, tool-call fragments, finish, usage.

    Each call's first fragment carries its id and name; later fragments of
    all calls are interleaved in shared chunks, as parallel calls can be.
    """
    payloads = [chunk(role="assistant", completion_id=answer.response_id)]
    payloads += [chunk(content=d, completion_id=answer.response_id) for d in answer.deltas]
    for index, call in enumerate(answer.calls):
        opening = tool_call_delta(index, call_id=call.call_id, name=call.name)
        payloads.append(chunk(tool_calls=[opening], completion_id=answer.response_id))
    for position in range(max((len(call.fragments) for call in answer.calls), default=0)):
        fragments = [
            tool_call_delta(index, arguments=call.fragments[position])
            for index, call in enumerate(answer.calls)
            if position < len(call.fragments)
        ]
        payloads.append(chunk(tool_calls=fragments, completion_id=answer.response_id))
    payloads.append(chunk(finish_reason=_FINISH[answer.finish], completion_id=answer.response_id))
    payloads.append(chunk(usage_block=_usage(answer.usage), completion_id=answer.response_id))
    return sse(payloads)


def unfinished_events(answer: Answer) -> tuple[bytes, ...]:
    """The stream without what finishes it: no finish reason, no usage, no ``[DONE]``."""
    return answer_events(answer)[:-3]


def usage_reply(count: object, *, stream: bool) -> Reply:
    """A one-word answer whose usage reports ``count`` (any JSON value) in every count field."""
    block = {
        "prompt_tokens": count,
        "completion_tokens": count,
        "total_tokens": count,
        "prompt_tokens_details": {"cached_tokens": count, "cache_write_tokens": count},
    }
    if not stream:
        return json_reply(completion(text="ok", usage_block=block))
    finished = [chunk(content="ok"), chunk(finish_reason="stop"), chunk(usage_block=block)]
    return sse_reply(sse(finished))


def opening_events(answer: Answer) -> tuple[bytes, ...]:
    """The stream through its first text delta: the role chunk, then the first text chunk."""
    assert answer.deltas, "the answer has no text to open with"
    return answer_events(answer)[:2]


def reasoning_events(count: int) -> tuple[bytes, ...]:
    """``count`` chunks of reasoning, as compatible servers stream it before the answer."""
    base = {"id": "chatcmpl-stream-1", "object": "chat.completion.chunk", "created": CREATED}
    thinking = {"index": 0, "delta": {"reasoning_content": "Hmm. "}, "finish_reason": None}
    return sse([{**base, "model": MODEL, "choices": [thinking]}] * count, done=False)


def malformed_event() -> bytes:
    """A stream chunk whose data is not JSON."""
    return b'data: {"id": "chatcmpl-stream-1", "choices": [\n\n'


def stream_error(message: str) -> bytes:
    """An error reported inside a 200 stream, as OpenAI-compatible servers send it."""
    return sse([{"error": {"message": message, "type": "server_error"}}], done=False)[0]


def error_reply(status: int, message: str, *, headers: Mapping[str, str] | None = None) -> Reply:
    """An error status with OpenAI's envelope and the error type it uses for that status."""
    kind = _ERROR_KINDS.get(status, "invalid_request_error")
    return json_reply(error(message, kind=kind), status=status, headers=headers)


def overflow_reply() -> Reply:
    """OpenAI's answer to a prompt longer than the model's window."""
    body = error(
        "This model's maximum context length is 128000 tokens. However, your messages "
        "resulted in 130512 tokens. Please reduce the length of the messages.",
        code="context_length_exceeded",
        param="messages",
    )
    return json_reply(body, status=400)
