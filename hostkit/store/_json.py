"""The JSON text the store writes: compact, keys sorted, from one reused encoder."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["canonical_json"]

_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def canonical_json(value: Any) -> str:
    """``json.dumps(value, sort_keys=True, separators=(",", ":"))``, the same text.

    ``json.dumps`` with any option builds a new encoder per call, which costs
    more than encoding a small row; every stored JSON column goes through here.
    """
    return _CANONICAL.encode(value)
