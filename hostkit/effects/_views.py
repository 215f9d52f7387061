"""Bounded views of an effect result, one per audience."""

from __future__ import annotations

import json
from typing import Any

from hostkit.errors import bounded
from hostkit.freeze import thaw
from hostkit.types import EffectResult, EffectStatus, EffectViews, bounded_metadata

__all__ = ["MAX_MODEL_VIEW_CHARS", "REDACTION_FAILED", "render_output", "result"]

MAX_MODEL_VIEW_CHARS = 8_000
REDACTION_FAILED = "the result could not be rendered safely"
_MAX_SUMMARY = 300


def render_output(value: Any, *, limit: int = MAX_MODEL_VIEW_CHARS) -> tuple[str, int, bool]:
    """Text for the model, its full size and whether it was truncated."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(thaw(value), ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = repr(value)
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
) -> EffectResult:
    """Assemble an EffectResult whose views never contain raw arguments.

    If building any view fails, no partial view escapes: every view becomes
    the same fixed failed result (``REDACTION_FAILED``).
    """
    summary = bounded(error, _MAX_SUMMARY) if error else model_text[:_MAX_SUMMARY]
    common = {"effect": effect, "status": status, "started": started}
    try:
        views = EffectViews(
            model=model_text if status == "succeeded" else f"[{status}] {error or ''}".strip(),
            operator=bounded_metadata({**common, "summary": summary, "output_chars": size}),
            event=bounded_metadata({**common, "output_chars": size, "truncated": truncated}),
            durable=bounded_metadata({**common, "summary": summary}),
            debug=bounded_metadata({**common, "error": error, "truncated": truncated}),
        )
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
