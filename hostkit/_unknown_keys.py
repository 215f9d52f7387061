"""An unknown key in a hand-written file, said in the file's words with a "did you mean".

Pydantic reports a key no model declares as ``extra_forbidden``, "Extra inputs
are not permitted": jargon, and in the usual ``key: message`` form a key named
``api_key`` or ``token`` reads as a secret assignment that ``bounded()``
masks, so the one word the reader needs became ``[redacted]``. This module
turns such an error into one sentence that names the key, where it is, and
the closest declared key (``difflib``) or the table where a key of that name
belongs, for both ``hostkit.toml`` and a core's ``agent.yaml``.

The sentence quotes the key's name, never its value: pydantic's ``input``
(perhaps a real credential) is not read. The name itself still goes through
``bounded()`` with the rest of the message, so a name that *is* a credential
(``"sk-..." = 1``) stays masked.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

__all__ = ["EXTRA_FORBIDDEN", "reported_error", "unknown_key"]

# pydantic's error type for a key the model does not declare (extra="forbid").
EXTRA_FORBIDDEN = "extra_forbidden"
# Characters of a key's name quoted back: a name is a word, not a document.
_NAME_CHARS = 80
# How alike a declared key must be to be offered (difflib's ratio; 0.6 is its default).
_CLOSENESS = 0.6
# A key unknown where it is written but declared elsewhere: the tables searched (levels
# below the root) and the most offered.
_HOME_DEPTH = 3
_HOMES = 3


def reported_error(exc: ValidationError) -> ErrorDetails:
    """The one error of ``exc`` to tell the reader: an unknown key first.

    A misspelled required key is two errors: the key is unknown, and the one
    meant is missing. "Field required" alone sends the reader looking for a
    key they did write; the unknown key, with its "did you mean", says what
    to fix.
    """
    errors = exc.errors()
    return next((e for e in errors if e["type"] == EXTRA_FORBIDDEN), errors[0])


def unknown_key(
    root: type[BaseModel], loc: Sequence[str | int], *, style: Literal["toml", "yaml"]
) -> str:
    """The sentence for ``extra_forbidden`` at ``loc`` of ``root``; no value is quoted.

    ``style="toml"``: "unknown key 'api_key' in [providers.local]; did you
    mean 'api_key_env'?" ("at the top level" for a root key); ``"yaml"``:
    "unknown key 'bogus' under limits" (nothing more at the root). With no
    declared key close at that place, a key declared in another table says
    where it belongs ("unknown key 'database' at the top level; it belongs in
    [host]"); with neither, there is no hint.
    """
    *parents, last = loc or ("",)
    name = _quoted(str(last))
    where = _place(parents, style)
    candidates = _declared(_model_at(root, parents))
    close = difflib.get_close_matches(str(last), candidates, n=1, cutoff=_CLOSENESS)
    if close:
        return f"unknown key {name}{where}; did you mean {_quoted(close[0])}?"
    homes = [
        _place(path, style).removeprefix(" in ").removeprefix(" under ")
        for path in _homes(root, str(last))
        if path != list(parents)
    ]
    hint = (
        f"; it belongs {'in' if style == 'toml' else 'under'} {' or '.join(homes)}" if homes else ""
    )
    return f"unknown key {name}{where}{hint}"


def _homes(root: type[BaseModel], key: str) -> list[list[str | int]]:
    """The tables of ``root`` (``_HOME_DEPTH`` levels deep) that declare ``key``: where a
    key written in the wrong table belongs. ``<name>`` stands for a table of tables' key."""
    found: list[list[str | int]] = []

    def walk(model: type[BaseModel], path: list[str | int]) -> None:
        if path and key in _declared(model):
            found.append(path)
        if len(path) >= _HOME_DEPTH:
            return
        for name, field in model.model_fields.items():
            if field.exclude:
                continue
            shape = _unwrapped(field.annotation)
            if _is_model(shape):
                walk(shape, [*path, name])
                continue
            arguments = typing.get_args(shape)
            if typing.get_origin(shape) in (dict, Mapping) and len(arguments) == 2:
                inner = _unwrapped(arguments[1])
                if _is_model(inner):
                    walk(inner, [*path, name, "<name>"])

    walk(root, [])
    return found[:_HOMES]


def _place(parents: Sequence[str | int], style: Literal["toml", "yaml"]) -> str:
    path = "".join(
        f"[{part}]" if isinstance(part, int) else f".{part}" if index else str(part)
        for index, part in enumerate(parents)
    )
    if not path:
        return " at the top level" if style == "toml" else ""
    if style == "yaml":
        return f" under {path}"
    # A table header is [a.b]; a key inside an array of tables has no header of its own.
    return f" in {path}" if any(isinstance(part, int) for part in parents) else f" in [{path}]"


def _quoted(name: str) -> str:
    return repr(name[:_NAME_CHARS] + ("…" if len(name) > _NAME_CHARS else ""))


def _model_at(root: type[BaseModel], parents: Sequence[str | int]) -> type[BaseModel] | None:
    """The model whose table ``parents`` names, following fields, dict values and items."""
    current: Any = root
    for part in parents:
        current = _step(_unwrapped(current), part)
        if current is None:
            return None
    current = _unwrapped(current)
    return current if _is_model(current) else None


def _step(annotation: Any, part: str | int) -> Any:
    if _is_model(annotation):
        for name, field in annotation.model_fields.items():
            if part in (name, field.alias, field.validation_alias):
                return field.annotation
        return None
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin in (dict, Mapping) and len(arguments) == 2:
        return arguments[1]  # a table of tables: [providers.<name>]
    if origin in (list, tuple, Sequence) and arguments:
        return arguments[0]
    return None


def _unwrapped(annotation: Any) -> Any:
    """``annotation`` without ``Annotated`` and ``| None``: the one shape a table can have."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            shapes = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
            if len(shapes) != 1:
                return None  # several models could hold the key: no single hint
            annotation = shapes[0]
        else:
            return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _declared(model: type[BaseModel] | None) -> list[str]:
    """The keys ``model`` accepts in a file: its fields' names and aliases (not excluded ones)."""
    if model is None:
        return []
    names: list[str] = []
    for name, field in model.model_fields.items():
        if field.exclude:
            continue  # set by the loader (base_dir, source), never written in the file
        names.append(name)
        names.extend(
            alias for alias in (field.alias, field.validation_alias) if isinstance(alias, str)
        )
    return list(dict.fromkeys(names))
