"""Helpers adapters share to normalize provider payloads."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from hostkit.errors import MAX_RETRY_AFTER_S
from hostkit.types import FinishReason, argument_problem, malformed_arguments, not_an_object

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
    """Parse a tool call's JSON arguments; what is no JSON object is ``MalformedArguments``.

    Malformed or truncated text (a model cut off at its output limit), JSON that
    is an array, string, number or null: the effect runtime refuses such a call
    as ``invalid``, with the reason kept here, before any tool, policy or
    approver sees it, instead of the provider layer guessing what the model
    meant. So do arguments a ``ToolCall`` refuses (``hostkit.types.argument_problem``):
    nested deeper than ``MAX_ARGUMENT_DEPTH`` (valid JSON, but no tool takes
    them, and freezing them would exhaust the stack), or holding a number JSON
    cannot carry (``1e999``, ``NaN``, ``Infinity``: Python reads them, but no
    strict encoder writes them back, so every later request would fail).
    A mapping (arguments an SDK parsed already) is held to the same rule.
    """
    if raw is None or raw == "":
        return {}
    if isinstance(raw, Mapping):
        problem = argument_problem(raw)
        return raw if problem is None else malformed_arguments(raw, problem)
    try:
        value = json.loads(raw)
    except RecursionError:
        return malformed_arguments(raw, "nest too deeply to be read")
    except json.JSONDecodeError as exc:
        return malformed_arguments(raw, _unreadable(exc))
    except ValueError:  # an integer past Python's int-to-text limit
        return malformed_arguments(raw, "hold a number too long to be read")
    if not isinstance(value, dict):
        return malformed_arguments(raw, not_an_object(value))
    problem = argument_problem(value)
    return value if problem is None else malformed_arguments(raw, problem)


def _unreadable(exc: json.JSONDecodeError) -> str:
    """Why text is no JSON (completing "the arguments ..."), saying where; cut-off text
    (a model that hit its output limit) is said to be cut off."""
    where = f"{exc.msg.removesuffix(' at')} at character {exc.pos}"
    if exc.doc.strip() and (exc.pos >= len(exc.doc.rstrip()) or exc.msg.startswith("Unterm")):
        return f"are cut off before their JSON ends ({where})"
    return f"are not valid JSON ({where})"


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
