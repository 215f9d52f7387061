"""Payloads shaped like the messages API's real answers and event streams.

Field sets follow captured Anthropic responses, including fields hostkit
ignores (``stop_sequence``, ``service_tier``), and streams interleave ``ping``
events the way the API does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "MODEL",
    "error",
    "event",
    "message",
    "sse",
    "text_block",
    "tool_use_block",
    "usage",
]

MODEL = "claude-sonnet-4-5-20250929"


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
