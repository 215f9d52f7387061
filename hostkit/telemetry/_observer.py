"""TracingObserver: a turn's events as OpenTelemetry spans (GenAI semantic conventions).

One ``invoke_agent {agent}`` span per turn, with a ``chat {model}`` child per
model call (a compaction's summarizer call included, marked
``hostkit.context.summary``) and an ``execute_tool {tool}`` child per effect, each started and
ended when the turn reports that step began and ended. Spans carry ids, model
names, token usage and statuses, never message content, tool arguments or
results (the store keeps those for the Host's own readers; a span exporter is
another audience), nor a tool name the model made up (``UNKNOWN_EFFECT`` instead).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, StatusCode, TracerProvider
from opentelemetry.util.types import AttributeValue

from hostkit.effects import is_effect_name, provider_name
from hostkit.errors import InvalidValue, bounded
from hostkit.telemetry import _names as n
from hostkit.turns import TurnEvent
from hostkit.types import UNKNOWN_EFFECT, is_count

__all__ = ["TracingObserver"]

_log = logging.getLogger("hostkit.telemetry")
# Outcomes a trace backend should show as errors; completed and needs_user are not.
_ERROR_OUTCOMES = frozenset({"failed", "cancelled", "indeterminate", "lost"})
_DEFAULT_MAX_TURNS = 4096


def _version() -> str | None:
    try:
        return metadata.version("hostkit")
    except metadata.PackageNotFoundError:
        return None


# Read once at import (package metadata is on disk), never on the event loop per observer.
_VERSION = _version()


@dataclass(slots=True)
class _Chat:
    """An open model call: its span, when it began, whether its first chunk arrived."""

    span: Span
    start_ns: int
    chunked: bool = False


@dataclass(slots=True)
class _Turn:
    """The open spans of one running turn."""

    root: Span
    context: Context
    common: dict[str, AttributeValue]
    chats: dict[str, _Chat] = field(default_factory=dict)  # _chat_key -> open model call
    effects: dict[str, Span] = field(default_factory=dict)  # call id (or approval) -> span
    current_effect: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0

    def open_spans(self) -> list[Span]:
        spans = [chat.span for chat in self.chats.values()] + list(self.effects.values())
        self.chats.clear()
        self.effects.clear()
        return spans


class TracingObserver:
    """An ``Observer`` that records turns as spans on ``tracer_provider`` (default: global).

    Called on the turn's own task, so a turn started inside an application
    span nests under it. Never raises and never blocks: spans are handed to
    the provider's processors (batched off the event loop); a failure to
    record is logged once and the turn goes on. At most ``max_turns`` turns
    are followed at once; beyond that the oldest is ended as ``_OTHER``.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        max_turns: int = _DEFAULT_MAX_TURNS,
    ) -> None:
        # 0 would end every turn's span at once, NaN would bound nothing.
        if not is_count(max_turns, high=1_000_000):
            raise InvalidValue("max_turns must be an integer from 1 to 1000000")
        self._tracer = trace.get_tracer("hostkit", _VERSION, tracer_provider=tracer_provider)
        self._max_turns = max_turns
        self._turns: dict[str, _Turn] = {}
        self._warned = False
        self._handlers: dict[str, Callable[[TurnEvent, _Turn], None]] = {
            "provider.started": self._chat_started,
            "text.delta": self._first_chunk,
            "provider.responded": self._chat_ended,
            "provider.failed": self._chat_failed,
            "effect.started": self._effect_started,
            "effect.completed": self._effect_completed,
            "approval.pending": self._effect_paused,
        }

    @property
    def open_turns(self) -> int:
        return len(self._turns)

    def close(self) -> None:
        """End the spans of turns still open, as ``_OTHER`` (before the provider shuts down).

        Only a turn whose terminal record could not be written ends without an
        event; its spans are exported rather than lost with the process.
        """
        while self._turns:
            _end_all(self._turns.pop(next(iter(self._turns))), "_OTHER")

    def notify(self, event: TurnEvent) -> None:
        try:
            self._handle(event)
        except Exception as exc:
            # Tracing is never a reason for a turn to fail; say so once, not per event.
            level = logging.DEBUG if self._warned else logging.WARNING
            self._warned = True
            _log.log(level, "tracing skipped %s: %s", event.kind, bounded(repr(exc), 200))

    def _handle(self, event: TurnEvent) -> None:
        if event.kind == "turn.started":
            self._turn_started(event)
            return
        turn = self._turns.get(event.turn_id)
        if turn is None:
            return
        handler = self._handlers.get(event.kind)
        if handler is not None:
            handler(event, turn)
        elif event.kind.startswith("turn."):
            self._turn_ended(event, self._turns.pop(event.turn_id))

    # -- turn --------------------------------------------------------------------------

    def _turn_started(self, event: TurnEvent) -> None:
        agent = str(event.data.get("core_id", ""))
        common: dict[str, AttributeValue] = {
            n.TURN_ID: event.turn_id,
            n.SESSION_ID: event.session_id,
            n.REQUEST_ID: event.request_id,
            n.CONVERSATION: event.session_id,
        }
        root = self._tracer.start_span(
            f"{n.INVOKE_AGENT} {agent}",
            kind=SpanKind.INTERNAL,
            attributes={**common, n.OPERATION: n.INVOKE_AGENT, n.AGENT_NAME: agent},
        )
        previous = self._turns.pop(event.turn_id, None)
        if previous is not None:
            _end_all(previous, "_OTHER")
        self._turns[event.turn_id] = _Turn(root, trace.set_span_in_context(root), common)
        while len(self._turns) > self._max_turns:
            _end_all(self._turns.pop(next(iter(self._turns))), "_OTHER")

    def _turn_ended(self, event: TurnEvent, turn: _Turn) -> None:
        outcome = event.kind.removeprefix("turn.")
        failed = outcome in _ERROR_OUTCOMES
        for span in turn.open_spans():
            if failed:
                _fail(span, outcome)
            span.end()
        root = turn.root
        root.set_attribute(n.OUTCOME, outcome)
        root.set_attribute(n.INPUT_TOKENS, turn.input_tokens)
        root.set_attribute(n.OUTPUT_TOKENS, turn.output_tokens)
        if failed:
            error = event.data.get("error")
            _fail(root, outcome, bounded(str(error), 200) if error else None)
        root.end()

    # -- model calls -------------------------------------------------------------------

    def _chat_started(self, event: TurnEvent, turn: _Turn) -> None:
        data = event.data
        provider, model = str(data.get("provider", "")), str(data.get("model", ""))
        attributes: dict[str, AttributeValue] = {
            **turn.common,
            n.OPERATION: n.CHAT,
            n.PROVIDER: provider,
            n.REQUEST_MODEL: model,
            n.STEP: int(data.get("step", 0)),
        }
        if data.get("summary"):
            attributes[n.SUMMARY] = True
        if isinstance(data.get("max_tokens"), int):
            attributes[n.REQUEST_MAX_TOKENS] = data["max_tokens"]
        span = self._tracer.start_span(
            f"{n.CHAT} {model}", context=turn.context, kind=SpanKind.CLIENT, attributes=attributes
        )
        turn.chats[_chat_key(data)] = _Chat(span, time.monotonic_ns())
        # The agent span names its provider and model too (the conventions require the former).
        turn.root.set_attribute(n.PROVIDER, provider)
        turn.root.set_attribute(n.REQUEST_MODEL, model)

    def _first_chunk(self, event: TurnEvent, turn: _Turn) -> None:
        chat = turn.chats.get(_chat_key(event.data))
        if chat is None or chat.chunked:
            return
        chat.chunked = True
        chat.span.set_attribute(n.FIRST_CHUNK_S, (time.monotonic_ns() - chat.start_ns) / 1e9)

    def _chat_ended(self, event: TurnEvent, turn: _Turn) -> None:
        data = event.data
        chat = turn.chats.pop(_chat_key(data), None)
        if chat is None:
            return
        chat.span.set_attributes(_response_attributes(data))
        turn.input_tokens += int(data.get("input_tokens", 0))
        turn.output_tokens += int(data.get("output_tokens", 0))
        chat.span.end()

    def _chat_failed(self, event: TurnEvent, turn: _Turn) -> None:
        chat = turn.chats.pop(_chat_key(event.data), None)
        if chat is not None:
            _fail(chat.span, str(event.data.get("error_type") or "_OTHER"))
            chat.span.end()

    # -- effects -----------------------------------------------------------------------

    def _effect_started(self, event: TurnEvent, turn: _Turn) -> None:
        data = event.data
        attributes: dict[str, AttributeValue] = {
            **turn.common,
            n.OPERATION: n.EXECUTE_TOOL,
            n.TOOL_TYPE: "function",
        }
        if "approval_id" in data:
            # A continuation runs the approved call; its name is known once it returns.
            key, name = f"approval:{data['approval_id']}", n.EXECUTE_TOOL
            attributes[n.APPROVAL_ID] = str(data["approval_id"])
        else:
            effect = _effect(data)
            tool = _tool(effect)
            key, name = str(data.get("call_id", "")), f"{n.EXECUTE_TOOL} {tool}"
            attributes.update(
                {
                    n.TOOL_NAME: tool,
                    n.TOOL_CALL_ID: key,
                    n.EFFECT: effect,
                    n.STEP: int(data.get("step", 0)),
                }
            )
        turn.effects[key] = self._tracer.start_span(
            name, context=turn.context, kind=SpanKind.INTERNAL, attributes=attributes
        )
        turn.current_effect = key

    def _effect_completed(self, event: TurnEvent, turn: _Turn) -> None:
        data = event.data
        call_id, effect = str(data.get("call_id", "")), _effect(data)
        status = str(data.get("status", ""))
        span = turn.effects.pop(call_id, None)
        if span is None and "approval_id" in data:
            span = turn.effects.pop(f"approval:{data['approval_id']}", None)
            if span is not None:
                span.update_name(f"{n.EXECUTE_TOOL} {_tool(effect)}")
                span.set_attributes({n.TOOL_NAME: _tool(effect), n.TOOL_CALL_ID: call_id})
        if span is None:
            # Answered without running (not found, or never reached): a zero-length span.
            span = self._tracer.start_span(
                f"{n.EXECUTE_TOOL} {_tool(effect)}",
                context=turn.context,
                kind=SpanKind.INTERNAL,
                attributes={
                    **turn.common,
                    n.OPERATION: n.EXECUTE_TOOL,
                    n.TOOL_TYPE: "function",
                    n.TOOL_NAME: _tool(effect),
                    n.TOOL_CALL_ID: call_id,
                },
            )
        span.set_attributes({n.EFFECT: effect, n.EFFECT_STATUS: status})
        if status != "succeeded":
            _fail(span, status or "_OTHER")
        span.end()
        turn.current_effect = None

    def _effect_paused(self, event: TurnEvent, turn: _Turn) -> None:
        """The effect in flight waits for an approval: its span ends, not failed."""
        key = turn.current_effect
        span = turn.effects.pop(key, None) if key is not None else None
        if span is None:
            return
        span.set_attributes(
            {
                n.EFFECT_STATUS: "pending_approval",
                n.APPROVAL_ID: str(event.data.get("approval_id", "")),
            }
        )
        span.end()
        turn.current_effect = None


def _effect(data: Mapping[str, Any]) -> str:
    """The event's effect when it is an effect name, else ``UNKNOWN_EFFECT``: a span names
    no tool the model made up (its text, which may hold a secret)."""
    effect = data.get("effect")
    return effect if isinstance(effect, str) and is_effect_name(effect) else UNKNOWN_EFFECT


def _tool(effect: str) -> str:
    """The provider-visible name of ``effect`` (``UNKNOWN_EFFECT`` as it is)."""
    return UNKNOWN_EFFECT if effect == UNKNOWN_EFFECT else provider_name(effect)


def _chat_key(data: Mapping[str, Any]) -> str:
    """A step's model call and the summarizer call made while preparing it are apart."""
    step = int(data.get("step", 0))
    return f"summary:{step}" if data.get("summary") else str(step)


def _response_attributes(data: Mapping[str, Any]) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        n.RESPONSE_MODEL: str(data.get("model", "")),
        n.FINISH_REASONS: [str(data.get("finish_reason", ""))],
        n.INPUT_TOKENS: int(data.get("input_tokens", 0)),
        n.OUTPUT_TOKENS: int(data.get("output_tokens", 0)),
    }
    if data.get("response_id"):
        attributes[n.RESPONSE_ID] = str(data["response_id"])
    if data.get("cache_read_tokens"):
        attributes[n.CACHE_READ_TOKENS] = int(data["cache_read_tokens"])
    if data.get("cache_write_tokens"):
        attributes[n.CACHE_WRITE_TOKENS] = int(data["cache_write_tokens"])
    return attributes


def _fail(span: Span, error_type: str, description: str | None = None) -> None:
    span.set_attribute(n.ERROR_TYPE, error_type)
    span.set_status(StatusCode.ERROR, description)


def _end_all(turn: _Turn, error_type: str) -> None:
    for span in [*turn.open_spans(), turn.root]:
        _fail(span, error_type)
        span.end()
