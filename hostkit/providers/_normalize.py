"""Helpers adapters share to normalize provider payloads."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hostkit.freeze import nested_deeper_than
from hostkit.types import MAX_ARGUMENT_DEPTH, FinishReason

__all__ = ["parse_tool_arguments", "retry_after_seconds", "to_finish_reason"]

_FINISH: Mapping[str, FinishReason] = {
    "stop": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "tool_use": "tool_calls",
    "length": "length",
    "max_tokens": "length",
    "content_filter": "content_filter",
    "refusal": "content_filter",
}


def to_finish_reason(value: str | None) -> FinishReason:
    """Map a provider's finish/stop reason to the normalized vocabulary."""
    return _FINISH.get(value or "", "other")


def parse_tool_arguments(raw: str | Mapping[str, Any] | None) -> Mapping[str, Any]:
    """Parse a tool call's JSON arguments; malformed input becomes ``{"_raw": text}``.

    The effect runtime then rejects the call as ``invalid`` against the tool's
    schema instead of the provider layer guessing what the model meant. So do
    arguments nested deeper than ``MAX_ARGUMENT_DEPTH`` (valid JSON, but no
    tool takes them, and freezing them would exhaust the stack).
    """
    if raw is None or raw == "":
        return {}
    if isinstance(raw, Mapping):
        return raw
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return {"_raw": raw[:2000]}
    if not isinstance(value, dict) or nested_deeper_than(value, MAX_ARGUMENT_DEPTH):
        return {"_raw": raw[:2000]}
    return value


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms`` first, then ``retry-after``."""
    millis = _seconds(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    return _seconds(headers.get("retry-after"))


def _seconds(value: str | None) -> float | None:
    """A non-negative number from a header value; HTTP dates are not honoured."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
