"""Helpers adapters share to normalize provider payloads."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from hostkit.errors import MAX_RETRY_AFTER_S
from hostkit.types import FinishReason, argument_problem, raw_arguments

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
    arguments a ``ToolCall`` refuses (``hostkit.types.argument_problem``):
    nested deeper than ``MAX_ARGUMENT_DEPTH`` (valid JSON, but no tool takes
    them, and freezing them would exhaust the stack), or holding a number JSON
    cannot carry (``1e999``, ``NaN``, ``Infinity``: Python reads them, but no
    strict encoder writes them back, so every later request would fail).
    A mapping (arguments an SDK parsed already) is held to the same rule.
    """
    if raw is None or raw == "":
        return {}
    if isinstance(raw, Mapping):
        return raw if argument_problem(raw) is None else raw_arguments(raw)
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return raw_arguments(raw)
    if not isinstance(value, dict) or argument_problem(value) is not None:
        return raw_arguments(raw)
    return value


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms`` first, then ``retry-after``.

    At most ``MAX_RETRY_AFTER_S`` (what a ``RetryPolicy`` may honour at most);
    a value that is no finite non-negative number is no request at all.
    """
    millis = _number(headers.get("retry-after-ms"))
    seconds = millis / 1000 if millis is not None else _number(headers.get("retry-after"))
    return None if seconds is None else min(seconds, MAX_RETRY_AFTER_S)


def _number(value: str | None) -> float | None:
    """A finite non-negative number from a header value; HTTP dates are not honoured.

    ``inf`` (``1e400``) and ``nan`` are no delay: a caller that slept for one would never wake.
    """
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None
