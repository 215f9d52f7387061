"""Bounded views of an effect result, one per audience."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hostkit.errors import bounded
from hostkit.freeze import thaw
from hostkit.types import EffectResult, EffectStatus, EffectViews, bounded_metadata

__all__ = [
    "MAX_MODEL_VIEW_CHARS",
    "MIN_SECRET_CHARS",
    "REDACTION_FAILED",
    "redact_secrets",
    "render_output",
    "result",
]

MAX_MODEL_VIEW_CHARS = 8_000
REDACTION_FAILED = "the result could not be rendered safely"
_MAX_SUMMARY = 300
# Shorter values cannot be redacted exactly without mangling ordinary text.
MIN_SECRET_CHARS = 6


def redact_secrets(text: str, secrets: Mapping[str, str]) -> str:
    """Replace every exact bound value with ``[redacted:NAME]`` (longest value first)."""
    for name, value in sorted(secrets.items(), key=lambda item: -len(item[1])):
        if value:
            text = text.replace(value, f"[redacted:{name}]")
    return text


def render_output(
    value: Any, *, limit: int = MAX_MODEL_VIEW_CHARS, secrets: Mapping[str, str] | None = None
) -> tuple[str, int, bool]:
    """Text for the model, its full size and whether it was truncated.

    Bound secrets are replaced before the text is cut, so no cut can leave
    part of a value behind.
    """
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(thaw(value), ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = repr(value)
    if secrets:
        text = redact_secrets(text, secrets)
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
    secrets: Mapping[str, str] | None = None,
) -> EffectResult:
    """Assemble an EffectResult whose views never contain raw arguments or bound secrets.

    Every exact value in ``secrets`` is replaced in the text before any view
    is cut, and each finished view is checked again. If building or checking
    any view fails, no partial view escapes: every view becomes the same
    fixed failed result (``REDACTION_FAILED``).
    """
    bound = dict(secrets or {})
    try:
        if bound:
            model_text = redact_secrets(model_text, bound)
            error = redact_secrets(error, bound) if error else error
        summary = bounded(error, _MAX_SUMMARY) if error else model_text[:_MAX_SUMMARY]
        common = {"effect": effect, "status": status, "started": started}
        views = EffectViews(
            model=model_text if status == "succeeded" else _unsuccessful(status, error, model_text),
            operator=bounded_metadata({**common, "summary": summary, "output_chars": size}),
            event=bounded_metadata({**common, "output_chars": size, "truncated": truncated}),
            durable=bounded_metadata({**common, "summary": summary}),
            debug=bounded_metadata({**common, "error": error, "truncated": truncated}),
        )
        if bound:
            _check_redacted(views, bound.values())
    except Exception:
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
    return EffectResult(
        call_id=call_id, effect=effect, status=status, started=started, error=error, views=views
    )


def _check_redacted(views: EffectViews, values: Any) -> None:
    """Raise if any string in any view still holds a bound value (fail closed)."""
    for text in _strings([views.model, views.operator, views.event, views.durable, views.debug]):
        if any(value and value in text for value in values):
            raise ValueError("a bound secret survived redaction")


def _strings(value: Any) -> Any:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _unsuccessful(status: EffectStatus, error: str | None, output: str) -> str:
    head = f"[{status}] {error or ''}".strip()
    return f"{head}\n{output}" if output else head
