"""What a tool call's arguments may hold: JSON data a strict encoder writes back unchanged.

Arguments arrive from a model as JSON text, are kept in the transcript and are
sent back to the provider on every later step of the conversation. Python's
``json`` reads numbers no strict encoder writes (``1e999`` becomes ``inf``;
``NaN`` and ``Infinity`` are read as such), and arguments built in Python may
hold anything: kept, such a value would fail the encoding of every later
request before it is sent. So ``ToolCall`` refuses them, and what arrives from
a model malformed is kept as ``{"_raw": text}``, which the effect runtime
rejects as one ``invalid`` call the model can read and correct.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_ARGUMENT_DEPTH", "MAX_RAW_ARGUMENT_CHARS", "argument_problem", "raw_arguments"]

# How deep a tool call's arguments may nest: far past any real schema, well short of the
# recursion a deeper structure would cost every layer that freezes, encodes or checks it.
MAX_ARGUMENT_DEPTH = 64
# Malformed arguments are kept as this much of their text: enough for the model to see its
# mistake, no more of a flood than that.
MAX_RAW_ARGUMENT_CHARS = 2000
# Python writes and reads integers of at most 4,300 digits (its int-to-text limit): a
# longer one built in Python would fail the encoding of every later request.
_MAX_INT_BITS = 13_000


def argument_problem(arguments: object) -> str | None:
    """Why ``arguments`` cannot be a tool call's (completing "tool-call arguments ..."), or None.

    They must be a mapping of JSON data: string keys; strings, booleans,
    integers, finite floats and None; lists, tuples and mappings of them,
    nested at most ``MAX_ARGUMENT_DEPTH`` levels. Iterative, so a structure
    thousands of levels deep is measured without recursion.
    """
    if not isinstance(arguments, Mapping):
        return f"must be a JSON object, not {type(arguments).__name__}"
    pending: list[tuple[Any, int]] = [(arguments, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, str) or item is None:
            continue
        if isinstance(item, int):  # bool is an int
            if item.bit_length() > _MAX_INT_BITS:
                return "hold an integer of more than 3,900 digits, which JSON readers refuse"
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return f"hold the number {item!r}, which JSON cannot carry"
            continue
        if isinstance(item, Mapping):
            if depth >= MAX_ARGUMENT_DEPTH:
                return f"nest deeper than {MAX_ARGUMENT_DEPTH} levels"
            for key, value in item.items():
                if not isinstance(key, str):
                    return f"have a key of type {type(key).__name__}; JSON keys are strings"
                pending.append((value, depth + 1))
        elif isinstance(item, list | tuple):
            if depth >= MAX_ARGUMENT_DEPTH:
                return f"nest deeper than {MAX_ARGUMENT_DEPTH} levels"
            pending.extend((value, depth + 1) for value in item)
        else:
            return f"hold a value of type {type(item).__name__}, which is not JSON"
    return None


def raw_arguments(value: object) -> dict[str, str]:
    """The ``{"_raw": text}`` form malformed arguments are kept in: their text, cut.

    A value that is not text is shown as the JSON Python would write for it
    (``Infinity`` stays readable), or as nothing when even that fails.
    """
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, default=str, ensure_ascii=False, skipkeys=True)
        except (ValueError, TypeError, RecursionError):
            text = ""
    return {"_raw": text[:MAX_RAW_ARGUMENT_CHARS]}
