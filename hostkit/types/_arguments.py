"""What a tool call's arguments may hold: JSON data a strict encoder writes back unchanged.

Arguments arrive from a model as JSON text, are kept in the transcript and are
sent back to the provider on every later step of the conversation. Python's
``json`` reads numbers no strict encoder writes (``1e999`` becomes ``inf``;
``NaN`` and ``Infinity`` are read as such), and arguments built in Python may
hold anything: kept, such a value would fail the encoding of every later
request before it is sent. So ``ToolCall`` refuses them, and what arrives from
a model malformed is kept as ``MalformedArguments``: a fact about the call, which
the effect runtime refuses as one ``invalid`` call the model can read and
correct before any tool, policy or approver sees it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from hostkit.freeze import FrozenMap

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "MAX_MALFORMED_REASON_CHARS",
    "MAX_RAW_ARGUMENT_CHARS",
    "RAW_ARGUMENTS_KEY",
    "MalformedArguments",
    "OversizedArguments",
    "argument_problem",
    "malformed_arguments",
    "not_an_object",
]

# How deep a tool call's arguments may nest: far past any real schema, well short of the
# recursion a deeper structure would cost every layer that freezes, encodes or checks it.
MAX_ARGUMENT_DEPTH = 64
# Malformed arguments are kept as this much of their text: enough for the model to see its
# mistake, no more of a flood than that.
MAX_RAW_ARGUMENT_CHARS = 2000
# Why they are malformed, as the model is told: a JSON parser's message or a path, bounded.
MAX_MALFORMED_REASON_CHARS = 240
# The one key malformed arguments show as a mapping: the form the transcript keeps them in and
# every adapter sends them back to the model in (some servers parse a call's argument text).
RAW_ARGUMENTS_KEY = "_raw"
# Python writes and reads integers of at most 4,300 digits (its int-to-text limit): a
# longer one built in Python would fail the encoding of every later request.
_MAX_INT_BITS = 13_000
_SURROGATE = re.compile("[\ud800-\udfff]")


def argument_problem(arguments: object) -> str | None:
    """Why ``arguments`` cannot be a tool call's (completing "tool-call arguments ..."), or None.

    They must be a mapping of JSON data: string keys; strings, booleans,
    integers, finite floats and None; lists, tuples and mappings of them,
    nested at most ``MAX_ARGUMENT_DEPTH`` levels. The answer names where the
    first problem is (``at nested[0].at``). Iterative, so a structure
    thousands of levels deep is measured without recursion.
    """
    if not isinstance(arguments, Mapping):
        return f"must be a JSON object, not {type(arguments).__name__}"
    # Each item with its depth and where it is: (the parent's place, its key or index).
    pending: list[tuple[Any, int, _Place]] = [(arguments, 0, None)]
    while pending:
        item, depth, place = pending.pop()
        problem = _leaf_problem(item)
        if problem is None and isinstance(item, Mapping | list | tuple):
            if depth >= MAX_ARGUMENT_DEPTH:
                problem = f"nest deeper than {MAX_ARGUMENT_DEPTH} levels"
            elif isinstance(item, Mapping):
                for key, value in item.items():
                    if not isinstance(key, str):
                        problem = f"have a key of type {type(key).__name__}; JSON keys are strings"
                    else:
                        problem = _leaf_problem(key)
                    if problem is not None:
                        break
                    pending.append((value, depth + 1, (place, key)))
            else:
                pending.extend((value, depth + 1, (place, i)) for i, value in enumerate(item))
        if problem is not None:
            where = _spelled(place)
            return f"{problem} (at {where})" if where else problem
    return None


_Place = tuple["_Place", str | int] | None


def _leaf_problem(item: object) -> str | None:
    """Why ``item`` is no JSON value, for anything but a container; None when it is one."""
    if isinstance(item, str):
        # A lone surrogate ("\\ud800" in JSON text) has no UTF-8: no request or row carries it.
        if item.isascii() or not _SURROGATE.search(item):
            return None
        return "hold a lone surrogate, which no text encoding carries"
    if isinstance(item, Mapping | list | tuple) or item is None:
        return None
    if isinstance(item, int):  # bool is an int
        if item.bit_length() > _MAX_INT_BITS:
            return "hold an integer of more than 3,900 digits, which JSON readers refuse"
        return None
    if isinstance(item, float):
        return None if math.isfinite(item) else f"hold the number {item!r}, which JSON cannot carry"
    return f"hold a value of type {type(item).__name__}, which is not JSON"


def _spelled(place: _Place) -> str:
    """``place`` as a path: ``nested[0].at``; bounded, however deep or long its keys."""
    parts: list[str] = []
    while place is not None:
        place, key = place
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key[:40]}")
    path = "".join(reversed(parts)).removeprefix(".")
    return path if len(path) <= 200 else "…" + path[-199:]


class MalformedArguments(FrozenMap):
    """Arguments a model sent that are no JSON object: a fact about the call, never arguments.

    Truncated JSON (a model cut off at its output limit), a JSON array, string,
    number or null, numbers JSON cannot carry, nesting past ``MAX_ARGUMENT_DEPTH``.
    The type is the fact: the effect runtime refuses the call as ``invalid``
    before validation, policy or approval, so no tool (an MCP tool whose schema
    takes any property) runs on defaults and no approver reads the text as the
    call. As a mapping it reads ``{"_raw": text}`` (``text``: the first
    ``MAX_RAW_ARGUMENT_CHARS`` characters, lone surrogates spelled ``\\ud800``),
    the form the transcript keeps and every adapter sends back to the model;
    ``reason`` completes "the arguments ..." for the model. It equals only
    another ``MalformedArguments``, never a well-formed ``{"_raw": ...}``.
    """

    __slots__ = ("reason",)

    reason: str

    def __init__(self, text: str, reason: str) -> None:
        super().__init__({RAW_ARGUMENTS_KEY: _kept(str(text), MAX_RAW_ARGUMENT_CHARS)})
        object.__setattr__(self, "reason", _kept(str(reason), MAX_MALFORMED_REASON_CHARS))

    @property
    def text(self) -> str:
        """The text the model sent (cut), as it is sent back to the model."""
        return str(self[RAW_ARGUMENTS_KEY])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MalformedArguments):
            return (self.text, self.reason) == (other.text, other.reason)
        return False if isinstance(other, Mapping) else NotImplemented

    def __hash__(self) -> int:
        return hash((MalformedArguments, self.text, self.reason))

    def __repr__(self) -> str:
        return f"MalformedArguments(text={self.text!r}, reason={self.reason!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (MalformedArguments, (self.text, self.reason))


class OversizedArguments(MalformedArguments):
    """Arguments too large for the context window to keep: the call is refused, never run.

    A step's calls are sent back to the model with every later step of the
    turn, never cut; arguments the window cannot hold beside the turn's other
    messages would fail the turn's next step after the tool ran. The
    ContextManager keeps such a call as this bounded marker instead (``text``:
    the beginning of the arguments' JSON; ``reason``: their size and what
    fits), which the effect runtime refuses as ``invalid`` like any
    ``MalformedArguments``, telling the model to send less. The transcript
    keeps it as malformed arguments (it is only replayed, never run again).
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"OversizedArguments(text={self.text!r}, reason={self.reason!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (OversizedArguments, (self.text, self.reason))


def malformed_arguments(value: object, reason: str) -> MalformedArguments:
    """``value`` as ``MalformedArguments``: text as it is, anything else as the JSON Python
    would write for it (``Infinity`` stays readable), or as nothing when even that fails."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, default=str, ensure_ascii=False, skipkeys=True)
        except (ValueError, TypeError, RecursionError):
            text = ""
    return MalformedArguments(text, reason)


def not_an_object(value: object) -> str:
    """Why ``value`` (parsed JSON that is no object) is no tool call's arguments."""
    if isinstance(value, bool):
        kind = "a JSON boolean"
    elif isinstance(value, int | float):
        kind = "a JSON number"
    elif isinstance(value, str):
        kind = "a JSON string"
    elif isinstance(value, list | tuple):
        kind = "a JSON array"
    elif value is None:
        kind = "JSON null"
    else:
        kind = f"a {type(value).__name__}"
    return f"are {kind}, not an object"


def _kept(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, a lone surrogate spelled out (``\\ud800``):
    the form itself must be valid arguments."""
    return text[:limit].encode("utf-8", "backslashreplace").decode("utf-8")
