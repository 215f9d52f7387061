"""A step's tool calls as the Host keeps and reports them.

The provider chose each call's id and the model typed each call's name: both
are text from outside, and a prompt injection can make either hold a secret.
Only what the Host can vouch for reaches the transcript's ids, the turn's
events and records, and the spans made from them.
"""

from __future__ import annotations

import dataclasses

from hostkit.effects import PreparedEffectCatalog, Redactor
from hostkit.types import (
    MAX_CALL_ID_CHARS,
    UNKNOWN_EFFECT,
    ModelResponse,
    ToolCall,
    is_text,
    new_id,
)

__all__ = ["accepted", "effect_of", "tool_name", "with_kept"]


def accepted(response: ModelResponse, redactor: Redactor) -> ModelResponse:
    """``response`` with each call id the Host would not keep replaced by one it mints.

    Replaced: an id that is empty, too long, not printable, a repeat of an earlier
    call's id in the response (each result answers one call by id), or one holding
    any spelling or piece of a secret ``redactor`` masks. The replacement is the id
    everywhere after (the assistant message, the result answering it, events, effects).
    """
    taken: set[str] = set()
    calls: list[ToolCall] = []
    for call in response.tool_calls:
        call_id = call.call_id
        if call_id in taken or not _keepable(call_id, redactor):
            call_id = new_id("call")
        taken.add(call_id)
        calls.append(
            call if call_id == call.call_id else dataclasses.replace(call, call_id=call_id)
        )
    if all(new is old for new, old in zip(calls, response.tool_calls, strict=True)):
        return response
    return dataclasses.replace(response, tool_calls=tuple(calls))


def effect_of(catalog: PreparedEffectCatalog, name: str) -> str:
    """The effect a provider-visible tool name stands for in this turn, or ``UNKNOWN_EFFECT``."""
    ref = catalog.resolve(name)
    return UNKNOWN_EFFECT if ref is None else ref.effect


def tool_name(catalog: PreparedEffectCatalog, name: str) -> str:
    """``name`` when this turn's catalog has it, else ``UNKNOWN_EFFECT``."""
    return name if catalog.resolve(name) is not None else UNKNOWN_EFFECT


def with_kept(
    response: ModelResponse, recorded: tuple[ToolCall, ...], kept: tuple[ToolCall, ...]
) -> ModelResponse:
    """``response`` with the calls ``kept_calls`` replaced (markers made from the recorded,
    redacted arguments); the others run with their arguments as sent."""
    calls = tuple(
        call if new is old else new
        for call, old, new in zip(response.tool_calls, recorded, kept, strict=True)
    )
    return dataclasses.replace(response, tool_calls=calls)


def _keepable(call_id: str, redactor: Redactor) -> bool:
    return (
        is_text(call_id, limit=MAX_CALL_ID_CHARS)
        and str.isprintable(call_id)
        and not redactor.leaked(call_id)
    )
