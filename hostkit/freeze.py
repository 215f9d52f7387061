"""Deep immutability for contract values.

A frozen dataclass that holds a ``dict`` is not immutable: anyone holding the
value can change what every other holder sees. ``freeze`` converts nested
mappings, sequences and sets into ``FrozenMap``, ``tuple`` and ``frozenset``
on construction, and refuses objects whose mutability it cannot vouch for.
Frozen dataclasses, and classes that declare ``DEEPLY_FROZEN`` (the parsed
configuration's models, whose containers are tuples and ``FrozenMap``), are
trusted as they are.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping, Set
from typing import Any, NoReturn

__all__ = ["DEEPLY_FROZEN", "FrozenMap", "freeze", "thaw"]

# The class attribute (True) by which a class says its instances are immutable all the way
# down, so ``freeze`` keeps them as they are: only for classes whose every field is.
DEEPLY_FROZEN = "__hostkit_deeply_frozen__"

_SCALARS = (str, int, float, bool, bytes, type(None), enum.Enum)
# Exactly these types (not subclasses): immutable, and never a container.
_PLAIN_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})


class FrozenMap(Mapping[str, Any]):
    """An immutable, hashable mapping whose values are themselves frozen."""

    __slots__ = ("_data", "_hash")

    _data: dict[Any, Any]
    _hash: int | None

    def __init__(self, data: Mapping[Any, Any] | None = None) -> None:
        if type(data) is FrozenMap:
            # Already frozen all the way down, and its dict is never changed: share it.
            object.__setattr__(self, "_data", data._data)
            object.__setattr__(self, "_hash", data._hash)
            return
        # Inline for the common case (a str key, a plain scalar value): two calls fewer
        # per entry; anything else goes through ``_freeze_key`` and ``freeze`` as before.
        plain = _PLAIN_SCALARS
        frozen = {
            (k if type(k) is str else _freeze_key(k)): (v if type(v) in plain else freeze(v))
            for k, v in (data or {}).items()
        }
        object.__setattr__(self, "_data", frozen)
        object.__setattr__(self, "_hash", None)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        cached = self._hash
        if cached is None:
            cached = hash(frozenset(self._data.items()))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._data) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError("FrozenMap is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("FrozenMap is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenMap, (dict(self._data),))


def _freeze_key(key: Any) -> Any:
    if not isinstance(key, _SCALARS):
        raise TypeError(f"mapping keys must be scalars, not {type(key).__name__}")
    return key


def freeze(value: Any) -> Any:
    """Return a deeply immutable equivalent of ``value``.

    Mappings become ``FrozenMap``, lists and tuples become tuples, sets become
    frozensets, ``bytearray`` becomes ``bytes``. Frozen dataclasses and classes
    that declare ``DEEPLY_FROZEN`` are trusted to have frozen themselves. Anything else raises
    ``TypeError``: an unknown object may be mutable, and a contract value must
    not carry one.
    """
    kind = type(value)
    # The exact common types first: the ABC checks below cost several times more.
    if kind in _PLAIN_SCALARS or kind is FrozenMap:
        return value
    if kind is dict:
        return FrozenMap(value)
    if kind is list or kind is tuple:
        return tuple(freeze(item) for item in value)
    if isinstance(value, (FrozenMap, *_SCALARS)):
        return value
    if isinstance(value, Mapping):
        return FrozenMap(value)
    if isinstance(value, list | tuple):
        return tuple(freeze(item) for item in value)
    if isinstance(value, Set):
        return frozenset(freeze(item) for item in value)
    if isinstance(value, bytearray):
        return bytes(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        params = getattr(type(value), "__dataclass_params__", None)
        if params is not None and params.frozen:
            return value
    # A model that says it is immutable all the way down (the parsed configuration's, whose
    # containers are tuples and FrozenMap): pydantic's ``frozen`` alone stops reassignment,
    # not an edit of a list it holds.
    if getattr(kind, DEEPLY_FROZEN, False) is True:
        return value
    raise TypeError(f"cannot freeze a value of type {type(value).__name__}")


def thaw(value: Any) -> Any:
    """Return a JSON-ready copy of a frozen value (mappings to dicts, sequences to lists)."""
    kind = type(value)
    if kind in _PLAIN_SCALARS:
        return value
    if kind is FrozenMap or kind is dict:  # exact types: no ABC check, no Mapping view
        data = value._data if kind is FrozenMap else value
        plain = _PLAIN_SCALARS
        return {k: (v if type(v) in plain else thaw(v)) for k, v in data.items()}
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(item) for item in value]
    if isinstance(value, frozenset | set):
        return sorted((thaw(item) for item in value), key=repr)
    return value
