"""Tools defined by a JSON schema rather than a Python signature (authored modules, MCP).

The definition comes from somewhere the Host does not run in-process before
approval (a discovery child, an MCP server), so arguments are validated
against the discovered schema with jsonschema. Every ``pattern`` runs on
pydantic-core's Rust regex engine: Python's ``re`` would let a schema's
``^(a+)+$`` and a model's argument stall the event loop before any approver
is asked. jsonschema is imported on first use.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from hostkit.effects._authored import MAX_DESCRIPTION_CHARS, AuthoredTool, ToolContext
from hostkit.errors import InvalidValue, bounded
from hostkit.freeze import FrozenMap, thaw

if TYPE_CHECKING:
    import jsonschema

__all__ = ["SchemaTool", "schema_problem"]


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
        # No AuthoredTool.__init__: there is no Python signature to derive a model from.
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
        self._validator = _validator_class()(thaw(parameters))

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        plain = json.loads(json.dumps(thaw(arguments), default=_unserializable))
        if not isinstance(plain, dict):
            raise InvalidValue(f"invalid arguments for {self.name}: arguments: must be an object")
        errors = sorted(
            self._validator.iter_errors(plain),
            key=lambda e: [str(part) for part in e.absolute_path],
        )
        if errors:
            problems = "; ".join(_problem(error) for error in errors[:5])
            raise InvalidValue(f"invalid arguments for {self.name}: {problems}")
        return plain

    async def invoke(self, context: ToolContext, arguments: Mapping[str, Any]) -> Any:
        return await self.fn(context, **arguments)


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` cannot define a tool's parameters (blocking: a worker thread), or None.

    It must be a valid draft 2020-12 object schema whose regexes the linear-time
    engine compiles (no look-around, no back-references).
    """
    import jsonschema

    schema = thaw(schema)  # a discovered schema may arrive frozen (FrozenMap, tuples)
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return "its parameter schema is not a JSON object schema"
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
