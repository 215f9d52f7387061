"""Provider-neutral model values: messages, tool calls, limits, requests and responses.

Every provider adapter normalizes to these; the ContextManager budgets them and
TurnExecution persists them. They are deeply frozen like every contract value.

Their text comes from models, tools and transcripts older versions wrote, and a
transcript is sent to the model again on every later turn: so each message,
answer, streamed delta and call id or name holds text that encodes as UTF-8
(``encodable``: a lone surrogate, a JSON ``"\\ud800"`` escape's, is replaced).
Kept as it came, one would fail every later request of its session.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from hostkit.errors import InvalidValue
from hostkit.freeze import FrozenMap, freeze, thaw
from hostkit.types._arguments import (
    MAX_ARGUMENT_DEPTH,
    RAW_ARGUMENTS_KEY,
    MalformedArguments,
    argument_problem,
    malformed_arguments,
)
from hostkit.types._attachment import Attachment, AttachmentPart
from hostkit.types._bounds import encodable, is_count

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "MAX_CALL_ID_CHARS",
    "MAX_MODEL_ID_CHARS",
    "MAX_REQUEST_ID_CHARS",
    "MAX_RESPONSE_BYTES",
    "MAX_TOKEN_COUNT",
    "MAX_TOOL_CALLS",
    "MAX_TOOL_NAME_CHARS",
    "FinishReason",
    "ModelLimits",
    "ModelMessage",
    "ModelRequest",
    "ModelResponse",
    "Role",
    "StreamEvent",
    "ToolCall",
    "ToolDefinition",
    "Usage",
    "reported_id",
]

# What one model response may hold. Every call in a response is executed (or recorded as
# unknown) in its own transaction before the step limit is looked at, so these bound the
# work and the rows one response can cause. 64 calls is far past the parallel calls any
# model makes; a name past what a ToolDefinition allows can never name a tool; a call id
# is a provider's short token. The byte bound covers text plus tool-argument JSON: four
# times the largest file ``files.write`` takes (1 MiB), so one full-size write survives
# JSON escaping, and below the 5 MiB a single attachment may be. Adapters enforce these
# while a response streams in (``hostkit.adapters``); ``ModelResponse`` refuses a response
# past the first three from any provider.
MAX_TOOL_CALLS = 64
MAX_TOOL_NAME_CHARS = 64
MAX_CALL_ID_CHARS = 128
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
# The longest provider name or model id: they go into usage records and calibration keys.
MAX_MODEL_ID_CHARS = 200
# The longest provider request id a response keeps (a support ticket quotes it).
MAX_REQUEST_ID_CHARS = 128
# The largest token count one usage bucket holds: far past any window a model has (a
# million tokens is 2**20) and exact in a JSON reader holding numbers as doubles. The
# store keeps one row per model call and sums a session's rows in 64-bit integers
# (SQLite's SUM fails on overflow for good): 2**23 - 1 calls each at this bound fit.
MAX_TOKEN_COUNT = 2**40
Role = Literal["system", "user", "assistant", "tool"]
FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "other"]
_FINISH_REASONS: tuple[str, ...] = get_args(FinishReason)


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """Normalized limits of one provider/model, owned by the provider layer.

    ``safety_margin_tokens`` covers estimator error and provider framing; the
    ContextManager alone turns these into a per-step input/output budget.
    """

    context_window: int
    max_output_tokens: int
    estimator_id: str = "chars/4"
    safety_margin_tokens: int = 256

    def __post_init__(self) -> None:
        if not is_count(self.context_window) or not is_count(self.max_output_tokens):
            raise InvalidValue("context_window and max_output_tokens must be positive integers")
        if self.max_output_tokens >= self.context_window:
            raise InvalidValue("max_output_tokens must be smaller than context_window")
        if not is_count(self.safety_margin_tokens, low=0):
            raise InvalidValue("safety_margin_tokens must be an integer of at least 0")


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """A provider-visible tool: name, description and JSON schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > MAX_TOOL_NAME_CHARS:
            raise InvalidValue(f"tool names are 1-{MAX_TOOL_NAME_CHARS} characters")
        _encode_fields(self, "description")  # an MCP server's, sent with every request
        if type(self.parameters) is not FrozenMap:  # a frozen schema is kept as it is
            object.__setattr__(self, "parameters", FrozenMap(self.parameters))


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for; ``arguments`` is the parsed JSON object.

    Arguments that are not JSON data (``hostkit.types._arguments``: ``NaN``,
    an infinity, a non-string key, nesting past ``MAX_ARGUMENT_DEPTH``, a
    Python object) are an ``InvalidValue``: kept, they would fail the encoding
    of every later request of the conversation. Adapters keep what a model
    sent malformed as ``MalformedArguments`` instead (``parse_tool_arguments``),
    which stays that type here and in the transcript: the effect runtime
    refuses it before anything else looks at the call.
    The id and name are made ``encodable`` (see the module docstring).
    """

    call_id: str
    name: str
    arguments: Mapping[str, Any]

    def __post_init__(self) -> None:
        _encode_fields(self, "call_id", "name")
        # Checked before freezing, which would recurse through a hostile depth.
        problem = argument_problem(self.arguments)
        if problem is not None:
            raise InvalidValue(f"tool-call arguments {problem}")
        if not isinstance(self.arguments, MalformedArguments):  # frozen already, and a fact
            object.__setattr__(self, "arguments", FrozenMap(self.arguments))


@dataclass(frozen=True, slots=True)
class ModelMessage:
    """One provider-neutral chat message.

    ``tool_calls`` appear on assistant messages; ``tool_call_id`` links a tool
    message to the call it answers, and the pair is never split by pruning.
    ``attachments`` appear on user messages: with their bytes in the turn
    that attached them, as references (sent as stand-in text) after that.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    attachments: tuple[AttachmentPart, ...] = ()

    def __post_init__(self) -> None:
        if self.role not in ("system", "user", "assistant", "tool"):
            raise InvalidValue("role must be system, user, assistant or tool")
        _encode_fields(self, "content", "tool_call_id", "name")
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        parts = tuple(self.attachments)
        if parts and (self.role != "user" or not all(isinstance(p, AttachmentPart) for p in parts)):
            raise InvalidValue("only user messages carry attachments, as AttachmentParts")
        object.__setattr__(self, "attachments", parts)
        if self.role == "tool" and not self.tool_call_id:
            raise InvalidValue("a tool message needs the tool_call_id it answers")

    def to_json(self) -> dict[str, Any]:
        """The persisted transcript form (the role is stored beside it)."""
        body: dict[str, Any] = {"text": self.content}
        if self.tool_calls:
            body["tool_calls"] = [_call_json(c) for c in self.tool_calls]
        if self.tool_call_id:
            body["tool_call_id"] = self.tool_call_id
        if self.name:
            body["name"] = self.name
        if self.attachments:
            # References only: the bytes stay in the attachment store.
            body["attachments"] = [part.attachment.to_json() for part in self.attachments]
        return body

    @classmethod
    def from_json(cls, role: str, body: Mapping[str, Any]) -> ModelMessage:
        """The message ``to_json`` stored (its role beside it).

        A stored call whose arguments are no JSON data (``NaN`` or an infinity,
        which SQLite rows written before ``ToolCall`` refused them can hold) is
        read as ``MalformedArguments``: replaying it must not fail every later step.
        """
        calls = tuple(_stored_call(c) for c in body.get("tool_calls", ()))
        return cls(
            role=role,  # type: ignore[arg-type]
            content=str(body.get("text", "")),
            tool_calls=calls,
            tool_call_id=body.get("tool_call_id"),
            name=body.get("name"),
            attachments=tuple(
                AttachmentPart(Attachment.from_json(a)) for a in body.get("attachments", ())
            ),
        )


def _call_json(call: ToolCall) -> dict[str, Any]:
    """One call as the transcript keeps it; malformed arguments say so (``malformed``)."""
    stored = {"call_id": call.call_id, "name": call.name, "arguments": thaw(call.arguments)}
    if isinstance(call.arguments, MalformedArguments):
        stored["malformed"] = call.arguments.reason
    return stored


def _stored_call(stored: Mapping[str, Any]) -> ToolCall:
    """The call ``_call_json`` stored, or an older version did.

    Only a call stored with its ``malformed`` reason is read as malformed. Older
    versions kept malformed arguments as a bare ``{"_raw": text}``, which is
    also how a well-formed call to a tool with a ``_raw`` property is stored:
    such a row is read as the mapping it holds. That is safe: a stored call is
    only ever replayed to the model (in the same ``{"_raw": text}`` form either
    way), never run again (a continuation runs its approval's arguments).
    """
    call_id, name = stored["call_id"], stored["name"]
    arguments = stored.get("arguments", {})
    reason = stored.get("malformed")
    if isinstance(reason, str) and isinstance(arguments, Mapping):
        text = arguments.get(RAW_ARGUMENTS_KEY)
        if isinstance(text, str):
            return ToolCall(call_id, name, MalformedArguments(text, reason))
    problem = argument_problem(arguments)
    if problem is not None:
        return ToolCall(call_id, name, malformed_arguments(arguments, problem))
    return ToolCall(call_id, name, arguments)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token buckets as the provider reported them (zero where it reports none).

    ``input_tokens`` counts every prompt token, cached ones included; the cache
    buckets are subsets of it (adapters normalize providers that report them
    separately), so estimates are always compared against ``input_tokens``.
    Each count is an ``int`` from 0 to ``MAX_TOKEN_COUNT`` (2**40); anything
    else is an ``InvalidValue``, whichever provider built it. The bound is far
    below what a 64-bit column holds so that a session's steps, summed by the
    inspectors, never overflow it; a turn's total (``add_usage``) stops at it.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __post_init__(self) -> None:
        # Counts are summed per turn and per session in 64-bit integers: a str, a float, a
        # negative or a number past the bound would fail the store or skew calibration.
        for count in (
            self.input_tokens,
            self.output_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
        ):
            if not is_count(count, low=0, high=MAX_TOKEN_COUNT):
                raise InvalidValue(f"token counts are integers from 0 to {MAX_TOKEN_COUNT}")


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """What a provider adapter sends: prepared messages, final tool definitions, a budget."""

    messages: tuple[ModelMessage, ...]
    tools: tuple[ToolDefinition, ...] = ()
    max_output_tokens: int = 512
    temperature: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=FrozenMap)

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(self.messages))
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "metadata", freeze(self.metadata))
        if self.max_output_tokens <= 0:
            raise InvalidValue("max_output_tokens must be positive")


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """A normalized provider response.

    Each field holds its declared type (``finish_reason`` one of ``FinishReason``,
    each call a ``ToolCall`` named by a ``str``). At most ``MAX_TOOL_CALLS``
    tool calls, each named in at most ``MAX_TOOL_NAME_CHARS`` and identified in
    at most ``MAX_CALL_ID_CHARS`` characters. Anything else is an
    ``InvalidValue``, whichever provider built it.
    ``model`` and ``provider_request_id`` are what the server chose (a proxy,
    a self-hosted or a compromised one): each is kept as ``reported_id``
    writes it, escaped and cut, since usage rows, events and the inspectors
    show them.
    """

    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    finish_reason: FinishReason
    provider: str
    model: str
    provider_request_id: str | None = None

    def __post_init__(self) -> None:
        # Any provider builds these, an embedder's too: a field of the wrong type would
        # complete a turn with it (an int answer) or fail one later as an internal error.
        if not isinstance(self.text, str):
            raise InvalidValue("a response's text must be a str")
        _encode_fields(self, "text")
        if not isinstance(self.tool_calls, tuple | list):
            raise InvalidValue("a response's tool_calls must be a tuple of ToolCall")
        calls = tuple(self.tool_calls)
        if not isinstance(self.usage, Usage):
            raise InvalidValue("a response's usage must be a Usage")
        if self.finish_reason not in _FINISH_REASONS:
            raise InvalidValue(f"a response's finish_reason must be one of {_FINISH_REASONS}")
        if not isinstance(self.provider, str) or not isinstance(self.model, str):
            raise InvalidValue("a response's provider and model must be str")
        if not isinstance(self.provider_request_id, str | None):
            raise InvalidValue("a response's provider_request_id must be a str or None")
        # Checked here, not on ToolCall: a transcript written before these bounds must
        # still load, but no provider may hand a turn a response past them.
        if len(calls) > MAX_TOOL_CALLS:
            raise InvalidValue(f"a response holds more than {MAX_TOOL_CALLS} tool calls")
        for call in calls:
            if not isinstance(call, ToolCall):
                raise InvalidValue("a response's tool_calls must be a tuple of ToolCall")
            if not isinstance(call.name, str) or not isinstance(call.call_id, str):
                raise InvalidValue("a tool call's name and call_id must be str")
            if len(call.name) > MAX_TOOL_NAME_CHARS:
                raise InvalidValue(f"a tool name is longer than {MAX_TOOL_NAME_CHARS} characters")
            if len(call.call_id) > MAX_CALL_ID_CHARS:
                raise InvalidValue(f"a tool call id is longer than {MAX_CALL_ID_CHARS} characters")
        object.__setattr__(self, "tool_calls", calls)
        object.__setattr__(self, "model", reported_id(self.model, MAX_MODEL_ID_CHARS))
        if isinstance(self.provider_request_id, str):
            request_id = reported_id(self.provider_request_id, MAX_REQUEST_ID_CHARS)
            object.__setattr__(self, "provider_request_id", request_id)

    def reported(self, step: int) -> dict[str, Any]:
        """What it returned, minus its content: the ``provider.responded`` event's detail
        (model, ids, finish and usage) for a call made at ``step``."""
        usage = self.usage
        return {
            "step": step,
            "provider": self.provider,
            "model": self.model,
            "response_id": self.provider_request_id,
            "finish_reason": self.finish_reason,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        }


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One streamed increment; the last event (``kind="done"``) carries the full response.

    A kind other than ``text`` and ``done``, text that is no ``str`` or a ``done``
    without its ``ModelResponse`` is an ``InvalidValue``.
    """

    kind: Literal["text", "done"]
    text: str = ""
    response: ModelResponse | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("text", "done"):
            raise InvalidValue('a stream event\'s kind must be "text" or "done"')
        if not isinstance(self.text, str):
            raise InvalidValue("a stream event's text must be a str")
        _encode_fields(self, "text")
        if self.kind == "done" and not isinstance(self.response, ModelResponse):
            raise InvalidValue("a done event carries its ModelResponse")
        if self.kind == "text" and self.response is not None:
            raise InvalidValue("only the done event carries a response")


def _encode_fields(value: object, *names: str) -> None:
    """Make each text field of a frozen ``value`` ``encodable`` (a non-str is left to
    the value's own checks)."""
    for name in names:
        text = getattr(value, name)
        if isinstance(text, str) and not str.isascii(text):
            object.__setattr__(value, name, encodable(text))


def reported_id(value: str, limit: int) -> str:
    """An identifier a server chose, as the Host keeps it: printable, at most ``limit`` long.

    Every character that is not printable (ESC, OSC, C1 controls, bidi
    overrides, a lone surrogate) is written as its Python escape, so no
    terminal, log or table that shows it can be driven by it; a longer one is
    cut, ending in ``…``. A clean id is kept as it is, and the same id always
    comes out the same (a usage row's model stays one key).
    """
    text = str.__str__(value)
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
