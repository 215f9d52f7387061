"""A scripted model that names its calls the way an OpenAI-compatible server that sends no
ids is read: ``call_<position>`` per response (``hostkit/adapters/_streaming.py``), so the
same id comes back in every step."""

from __future__ import annotations

import dataclasses

from hostkit.testing import CallTools, Reply, ScriptedModel
from hostkit.types import ModelRequest, ModelResponse

__all__ = ["PositionalIds"]


class PositionalIds(ScriptedModel):
    """``ScriptedModel`` whose call ids are unique per response only: ``call_0``, ``call_1``…"""

    def _respond(self, request: ModelRequest, step: Reply | CallTools) -> ModelResponse:
        # ScriptedModel's one response builder (complete and stream both use it).
        response = super()._respond(request, step)
        calls = tuple(
            dataclasses.replace(call, call_id=f"call_{position}")
            for position, call in enumerate(response.tool_calls)
        )
        return dataclasses.replace(response, tool_calls=calls)
