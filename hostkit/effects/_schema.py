"""Tools defined by a JSON schema rather than a Python signature (authored modules, MCP).

The definition comes from somewhere the Host does not run in-process before
approval (a discovery child, an MCP server), so arguments are validated
against the discovered schema with jsonschema. Every ``pattern`` runs on
pydantic-core's Rust regex engine: Python's ``re`` would let a schema's
``^(a+)+$`` and a model's argument stall the event loop before any approver
is asked. jsonschema is imported on first use.

A schema's references are its own business, never the network's: every
validator resolves against an empty ``referencing.Registry`` (nothing is
retrieved), and ``schema_problem`` accepts only same-document JSON-pointer
references (``#`` or ``#/...``). Validation work is then bounded before the
tool is offered: the schema, with every reference expanded in place, may not
be recursive, hold more than ``MAX_SCHEMA_NODES`` subschemas or nest deeper
than ``MAX_SCHEMA_DEPTH`` (``anyOf: [$ref next, $ref next]`` chained twenty
times is a kilobyte that would take a minute to validate).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from hostkit.effects._authored import (
    MAX_DESCRIPTION_CHARS,
    AuthoredTool,
    ToolContext,
    is_effect_name,
    is_timeout,
)
from hostkit.errors import InvalidValue, bounded
from hostkit.freeze import FrozenMap, thaw

if TYPE_CHECKING:
    import jsonschema

__all__ = [
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_NODES",
    "SchemaTool",
    "schema_problem",
    "schema_refusal",
]

# Validation visits each subschema of the expanded schema at most once per
# argument value (jsonschema: a few microseconds each), so 10,000 keeps one
# call's check to milliseconds for real arguments; pydantic and MCP servers'
# schemas expand to tens or hundreds.
MAX_SCHEMA_NODES = 2_000
# Both the schema as JSON and any path through its expanded references: deep
# enough for any real model, shallow enough for jsonschema's recursive checks.
MAX_SCHEMA_DEPTH = 64

# Draft 2020-12's subschema keywords, by shape (every one jsonschema applies).
_ONE = (
    "additionalProperties",
    "contains",
    "contentSchema",
    "else",
    "if",
    "items",
    "not",
    "propertyNames",
    "then",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_MANY = ("allOf", "anyOf", "oneOf", "prefixItems")
_NAMED = ("dependentSchemas", "patternProperties", "properties")
# Where subschemas wait to be referenced; not applied by themselves.
_STORED = ("$defs", "definitions")
_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")


class SchemaTool(AuthoredTool):
    """An effect whose name, description and parameters were discovered, not derived.

    ``call`` receives the ToolContext and the validated arguments (plain JSON
    values). Build one only from a schema ``schema_problem`` accepted.
    """

    def __init__(
        self,
        name: str,
        call: Callable[..., Coroutine[Any, Any, Any]],
        *,
        description: str,
        parameters: Mapping[str, Any],
        timeout_s: float,
        approval_warning: str | None = None,
        secrets_argument: str | None = None,
    ) -> None:
        # No AuthoredTool.__init__: there is no Python signature to derive a model from,
        # so the checks it makes of a name and a timeout are made here.
        if not is_effect_name(name):
            raise InvalidValue("a tool name is dotted lower_snake_case of at most 64 characters")
        if not is_timeout(timeout_s):
            raise InvalidValue("a tool timeout is a number of seconds in (0, 86400]")
        self.name = name
        self.fn = call
        self.description = description[:MAX_DESCRIPTION_CHARS]
        self.timeout_s = timeout_s
        self.preflight = None
        self.prepare = None
        self.preview_diff = None
        self.secrets_argument = secrets_argument
        self.approval_warning = approval_warning
        self.parameters = FrozenMap(thaw(parameters))
        schema = thaw(parameters)
        # Linear and import-free, so also here: a schema that reached this class
        # without schema_problem is refused per call, never expanded.
        self._refusal = _structure_problem(schema)
        self._validator = _validator(schema)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        if self._refusal is not None:
            raise InvalidValue(f"invalid arguments for {self.name}: {self._refusal}")
        plain = json.loads(json.dumps(thaw(arguments), default=_unserializable))
        if not isinstance(plain, dict):
            raise InvalidValue(f"invalid arguments for {self.name}: arguments: must be an object")
        try:
            errors = sorted(
                self._validator.iter_errors(plain),
                key=lambda e: [str(part) for part in e.absolute_path],
            )
        except Exception as exc:
            # An unresolvable reference, a malformed keyword, a recursion: the
            # schema's fault, reported as this call's, never the turn's.
            raise InvalidValue(
                f"invalid arguments for {self.name}: its parameter schema could not be "
                f"applied ({type(exc).__name__})"
            ) from None
        if errors:
            problems = "; ".join(_problem(error) for error in errors[:5])
            raise InvalidValue(f"invalid arguments for {self.name}: {problems}")
        return plain

    async def invoke(self, context: ToolContext, arguments: Mapping[str, Any]) -> Any:
        return await self.fn(context, **arguments)


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` cannot define a tool's parameters (blocking: a worker thread), or None.

    It must be a valid draft 2020-12 object schema whose references stay in
    the document and expand to bounded work (``_structure_problem``), and
    whose regexes the linear-time engine compiles (no look-around, no
    back-references).
    """
    import jsonschema

    schema = thaw(schema)  # a discovered schema may arrive frozen (FrozenMap, tuples)
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return "its parameter schema is not a JSON object schema"
    # Before check_schema: its own recursion must not meet an unbounded nesting.
    problem = _structure_problem(schema)
    if problem is not None:
        return problem
    try:
        _validator_class().check_schema(schema)
    except jsonschema.SchemaError:
        return "its parameter schema is invalid"
    for regex in _patterns(schema):
        try:
            _regex(regex)
        except ValueError as exc:
            return (
                f"pattern {bounded(regex, 60)!r} is not supported ({bounded(exc, 80)}); "
                "use one without look-around or back-references"
            )
    return None


def schema_refusal(problem: str, role: str) -> str:
    """``schema_problem``'s reason said of an MCP tool's ``role`` ("input", "output") schema."""
    reason = problem.replace("parameter schema", f"{role} schema")
    return reason if reason.startswith(f"its {role} schema") else f"its {role} schema's {reason}"


def _structure_problem(schema: Any) -> str | None:
    """Why ``schema``'s shape or references are unsafe to validate with, or None.

    Linear in the schema's size. Refused: nesting deeper than
    ``MAX_SCHEMA_DEPTH``; a reference that is not a same-document JSON pointer
    (``#``, ``#/...``) to a subschema; ``$id`` or ``$schema`` below the root
    (they would move the base a ``#`` reference resolves against, or the
    dialect it is read in); a recursive reference; an expansion over
    ``MAX_SCHEMA_NODES`` subschemas or ``MAX_SCHEMA_DEPTH`` levels. A root
    ``$id`` or ``$schema`` is harmless and ignored: nothing is retrieved, every
    accepted reference resolves against the root, and the dialect is 2020-12.
    """
    if _json_depth(schema) > MAX_SCHEMA_DEPTH:
        return f"its parameter schema is nested more than {MAX_SCHEMA_DEPTH} levels deep"
    try:
        for node in _subschemas(schema):
            _check_node(node, schema)
        _, depth = _expanded(schema, schema, {}, set(), 0)
    except _Refused as refused:
        return str(refused)
    if depth > MAX_SCHEMA_DEPTH:
        return f"its parameter schema's references nest more than {MAX_SCHEMA_DEPTH} levels deep"
    return None


class _Refused(Exception):
    """A bounded reason ``_structure_problem`` gives."""


def _json_depth(value: Any) -> int:
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            if depth > MAX_SCHEMA_DEPTH:
                break
            items = node.values() if isinstance(node, dict) else node
            stack.extend((item, depth + 1) for item in items)
    return deepest


def _applied(node: Any) -> list[Any]:
    """The subschemas jsonschema applies with ``node`` (references aside)."""
    if not isinstance(node, dict):
        return []
    found: list[Any] = []
    for keyword in _ONE:
        if keyword in node:
            found.append(node[keyword])
    for keyword in _MANY:
        if isinstance(node.get(keyword), list):
            found.extend(node[keyword])
    for keyword in _NAMED:
        if isinstance(node.get(keyword), dict):
            found.extend(node[keyword].values())
    return found


def _subschemas(schema: Any) -> list[dict[str, Any]]:
    """``schema`` and every subschema in it, referenced or not."""
    found: list[dict[str, Any]] = [schema] if isinstance(schema, dict) else []
    stack = [schema]
    while stack:
        node = stack.pop()
        children = _applied(node)
        if isinstance(node, dict):
            for keyword in _STORED:
                if isinstance(node.get(keyword), dict):
                    children.extend(node[keyword].values())
        found.extend(child for child in children if isinstance(child, dict))
        stack.extend(children)
    return found


def _check_node(node: dict[str, Any], root: dict[str, Any]) -> None:
    """Refuse ``node``'s references and, below the root, its ``$id``/``$schema``."""
    for keyword in ("$id", "$schema"):
        if keyword in node and node is not root:
            raise _Refused(f"its parameter schema has {keyword} below the root")
    for keyword in _REFERENCES:
        if keyword in node:
            _target(node[keyword], root)


def _target(reference: Any, root: dict[str, Any]) -> Any:
    """The subschema a same-document JSON-pointer ``reference`` names, as referencing finds it."""
    shown = bounded(reference, 60)
    if not isinstance(reference, str) or not (reference == "#" or reference.startswith("#/")):
        raise _Refused(
            f"its parameter schema refers to {shown!r}: only references within "
            "the schema (#/...) are supported"
        )
    node: Any = root
    if reference != "#":
        for segment in unquote(reference[2:]).split("/"):
            if isinstance(node, dict):
                key = segment.replace("~1", "/").replace("~0", "~")
                if key not in node:
                    node = None
                    break
                node = node[key]
            elif (
                isinstance(node, list)
                and segment.isascii()
                and segment.isdigit()
                and int(segment) < len(node)
            ):
                node = node[int(segment)]
            else:
                node = None
                break
    if not isinstance(node, dict | bool):
        raise _Refused(f"its parameter schema's reference {shown!r} names no subschema")
    return node


def _expanded(
    node: Any, root: dict[str, Any], known: dict[int, tuple[int, int]], open_: set[int], depth: int
) -> tuple[int, int]:
    """(subschemas, levels) of ``node`` with every reference replaced by its target.

    Memoised per subschema, so shared definitions cost once here however many
    times the validator would visit them; stops as soon as a bound is passed.
    """
    if not isinstance(node, dict):
        return 1, 1
    if id(node) in known:
        return known[id(node)]
    if id(node) in open_:
        raise _Refused("its parameter schema is recursive (a $ref leads back to itself)")
    if depth > MAX_SCHEMA_DEPTH:
        raise _Refused(
            f"its parameter schema's references nest more than {MAX_SCHEMA_DEPTH} levels deep"
        )
    _check_node(node, root)  # a reference may name a subschema in no keyword's place
    open_.add(id(node))
    children = _applied(node)
    children.extend(_target(node[key], root) for key in _REFERENCES if key in node)
    size, levels = 1, 0
    for child in children:
        child_size, child_levels = _expanded(child, root, known, open_, depth + 1)
        size += child_size
        levels = max(levels, child_levels)
        if size > MAX_SCHEMA_NODES:
            raise _Refused(
                f"its parameter schema expands to more than {MAX_SCHEMA_NODES:,} "
                "subschemas once its references are followed"
            )
    open_.discard(id(node))
    known[id(node)] = (size, levels + 1)
    return known[id(node)]


def _validator(schema: Any) -> Any:
    """A validator for ``schema`` whose references never leave the document.

    The empty registry has no retrieval: an unknown URI is ``Unresolvable``
    (jsonschema's default would fetch it with urllib, from the Host).
    """
    from referencing import Registry

    return _validator_class()(schema, registry=Registry())


@functools.cache
def _validator_class() -> Any:
    """jsonschema's draft 2020-12 validator with ``pattern``/``patternProperties`` on Rust."""
    import jsonschema
    from jsonschema import validators

    def pattern(validator: Any, regex: str, instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "string") and not _matches(regex, instance):
            yield jsonschema.ValidationError(f"does not match the pattern {bounded(regex, 80)!r}")

    def pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "object"):
            return
        for regex, subschema in patterns.items():
            for name, value in instance.items():
                if _matches(regex, name):
                    yield from validator.descend(value, subschema, path=name, schema_path=regex)

    return validators.extend(
        jsonschema.Draft202012Validator,
        {"pattern": pattern, "patternProperties": pattern_properties},
    )


@functools.lru_cache(maxsize=256)
def _regex(regex: str) -> Any:
    """A linear-time matcher for ``regex``; ``ValueError`` if the Rust engine refuses it."""
    from pydantic_core import SchemaError, SchemaValidator, core_schema

    try:
        return SchemaValidator(core_schema.str_schema(pattern=regex, regex_engine="rust-regex"))
    except SchemaError as exc:
        raise ValueError(str(exc).splitlines()[-1]) from None


def _matches(regex: str, text: str) -> bool:
    from pydantic_core import ValidationError

    try:
        _regex(regex).validate_python(text)
    except ValidationError:
        return False
    return True


def _patterns(schema: Any) -> list[str]:
    """Every regex a JSON schema holds (``pattern`` values, ``patternProperties`` keys)."""
    found: list[str] = []
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                found.append(node["pattern"])
            if isinstance(node.get("patternProperties"), dict):
                found.extend(str(key) for key in node["patternProperties"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _problem(error: jsonschema.ValidationError) -> str:
    """One bounded reason that names the argument and the rule, never the value."""
    where = ".".join(str(part) for part in error.absolute_path) or "arguments"
    if error.validator in ("required", "additionalProperties"):
        return f"{where}: {bounded(error.message, 120)}"
    rule = bounded(json.dumps(error.validator_value, default=str), 80)
    return f"{where}: must satisfy {error.validator} {rule}"


def _unserializable(value: Any) -> Any:
    raise InvalidValue(f"an argument of type {type(value).__name__} is not JSON")
