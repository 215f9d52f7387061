"""Authored tools: typed async Python functions with a schema derived from their signature."""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

import pydantic

from hostkit.errors import InvalidValue
from hostkit.freeze import FrozenMap, thaw
from hostkit.types import EffectStatus

__all__ = ["AuthoredTool", "ToolContext", "ToolOutcome", "tool"]

_EFFECT_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")


@dataclass(frozen=True, slots=True)
class ToolContext:
    """The reduced, author-facing context an authored tool receives.

    It carries identities and the turn's workspace, never the PrincipalScope,
    stores, route internals or operator authority. ``owner`` is an opaque key
    for per-owner data (agent memory), not a credential. ``secrets`` holds only
    the values the runtime bound for this one call after its capability and
    approval checks (environment name -> value), and ``secrets_expire_at`` the
    wall-clock time (``time.time()``) the earliest binding expires; a tool that
    starts a process clamps its deadline to it.
    """

    turn_id: str
    session_id: str
    core_id: str
    owner: str
    workspace: Path
    secrets: Mapping[str, str] = field(default_factory=FrozenMap)
    secrets_expire_at: float | None = None


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """A tool's own verdict when plain success is not the whole story.

    Returning one lets a builtin report ``failed``, ``timed_out``,
    ``cancelled`` or ``indeterminate`` with its output still shown (a command
    that exited non-zero, a process tree that could not be confirmed gone).
    Any other return value means ``succeeded``.
    """

    status: EffectStatus
    output: Any = None
    error: str | None = None


class AuthoredTool:
    """One authored effect: a dotted name, a description and an async function.

    The function's first parameter receives the ``ToolContext``; the others
    become the JSON schema the model sees, validated with pydantic before the
    function runs. ``timeout_s`` bounds one invocation. ``preflight`` is a
    pure Host check over the validated arguments (no I/O) that raises a
    ``UserError`` to refuse the call before anything runs. ``secrets_argument``
    names the argument (a list of environment names) through which a call asks
    the runtime to bind ``secret.bind:<NAME>`` secrets into ``ToolContext``.
    """

    def __init__(
        self,
        name: str,
        fn: Callable[..., Awaitable[Any]],
        *,
        description: str | None = None,
        timeout_s: float = 30.0,
        preflight: Callable[[Mapping[str, Any]], None] | None = None,
        secrets_argument: str | None = None,
    ) -> None:
        if not _EFFECT_NAME.match(name) or len(name) > 64:
            raise InvalidValue(f"effect name {name!r} must be dotted lower_snake_case")
        if not inspect.iscoroutinefunction(fn):
            raise InvalidValue(f"authored tool {name} must be an async function")
        self.name = name
        self.fn = fn
        self.description = (description or inspect.getdoc(fn) or name).strip()[:1024]
        self.timeout_s = timeout_s
        self.preflight = preflight
        self.secrets_argument = secrets_argument
        self._model = _arguments_model(name, fn)
        schema = self._model.model_json_schema()
        schema.pop("title", None)
        self.parameters: Mapping[str, Any] = FrozenMap(schema)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validated keyword arguments, or ``InvalidValue`` with a bounded reason."""
        try:
            parsed = self._model.model_validate(thaw(arguments))
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()[:5]
            )
            raise InvalidValue(f"invalid arguments for {self.name}: {problems}") from exc
        return {key: getattr(parsed, key) for key in type(parsed).model_fields}

    async def invoke(self, context: ToolContext, arguments: Mapping[str, Any]) -> Any:
        return await self.fn(context, **arguments)


def _arguments_model(name: str, fn: Callable[..., Any]) -> type[pydantic.BaseModel]:
    signature = inspect.signature(fn)
    hints = get_type_hints(fn)
    parameters = list(signature.parameters.values())
    if not parameters:
        raise InvalidValue(f"authored tool {name} must take the ToolContext first")
    fields: dict[str, Any] = {}
    for parameter in parameters[1:]:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise InvalidValue(f"authored tool {name} cannot take *args or **kwargs")
        annotation = hints.get(parameter.name, Any)
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (annotation, default)
    config = pydantic.ConfigDict(extra="forbid")
    return pydantic.create_model(f"{name.replace('.', '_')}_arguments", __config__=config, **fields)


def tool(
    name: str, *, description: str | None = None, timeout_s: float = 30.0
) -> Callable[[Callable[..., Awaitable[Any]]], AuthoredTool]:
    """Decorator: ``@tool("notes.read")`` turns an async function into an AuthoredTool."""

    def wrap(fn: Callable[..., Awaitable[Any]]) -> AuthoredTool:
        return AuthoredTool(name, fn, description=description, timeout_s=timeout_s)

    return wrap
