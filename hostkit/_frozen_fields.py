"""Immutable container fields for frozen pydantic models (the parsed configuration).

``frozen=True`` only stops a field being reassigned: a ``list`` or ``dict`` it
holds can still be edited in place by anyone holding the model, and every
other holder sees the edit. ``FrozenList[X]`` is a ``tuple`` and
``FrozenTable[K, V]`` a ``FrozenMap`` once validated. Both are validated as
the ``list`` and ``dict`` they are written as (a TOML array, a table), so the
accepted input, the error types and their messages (``Input should be a valid
list``, ``List should have at most ...``) stay those of a list and a dict;
both serialise (``model_dump``, JSON) as plain lists and dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import GenericAlias
from typing import Annotated, Any, TypeVar, get_args

from pydantic import GetCoreSchemaHandler, GetPydanticSchema
from pydantic_core import core_schema

from hostkit.freeze import FrozenMap, thaw

__all__ = ["AS_FROZEN_LIST", "FrozenList", "FrozenTable"]

_T = TypeVar("_T")
_K = TypeVar("_K")
_V = TypeVar("_V")


def _as_list(source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
    """``tuple[X, ...]`` validated as ``list[X]``, then made a tuple; dumped as a list again."""
    (item, *_) = get_args(source)
    items = handler(GenericAlias(list, (item,)))
    return core_schema.no_info_after_validator_function(
        tuple,
        items,
        serialization=core_schema.wrap_serializer_function_ser_schema(
            lambda frozen, dump: dump(list(frozen)), schema=items
        ),
    )


def _as_table(source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
    """``Mapping[K, V]`` validated as ``dict[K, V]``, then frozen; dumped as a dict again."""
    key, value = get_args(source)
    table = handler(GenericAlias(dict, (key, value)))
    return core_schema.no_info_after_validator_function(
        FrozenMap,
        table,
        # thaw: a FrozenMap (nested ones too, in an Any value) is no type pydantic serialises.
        serialization=core_schema.wrap_serializer_function_ser_schema(
            lambda frozen, dump: dump(thaw(frozen)), schema=table
        ),
    )


# As Annotated metadata, the one way to bound an optional list: a Field's max_length placed
# before it is checked as a list's ("List should have at most ..."), one placed after it (or
# on ``FrozenList[X] | None``) as a bare value's ("Value should have ...").
AS_FROZEN_LIST = GetPydanticSchema(_as_list)
FrozenList = Annotated[tuple[_T, ...], AS_FROZEN_LIST]
FrozenTable = Annotated[Mapping[_K, _V], GetPydanticSchema(_as_table)]
