"""Provider-neutral model values: messages, tool calls, limits, requests and responses.

Every provider adapter normalizes to these; the ContextManager budgets them and
TurnExecution persists them. They are deeply frozen like every contract value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from hostkit.errors import InvalidValue
from hostkit.freeze import FrozenMap, freeze, nested_deeper_than, thaw
from hostkit.types._attachment import Attachment, AttachmentPart
from hostkit.types._bounds import is_count

__all__ = [
    "MAX_ARGUMENT_DEPTH",
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
]

# How deep a tool call's arguments may nest: far past any real schema, well short of the
# recursion a deeper structure would cost every layer that freezes, encodes or checks it.
MAX_ARGUMENT_DEPTH = 64
Role = Literal["system", "user", "assistant", "tool"]
FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "other"]


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
        if not self.name or len(self.name) > 64:
            raise InvalidValue("tool names are 1-64 characters")
        if type(self.parameters) is not FrozenMap:  # a frozen schema is kept as it is
            object.__setattr__(self, "parameters", FrozenMap(self.parameters))


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for; ``arguments`` is the parsed JSON object."""

    call_id: str
    name: str
    arguments: Mapping[str, Any]

    def __post_init__(self) -> None:
        # A provider adapter that built arguments in Python (not from JSON) may still
        # hand over anything: refuse what no tool takes before freezing recurses.
        if nested_deeper_than(self.arguments, MAX_ARGUMENT_DEPTH):
            raise InvalidValue(f"tool-call arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels")
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
            body["tool_calls"] = [
                {"call_id": c.call_id, "name": c.name, "arguments": thaw(c.arguments)}
                for c in self.tool_calls
            ]
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
        calls = tuple(
            ToolCall(c["call_id"], c["name"], c.get("arguments", {}))
            for c in body.get("tool_calls", ())
        )
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


@dataclass(frozen=True, slots=True)
class Usage:
    """Token buckets as the provider reported them (zero where it reports none).

    ``input_tokens`` counts every prompt token, cached ones included; the cache
    buckets are subsets of it (adapters normalize providers that report them
    separately), so estimates are always compared against ``input_tokens``.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


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
    """A normalized provider response."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    finish_reason: FinishReason
    provider: str
    model: str
    provider_request_id: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One streamed increment; the last event (``kind="done"``) carries the full response."""

    kind: Literal["text", "done"]
    text: str = ""
    response: ModelResponse | None = None
