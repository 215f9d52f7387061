"""A provider-neutral answer that each wire module encodes the way its API would send it.

The provider contract suite scripts one ``Answer`` and expects every adapter
to report the same normalized ``ModelResponse`` from it, whether it arrives
whole (``complete``) or streamed; what differs per API (field names, where
usage and finish reasons live, how tool arguments are fragmented) is the
encoders' business, not the test's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hostkit.types import FinishReason, ModelResponse, ToolCall, Usage

__all__ = ["Answer", "Call"]

DEFAULT_USAGE = Usage(input_tokens=12, output_tokens=6)


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call as the wire carries it: arguments as JSON text, streamed in ``fragments``."""

    call_id: str
    name: str
    fragments: tuple[str, ...]

    @classmethod
    def of(cls, call_id: str, name: str, arguments: Mapping[str, Any]) -> Call:
        """Arguments as JSON, cut in two the way streams split them mid-token."""
        raw = json.dumps(dict(arguments))
        middle = len(raw) // 2
        return cls(call_id, name, (raw[:middle], raw[middle:]))

    @property
    def arguments_json(self) -> str:
        return "".join(self.fragments)


@dataclass(frozen=True, slots=True)
class Answer:
    """What the server answers: text in streamed ``deltas``, tool calls, finish, usage, ids.

    ``usage`` is in hostkit's normalized form (input includes the cache
    buckets); each encoder converts it to its API's convention.
    ``request_id`` is the request-id header (None: no header), ``response_id``
    the completion or message id in the body.
    """

    deltas: tuple[str, ...] = ()
    calls: tuple[Call, ...] = ()
    finish: FinishReason = "stop"
    usage: Usage = DEFAULT_USAGE
    request_id: str | None = "req_wire"
    response_id: str = "resp_wire"

    @property
    def text(self) -> str:
        return "".join(self.deltas)

    def response(self, *, provider: str, model: str) -> ModelResponse:
        """The normalized response an adapter named ``provider`` must report for this answer."""
        return ModelResponse(
            text=self.text,
            tool_calls=tuple(
                ToolCall(call.call_id, call.name, json.loads(call.arguments_json))
                for call in self.calls
            ),
            usage=self.usage,
            finish_reason=self.finish,
            provider=provider,
            model=model,
            provider_request_id=self.request_id or self.response_id,
        )
