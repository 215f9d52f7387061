"""The JSON text the store writes: compact, keys sorted, from one reused encoder."""

from __future__ import annotations

import json
from collections.abc import Callable
from json import encoder as _encoder
from typing import Any

__all__ = ["canonical_json"]

_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
# ``JSONEncoder.encode`` builds a new C encoder (inside two Python frames) per call, which
# costs more than encoding a small row: the same C encoder, with the same settings, built
# once. Without a markers dict it keeps no state between calls, so any thread may use it;
# a cyclic value (no stored value is one) fails with RecursionError, not ValueError.
# None where Python has no C encoder (typeshed does not declare it: looked up by name).
_make_encoder: Callable[..., Callable[[Any, int], list[str]]] | None = getattr(
    _encoder, "c_make_encoder", None
)
_C_ENCODE = (
    None
    if _make_encoder is None
    else _make_encoder(
        None,
        _CANONICAL.default,
        _encoder.encode_basestring_ascii,
        _CANONICAL.indent,
        _CANONICAL.key_separator,
        _CANONICAL.item_separator,
        _CANONICAL.sort_keys,
        _CANONICAL.skipkeys,
        _CANONICAL.allow_nan,
    )
)


def canonical_json(value: Any) -> str:
    """``json.dumps(value, sort_keys=True, separators=(",", ":"))``, the same text.

    ``json.dumps`` with any option builds a new encoder per call, which costs
    more than encoding a small row; every stored JSON column goes through here.
    """
    if _C_ENCODE is None:
        return _CANONICAL.encode(value)
    return "".join(_C_ENCODE(value, 0))
