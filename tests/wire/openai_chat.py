"""Payloads shaped like the chat completions API's (and its compatible servers') real answers.

Field sets follow captured OpenAI responses, including the fields hostkit
ignores (``system_fingerprint``, ``logprobs``, ``refusal``), so the SDK parses
exactly what it would parse in production.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "MODEL",
    "chunk",
    "completion",
    "error",
    "sse",
    "tool_call",
    "tool_call_delta",
    "usage",
]

MODEL = "gpt-4o-2024-08-06"
CREATED = 1_741_569_952


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
