"""Authored tools: typed async Python functions with a schema derived from their signature."""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
from collections.abc import Awaitable, Callable, Mapping, Set
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar, Protocol, get_type_hints, overload

import pydantic
from pydantic.fields import FieldInfo

from hostkit.effects._redaction import Redactor
from hostkit.errors import ConfigError, InvalidValue, bounded
from hostkit.freeze import FrozenMap, thaw
from hostkit.types import EffectStatus

__all__ = [
    "MAX_DESCRIPTION_CHARS",
    "MAX_WARNING_CHARS",
    "TOOL_STATUSES",
    "AuthorHandles",
    "AuthorState",
    "AuthoredTool",
    "BuiltinOutcome",
    "Prepared",
    "ToolChanged",
    "ToolContext",
    "ToolOutcome",
    "is_effect_name",
    "is_timeout",
    "tool",
]

_EFFECT_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")
MAX_DESCRIPTION_CHARS = 1024
MAX_WARNING_CHARS = 300
# A digest fingerprints a state (``sha256:<hex>`` is 71): long enough for any hash text.
MAX_DIGEST_CHARS = 200
# One invocation's deadline: positive, and at most a day.
_MAX_TIMEOUT_S = 86_400.0


def is_effect_name(name: object) -> bool:
    """Dotted lower_snake_case of at most 64 characters (what providers and policies accept)."""
    return isinstance(name, str) and len(name) <= 64 and _EFFECT_NAME.fullmatch(name) is not None


def is_timeout(value: object) -> bool:
    """A finite number of seconds in (0, one day]."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 < value <= _MAX_TIMEOUT_S
    )


# Every integer argument fits a signed 64-bit integer: what SQLite, struct, os and
# most C-backed calls accept. Wider values fail deep in a tool with a raw OverflowError.
_INT64 = (-(2**63), 2**63 - 1)
# A Decimal argument's exponent past this is no quantity a tool means to handle.
_MAX_DECIMAL_EXPONENT = 1_000
_MAX_ARGUMENT_DEPTH = 32


class ToolChanged(ConfigError):
    """The tool that would run no longer matches the definition the model was shown.

    An authored tool module edited on disk after its tools were discovered is
    one: the call fails (``failed``, ``started=False``) before the tool's
    function runs; applying the configuration again discovers the new version.
    """


class AuthorState(Protocol):
    """One scope of authored state (``ToolContext.state``, ``.core_state``; hostkit.cores)."""

    async def get(self, key: str) -> Any:
        """The current value of ``key`` as JSON data, or None."""
        ...

    async def entry(self, key: str) -> Any:
        """The current ``StateEntry`` of ``key`` (value and version), or None."""
        ...

    async def set(self, key: str, value: Any, *, expected: int | None = ...) -> int:
        """Write ``value`` as the next version (compare-and-set with ``expected``)."""
        ...


Emit = Callable[[str, Mapping[str, Any] | None], None]


def _slice(text: str, start: int, end: int) -> str:
    return text[start:end]


def _discard(kind: str, data: Mapping[str, Any] | None = None) -> None:
    """``emit`` of a tool called outside a turn that lends its SDK: events go nowhere."""


def _from_secrets(text: str) -> str:
    """``redact_bound``'s default: replaced by ``_masking(secrets)`` when the context is made."""
    raise AssertionError("ToolContext.__post_init__ replaces this")


def _masking(secrets: Mapping[str, str]) -> Callable[[str], str]:
    """Masks ``secrets`` in a text, its redactor built at the first use and kept for the rest
    (a context made outside the runtime, which hands one ready)."""
    built: list[Redactor] = []

    def redact(text: str) -> str:
        if not built:
            built.append(Redactor.of(secrets))
        return built[0].text(text)

    return redact if secrets else str


@dataclass(frozen=True, slots=True)
class AuthorHandles:
    """What a running turn lends the authored tools it calls (built by hostkit.cores).

    ``emit`` makes the call's emitter from the call's redactor, so a tool's
    events are masked like its results.
    """

    state: AuthorState
    core_state: AuthorState
    emit: Callable[[Callable[[str], str]], Emit]


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

    The same SDK a slot's ``ctx`` has: ``core_revision``, ``request_id``,
    ``state`` (the session's authored state of the turn's core),
    ``core_state`` (core-wide) and ``emit(kind, data)`` (a ``tool.<kind>``
    event). ``state`` and ``core_state`` are None when the tool is called
    outside a turn (a direct ``execute`` without them).
    """

    turn_id: str
    session_id: str
    core_id: str
    owner: str
    workspace: Path
    secrets: Mapping[str, str] = field(default_factory=FrozenMap)
    secrets_expire_at: float | None = None
    # What the tool's ``prepare`` check returned for this call (``Prepared.value``).
    prepared: Any = None
    # The provider's id of this call: a tool that starts Host work (a background
    # run) records it with that work.
    call_id: str | None = None
    # Masks every secret the agent holds in a text the tool keeps beyond its result
    # (a durable record of Host work): results are redacted by the runtime, such
    # records are not.
    redact: Callable[[str], str] = str
    # Masks the values bound to this call (``secrets``, each ``[redacted:NAME]``) as results
    # are masked, any piece of 8+ characters too: for output of a process the tool handed
    # them to. Built once per call from the spellings the runtime keeps for its generation,
    # so masking each stream costs no redactor build; a context made outside the runtime
    # builds one from ``secrets`` at its first use.
    redact_bound: Callable[[str], str] = _from_secrets
    # For a tool that returns a window of stored text whose edges the model chose (a
    # file read at an offset): ``redact_window(text, start, end)`` is ``text[start:end]``
    # with every secret overlapping it masked, found in all of ``text``. Read
    # ``secret_reach`` characters beyond each edge into ``text`` so that no cut through
    # a secret leaves a piece too short to recognise.
    redact_window: Callable[[str, int, int], str] = _slice
    secret_reach: int = 0
    core_revision: str = ""
    request_id: str = ""
    state: AuthorState | None = None
    core_state: AuthorState | None = None
    emit: Emit = _discard

    def __post_init__(self) -> None:
        if self.redact_bound is _from_secrets:
            object.__setattr__(self, "redact_bound", _masking(self.secrets))


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a tool's pre-approval check found, for the approver and for the call.

    ``view`` is shown to the approver (and kept with a durable approval) as
    the call's checked target, for example a URL's origin; ``value`` is
    handed to the invocation as ``ToolContext.prepared``, so the call acts on
    exactly what was approved. ``digest`` fingerprints the state the check
    found (a file's content): a durable approval keeps it, and its
    continuation, whose check runs again, runs the call only if the check
    finds the same digest; otherwise the approval is stale and nothing runs.
    ``diff`` makes what the call would change from the same read as
    ``digest`` (so the approver sees the state the approval is bound to):
    a function run in a worker thread only when a person is asked, best
    effort under the tool's deadline, in place of the tool's ``preview_diff``.
    """

    view: Mapping[str, Any] = field(default_factory=FrozenMap)
    value: Any = None
    digest: str | None = None
    diff: Callable[[], str | None] | None = None

    def __post_init__(self) -> None:
        digest = self.digest
        if digest is not None and not (
            isinstance(digest, str)
            and 0 < len(digest) <= MAX_DIGEST_CHARS
            and digest.isascii()
            and digest.isprintable()
        ):
            raise TypeError(
                f"Prepared.digest must be None or 1..{MAX_DIGEST_CHARS} printable ASCII characters"
            )
        if self.diff is not None and not callable(self.diff):
            raise TypeError("Prepared.diff must be None or a function that makes the diff")


# The statuses a tool's run can end with: all a ``ToolOutcome`` may report. ``denied`` and
# ``not_found`` are the Host's verdicts (its checks refused the call, or found nothing it
# named) and ``invalid`` the arguments': a tool claiming one would have the record and the
# audit say the Host refused a call that ran.
TOOL_STATUSES: frozenset[str] = frozenset(
    {"succeeded", "failed", "timed_out", "cancelled", "indeterminate"}
)


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """A tool's own verdict when plain success is not the whole story.

    Returning one lets a builtin report ``failed``, ``timed_out``,
    ``cancelled`` or ``indeterminate`` with its output still shown (a command
    that exited non-zero, a process tree that could not be confirmed gone).
    Any other return value means ``succeeded``. Another ``status`` (one of the
    Host's own, or a word of the tool's) is an ``InvalidValue`` when the
    outcome is made, so the call that made it is ``failed``.

    ``audit`` is the call's audit view: what the Host actually did (the
    working directory, environment names and executable of a process; the
    origin and validated addresses of each fetched hop). It never reaches the
    model; the runtime redacts it and persists it with the call (docs/effects.md
    "Audit views"). It holds names and paths, never values.
    """

    status: EffectStatus
    output: Any = None
    error: str | None = None
    audit: Mapping[str, Any] | None = None
    _statuses: ClassVar[frozenset[str]] = TOOL_STATUSES

    def __post_init__(self) -> None:
        status = self.status
        if not isinstance(status, str) or str.__str__(status) not in self._statuses:
            shown = repr(str.__str__(status)) if isinstance(status, str) else type(status).__name__
            raise InvalidValue(
                f"{type(self).__name__}.status must be one of "
                f"{', '.join(sorted(self._statuses))}, not {bounded(shown, 60)}"
            )
        object.__setattr__(self, "status", str.__str__(status))


@dataclass(frozen=True, slots=True)
class BuiltinOutcome(ToolOutcome):
    """A Host builtin's outcome, which may also carry the Host's own verdicts.

    ``denied``: a Host check that can only run inside the effect refused (a
    secret binding expired, the sandbox is unavailable, a run belongs to
    another Host process); ``not_found``: what the call named is not there or
    not the caller's. The Host's builtins only: an authored tool reports how
    its run ended (``ToolOutcome``), and a refusal of its own is a raised
    ``PolicyRefusal`` (docs/effects.md, the pipeline's step 7).
    """

    _statuses: ClassVar[frozenset[str]] = TOOL_STATUSES | {"denied", "not_found"}


class AuthoredTool:
    """One authored effect: a dotted name, a description and an async function.

    The function's first parameter receives the ``ToolContext``; the others
    become the JSON schema the model sees, validated with pydantic before the
    function runs. ``timeout_s`` bounds one invocation. ``preflight`` is a
    pure Host check over the validated arguments (no I/O) that raises a
    ``UserError`` to refuse the call before anything runs. ``prepare`` is the
    async form for checks that read the Host's own state but change nothing
    and reach nothing outside it (no network, not even DNS: a lookup already
    reaches whoever serves the name): the pipeline runs it after
    ``preflight`` and before approval, so a refused target never reaches an
    approver; it raises a
    ``UserError`` to refuse, and returns a ``Prepared``. ``secrets_argument``
    names the argument (a list of environment names) through which a call asks
    the runtime to bind ``secret.bind:<NAME>`` secrets into ``ToolContext``.
    ``approval_warning`` is shown with every approval prompt for this tool (for
    example, that its programs run unsandboxed). ``preview_diff`` is run only
    when a call is about to be asked, after ``prepare``: it returns the text
    diff of what the call would change (a file overwrite), or None; it changes
    nothing, and a failure only leaves the diff out of the prompt.
    """

    # Values (name -> value) no view of this tool's results may show, whoever holds
    # grants: set by a tool whose own configuration carries secrets (an MCP server's
    # declared env). Redacted like a bound secret, labelled by the name.
    secret_values: Mapping[str, str] = FrozenMap()

    def __init__(
        self,
        name: str,
        fn: Callable[..., Awaitable[Any]],
        *,
        description: str | None = None,
        timeout_s: float = 30.0,
        preflight: Callable[[Mapping[str, Any]], None] | None = None,
        prepare: Callable[[Mapping[str, Any]], Awaitable[Prepared]] | None = None,
        secrets_argument: str | None = None,
        approval_warning: str | None = None,
        preview_diff: Callable[[Mapping[str, Any]], Awaitable[str | None]] | None = None,
    ) -> None:
        if not is_effect_name(name):
            raise InvalidValue(f"effect name {name!r} must be dotted lower_snake_case")
        if not is_timeout(timeout_s):
            raise InvalidValue(f"timeout_s of {name} must be a number of seconds in (0, 86400]")
        if not inspect.iscoroutinefunction(fn):
            raise InvalidValue(f"authored tool {name} must be an async function")
        if description is not None and not isinstance(description, str):
            raise InvalidValue(f"the description of {name} must be a str")
        if approval_warning is not None and not isinstance(approval_warning, str):
            raise InvalidValue(f"the approval_warning of {name} must be a str")
        self.name = name
        self.fn = fn
        summary, documented = _docstring(inspect.getdoc(fn) or "")
        self.description = (description or summary or name).strip()[:MAX_DESCRIPTION_CHARS]
        self.timeout_s = timeout_s
        self.preflight = preflight
        self.prepare = prepare
        self.secrets_argument = secrets_argument
        self.approval_warning = (
            bounded(approval_warning, MAX_WARNING_CHARS) if approval_warning else None
        )
        self.preview_diff = preview_diff
        self.takes_context, self._model = _arguments_model(name, fn, documented)
        try:
            schema = self._model.model_json_schema()
        except pydantic.PydanticUserError as exc:  # an annotation JSON Schema cannot describe
            raise InvalidValue(
                f"authored tool {name} has an argument type no JSON schema describes: "
                f"{bounded(str(exc).splitlines()[0], 200)}"
            ) from None
        schema.pop("title", None)
        if secrets_argument is not None and not _takes_names(schema, secrets_argument):
            # Bound secret names come from this argument: a str would be read per character.
            raise InvalidValue(
                f"secrets_argument of {name} must name one of its arguments typed as a list of str"
            )
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
        arguments = {key: getattr(parsed, key) for key in type(parsed).model_fields}
        problem = _out_of_bounds(arguments, "", 0)
        if problem is not None:
            raise InvalidValue(f"invalid arguments for {self.name}: {problem}")
        return arguments

    async def invoke(self, context: ToolContext, arguments: Mapping[str, Any]) -> Any:
        if self.takes_context:
            return await self.fn(context, **arguments)
        return await self.fn(**arguments)


def _out_of_bounds(value: Any, path: str, depth: int) -> str | None:
    """The first number a tool should never receive (a wide int, inf, nan), or None.

    Checked on the validated values, generically, so no tool has to repeat it.
    """
    where = path or "arguments"
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            return f"{where}: the integer is outside the signed 64-bit range"
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where}: the number must be finite"
    if isinstance(value, complex):
        finite = math.isfinite(value.real) and math.isfinite(value.imag)
        return None if finite else f"{where}: the number must be finite"
    if isinstance(value, Decimal):
        # "1e999999999" is a finite Decimal whose int() or str() would not end in time.
        if not value.is_finite() or abs(value.adjusted()) > _MAX_DECIMAL_EXPONENT:
            return f"{where}: the number must be finite and of a usual size"
        return None
    if depth >= _MAX_ARGUMENT_DEPTH:
        return f"{where}: nested too deeply"
    items: Any = ()
    if isinstance(value, Mapping):
        for key in value:  # keys are arguments too (dict[int, str]: a 30-digit key)
            problem = _out_of_bounds(key, f"{path}.<key>" if path else "<key>", depth + 1)
            if problem is not None:
                return problem
        items = ((str(key), item) for key, item in value.items())
    elif isinstance(value, list | tuple | Set):
        items = ((str(index), item) for index, item in enumerate(value))
    elif isinstance(value, pydantic.BaseModel):
        items = ((key, getattr(value, key)) for key in type(value).model_fields)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = ((f.name, getattr(value, f.name)) for f in dataclasses.fields(value))
    for key, item in items:
        problem = _out_of_bounds(item, f"{path}.{key}" if path else key, depth + 1)
        if problem is not None:
            return problem
    return None


def _arguments_model(
    name: str, fn: Callable[..., Any], documented: Mapping[str, str]
) -> tuple[bool, type[pydantic.BaseModel]]:
    """Whether ``fn`` takes the ToolContext first, and the model of its other arguments.

    The first parameter is the context when it is annotated ``ToolContext``
    or not annotated at all (every tool written before the context became
    optional); a first parameter with any other annotation is an argument.
    Each argument's description comes from the docstring's ``Args:`` section.
    """
    signature = inspect.signature(fn)
    try:
        hints = get_type_hints(fn)
    except (NameError, TypeError) as exc:
        raise InvalidValue(
            f"authored tool {name} has a type hint that cannot be resolved: {exc}"
        ) from None
    parameters = list(signature.parameters.values())
    takes_context = bool(parameters) and (
        hints.get(parameters[0].name, ToolContext) is ToolContext
        and parameters[0].kind not in (parameters[0].VAR_POSITIONAL, parameters[0].VAR_KEYWORD)
    )
    fields: dict[str, Any] = {}
    for parameter in parameters[1:] if takes_context else parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise InvalidValue(f"authored tool {name} cannot take *args or **kwargs")
        if parameter.name.startswith("_") or hasattr(pydantic.BaseModel, parameter.name):
            # pydantic drops a private name and cannot have a field shadow its own
            # (model_config, model_dump, ...): the model could never pass the argument.
            raise InvalidValue(
                f"authored tool {name}: argument {parameter.name!r} is private or a name "
                "pydantic reserves"
            )
        if hints.get(parameter.name) is ToolContext:
            raise InvalidValue(f"authored tool {name} takes the ToolContext first or not at all")
        annotation = hints.get(parameter.name, Any)
        default = ... if parameter.default is parameter.empty else parameter.default
        described = documented.get(parameter.name)
        # A default that is already a Field (``= Field(description=...)``) says it itself.
        if described is not None and not isinstance(default, FieldInfo):
            default = pydantic.Field(default, description=described)
        fields[parameter.name] = (annotation, default)
    config = pydantic.ConfigDict(extra="forbid")
    try:
        model = pydantic.create_model(
            f"{name.replace('.', '_')}_arguments", __config__=config, **fields
        )
    except pydantic.PydanticUserError as exc:  # e.g. a class pydantic cannot validate
        raise InvalidValue(
            f"authored tool {name} has an argument type that cannot be validated: "
            f"{bounded(str(exc).splitlines()[0], 200)}"
        ) from None
    return takes_context, model


def _takes_names(schema: Mapping[str, Any], argument: str) -> bool:
    """Whether ``argument`` is in the arguments' schema as an array of strings."""
    declared = schema.get("properties", {}).get(argument)
    if not isinstance(declared, Mapping):
        return False
    options = declared.get("anyOf", [declared])
    return any(
        isinstance(option, Mapping)
        and option.get("type") == "array"
        and isinstance(option.get("items"), Mapping)
        and option["items"].get("type") == "string"
        for option in options
    )


_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns?|Raises|Yields|Examples?|Notes?):\s*$")
_GOOGLE_ARG = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_ARG = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


def _docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The docstring without its argument sections, and each argument's description.

    Google style (``Args:`` then ``name: text`` or ``name (type): text``,
    continuation lines indented further) and Sphinx style (``:param name: text``).
    The model sees the summary as the tool's description and each argument's
    text in the schema, not the same words twice.
    """
    summary: list[str] = []
    described: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    arg_indent = 0
    for line in doc.splitlines():
        stripped = line.strip()
        sphinx = _SPHINX_ARG.match(stripped)
        if sphinx:
            current = sphinx.group(1)
            described[current] = sphinx.group(2).strip()
            continue
        if stripped.startswith(":") and current is not None and section is None:
            current = None
            continue
        heading = _SECTION.match(stripped)
        if heading and not line.startswith(" "):
            section, current = heading.group(1), None
            continue
        if section is None:
            if current is not None and line.startswith(" ") and stripped:
                described[current] += " " + stripped
                continue
            current = None
            summary.append(line)
            continue
        if not stripped:
            current = None
            continue
        if section in ("Args", "Arguments", "Parameters"):
            argument = _GOOGLE_ARG.match(stripped)
            indent = len(line) - len(line.lstrip())
            if argument and (current is None or indent <= arg_indent):
                current, arg_indent = argument.group(1).lstrip("*"), indent
                described[current] = argument.group(3).strip()
            elif current is not None:
                described[current] = (described[current] + " " + stripped).strip()
    descriptions = {key: value[:1024] for key, value in described.items() if value}
    return "\n".join(summary).strip(), descriptions


@overload
def tool(name: Callable[..., Awaitable[Any]], /) -> AuthoredTool: ...


@overload
def tool(
    name: str | None = None, /, *, description: str | None = None, timeout_s: float = 30.0
) -> Callable[[Callable[..., Awaitable[Any]]], AuthoredTool]: ...


def tool(
    name: str | Callable[..., Awaitable[Any]] | None = None,
    /,
    *,
    description: str | None = None,
    timeout_s: float = 30.0,
) -> AuthoredTool | Callable[[Callable[..., Awaitable[Any]]], AuthoredTool]:
    """Decorator: an async function becomes an AuthoredTool.

    ``@tool`` names the effect after the function; ``@tool("notes.read")``
    names it explicitly. The schema comes from the type hints, each
    argument's description from the docstring's ``Args:`` section, and the
    ``ToolContext`` parameter is optional (first, when present).
    """
    if callable(name):
        return AuthoredTool(name.__name__, name, timeout_s=timeout_s)

    def wrap(fn: Callable[..., Awaitable[Any]]) -> AuthoredTool:
        return AuthoredTool(name or fn.__name__, fn, description=description, timeout_s=timeout_s)

    return wrap
