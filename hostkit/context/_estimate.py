"""Token estimation: a fast, deterministic default that errs on the high side."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

from hostkit.freeze import thaw
from hostkit.types import ModelMessage, ToolDefinition

__all__ = ["CharEstimator", "Estimator", "MESSAGE_OVERHEAD_TOKENS"]

# Role markers and separators every chat format adds around a message.
MESSAGE_OVERHEAD_TOKENS = 4


class Estimator(Protocol):
    """Estimates provider tokens for messages and tool schemas."""

    @property
    def estimator_id(self) -> str: ...

    def message(self, message: ModelMessage) -> int: ...

    def definitions(self, definitions: Sequence[ToolDefinition]) -> int: ...


class CharEstimator:
    """About one token per ``chars_per_token`` characters, rounded up, plus framing.

    BPE tokenizers average roughly four characters per token on English text
    and fewer on code or JSON; 3.5 keeps the estimate conservative.
    """

    def __init__(self, *, chars_per_token: float = 3.5) -> None:
        self._ratio = chars_per_token

    @property
    def estimator_id(self) -> str:
        return f"chars/{self._ratio:g}"

    def text(self, text: str) -> int:
        return int(-(-len(text) // self._ratio))

    def message(self, message: ModelMessage) -> int:
        size = self.text(message.content) + MESSAGE_OVERHEAD_TOKENS
        for call in message.tool_calls:
            size += self.text(call.name) + self.text(json.dumps(thaw(call.arguments)))
        return size

    def definitions(self, definitions: Sequence[ToolDefinition]) -> int:
        if not definitions:
            return 0
        payload = [
            {"name": d.name, "description": d.description, "parameters": thaw(d.parameters)}
            for d in definitions
        ]
        return self.text(json.dumps(payload)) + MESSAGE_OVERHEAD_TOKENS * len(definitions)
