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
import re
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
    # A lone surrogate is spelled out (``\\ud800``): the form itself must be valid arguments.
    text = text[:MAX_RAW_ARGUMENT_CHARS].encode("utf-8", "backslashreplace").decode("utf-8")
    return {"_raw": text}
