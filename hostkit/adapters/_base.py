"""``ProviderBase``: what every ModelProvider adapter holds, and how it closes.

The scripted model and the SDK-backed adapters all carry a name, a model id and
normalized limits, and all close as anyio resources (``async with`` or an
idempotent ``aclose``). This module holds only that, so the scripted model
does not depend on anything SDK-shaped.
"""

from __future__ import annotations

from anyio.abc import AsyncResource

from hostkit.errors import InvalidValue
from hostkit.types import (
    MAX_MODEL_ID_CHARS,
    NO_ATTACHMENTS,
    AttachmentSupport,
    ModelLimits,
    is_text,
)

__all__ = ["ProviderBase"]


class ProviderBase(AsyncResource):
    """The identity and the resource protocol of a ``ModelProvider`` adapter.

    Subclasses implement ``complete``, ``stream`` and ``aclose``; leaving the
    ``async with`` block calls ``aclose``.
    """

    def __init__(
        self,
        *,
        name: str,
        model: str,
        limits: ModelLimits,
        attachments: AttachmentSupport = NO_ATTACHMENTS,
    ) -> None:
        # Checked here, for every adapter: a wrong value would fail much later, at the
        # Host's open or in the middle of a turn, as some other error.
        for key, text in (("name", name), ("model", model)):
            if not is_text(text, limit=MAX_MODEL_ID_CHARS):
                raise InvalidValue(
                    f"a provider's {key} must be text of 1 to {MAX_MODEL_ID_CHARS} characters"
                )
        if not isinstance(limits, ModelLimits):
            raise InvalidValue(f"limits must be a ModelLimits, not {type(limits).__name__}")
        if not isinstance(attachments, AttachmentSupport):
            raise InvalidValue(
                f"attachments must be an AttachmentSupport, not {type(attachments).__name__}"
            )
        self._name = name
        self._model = model
        self._limits = limits
        self._attachments = attachments

    @property
    def name(self) -> str:
        """Provider id used in usage records and calibration."""
        return self._name

    @property
    def model(self) -> str:
        """The model id requests are sent to."""
        return self._model

    @property
    def limits(self) -> ModelLimits:
        """Normalized limits the ContextManager budgets against."""
        return self._limits

    @property
    def attachment_support(self) -> AttachmentSupport:
        """The attachments this adapter sends natively; TurnExecution refuses the rest."""
        return self._attachments
