"""Bounded views of an effect result, one per audience."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hostkit.effects._redaction import MIN_SECRET_CHARS, Redactor, safe_text
from hostkit.errors import bounded
from hostkit.freeze import FrozenMap
from hostkit.types import EffectResult, EffectStatus, EffectViews, bounded_data

__all__ = [
    "MAX_ERROR_CHARS",
    "MAX_MODEL_VIEW_CHARS",
    "MIN_SECRET_CHARS",
    "REDACTION_FAILED",
    "failed_safely",
    "redact_secrets",
    "render_output",
    "result",
]

MAX_MODEL_VIEW_CHARS = 8_000
# A tool's own error text (a ToolOutcome's, an exception's) is cut to this in the model view.
MAX_ERROR_CHARS = 2_000
REDACTION_FAILED = "the result could not be rendered safely"
_MAX_SUMMARY = 300


def redact_secrets(text: str, secrets: Mapping[str, str]) -> str:
    """Replace every spelling of each bound value with ``[redacted:NAME]``.

    Spellings are the value itself, each line of it (at least
    ``MIN_SECRET_CHARS`` long) with any line ending, and their JSON- and
    repr-escaped forms; any piece of 8 or more characters of one is masked
    too. See ``hostkit.effects._redaction``. Each call builds a redactor (a
    PEM key's spellings take milliseconds): a tool masking its bound values
    calls ``ToolContext.redact_bound``, built once per call from kept spellings.
    """
    return Redactor.of(secrets).text(text)


def render_output(
    value: Any, *, limit: int = MAX_MODEL_VIEW_CHARS, redactor: Redactor | None = None
) -> tuple[str, int, bool]:
    """Text for the model, its full size and whether it was truncated.

    A structured value is redacted leaf by leaf (keys too) before it is
    encoded, so JSON escaping never hides a secret; the encoded text is
    redacted again, and all of it before the cut, so no cut can leave part of
    a value behind. Lone surrogates are made safe.
    """
    redactor = redactor or Redactor()
    if isinstance(value, str):
        text = redactor.text(value)
    else:
        text = redactor.text(json.dumps(redactor.value(value), ensure_ascii=False))
    text = safe_text(text)
    if len(text) <= limit:
        return text, len(text), False
    return text[:limit] + f"\n[truncated: {len(text) - limit} more characters]", len(text), True


def result(
    *,
    call_id: str,
    effect: str,
    status: EffectStatus,
    started: bool,
    model_text: str,
    error: str | None = None,
    size: int = 0,
    truncated: bool = False,
    redactor: Redactor | None = None,
) -> EffectResult:
    """Assemble an EffectResult whose views never contain raw arguments or secrets.

    Every spelling ``redactor`` knows is masked in the text before any view
    is cut, lone surrogates are made safe, and each finished view is checked
    again for every spelling. If building or checking any view fails, no
    partial view escapes: every view becomes the same fixed failed result
    (``REDACTION_FAILED``).
    """
    redactor = redactor or Redactor()
    try:
        model_text = safe_text(redactor.text(model_text))
        if error:
            error = safe_text(redactor.text(error, limit=MAX_ERROR_CHARS))
        summary = bounded(error, _MAX_SUMMARY) if error else model_text[:_MAX_SUMMARY]
        # One bounding pass over every field the four views show (each field is bounded
        # alone), then each view picks its own: what bounding each view apart gave.
        cut = bounded_data(
            {
                "effect": effect,
                "status": status,
                "started": started,
                "summary": summary,
                "output_chars": size,
                "truncated": truncated,
                "error": error,
            }
        )

        def view(*names: str) -> FrozenMap:
            return FrozenMap({name: cut[name] for name in ("effect", "status", "started", *names)})

        views = EffectViews(
            model=model_text if status == "succeeded" else _unsuccessful(status, error, model_text),
            operator=view("summary", "output_chars"),
            event=view("output_chars", "truncated"),
            durable=view("summary"),
            debug=view("error", "truncated"),
        )
        if redactor:
            _check_redacted(views, error, redactor)
    except Exception:
        return failed_safely(call_id=call_id, effect=effect, started=started)
    return EffectResult(
        call_id=call_id, effect=effect, status=status, started=started, error=error, views=views
    )


def failed_safely(*, call_id: str, effect: str, started: bool) -> EffectResult:
    """The fixed ``failed`` result that replaces every view when one could not be made safe."""
    fixed = {"effect": effect, "status": "failed", "error": REDACTION_FAILED}
    return EffectResult(
        call_id=call_id,
        effect=effect,
        status="failed",
        started=started,
        error=REDACTION_FAILED,
        views=EffectViews(
            model=f"[failed] {REDACTION_FAILED}",
            operator=fixed,
            event=fixed,
            durable=fixed,
            debug=fixed,
        ),
    )


def _check_redacted(views: EffectViews, error: str | None, redactor: Redactor) -> None:
    """Raise if any string in any view still holds any spelling of a secret (fail closed).

    The Host's own vocabulary (view keys, the catalog's effect name, the
    status) is not tool text; a derived value that happens to equal it must
    not fail an honest result.
    """
    audiences = [views.model, error or "", views.operator, views.event, views.durable, views.debug]
    for text in _strings(audiences):
        if redactor.leaked(text):
            raise ValueError("a secret survived redaction")


# Host-chosen, never model text: a result's effect is its catalog entry's name (a call
# naming no entry never reaches the pipeline; the turn records it as UNKNOWN_EFFECT).
_HOST_FIELDS = frozenset({"effect", "status"})


def _strings(value: Any) -> Any:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if key not in _HOST_FIELDS:
                yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _unsuccessful(status: EffectStatus, error: str | None, output: str) -> str:
    head = f"[{status}] {error or ''}".strip()
    return f"{head}\n{output}" if output else head
