"""``ProviderBase``: what every ModelProvider adapter holds, and how it closes.

The scripted model and the SDK-backed adapters all carry a name, a model id and
normalized limits, and all close as anyio resources (``async with`` or an
idempotent ``aclose``). This module holds only that, so the scripted model
does not depend on anything SDK-shaped.
"""

from __future__ import annotations

from anyio.abc import AsyncResource

from hostkit.types import NO_ATTACHMENTS, AttachmentSupport, ModelLimits

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
