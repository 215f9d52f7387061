"""The bounds every adapter holds one model response to, counted while it arrives.

A model (or a server in front of one) decides how many tool calls a response
holds, how long their names and ids are and how many bytes of text and
argument JSON it sends; the Host then runs or records every call, each in its
own transaction. ``ResponseMeter`` counts a response as an adapter assembles
it and raises ``OverBound`` the moment one bound is passed, before the rest
arrives: the SDK skeleton's ``Draft`` and ``ScriptedModel`` both count
through it, and map ``OverBound`` to ``refused``'s ``ProviderError``, so a
response past a bound fails its turn before any of its calls runs or is kept.

The bounds are ``hostkit.types``' (``MAX_TOOL_CALLS``, ``MAX_TOOL_NAME_CHARS``,
``MAX_CALL_ID_CHARS``, ``MAX_RESPONSE_BYTES``); why those numbers is said there.
"""

from __future__ import annotations

from dataclasses import dataclass

from hostkit.errors import ProviderError
from hostkit.types import (
    MAX_CALL_ID_CHARS,
    MAX_RESPONSE_BYTES,
    MAX_TOOL_CALLS,
    MAX_TOOL_NAME_CHARS,
)

__all__ = ["OverBound", "ResponseMeter", "over_bound", "refused"]


class OverBound(Exception):
    """A response passed one of its bounds; the message says which (never the content)."""


def refused(exc: OverBound, *, provider: str) -> ProviderError:
    """The typed error for a response past a bound: arrived (status 200), never retried."""
    return ProviderError(f"response refused: {exc}", provider=provider, status=200)


def over_bound(exc: BaseException) -> OverBound | None:
    """The ``OverBound`` that ``exc`` is or was raised from, if any.

    A bound counted below an SDK (``hostkit.adapters._wire``) fails a read the
    SDK may wrap in its own connection error; unwrapped, it is still a refusal.
    """
    seen: BaseException | None = exc
    for _ in range(8):  # a cause chain is short; a cycle must not loop
        if seen is None or isinstance(seen, OverBound):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


@dataclass(slots=True)
class ResponseMeter:
    """Counts one response's tool calls and bytes against the bounds as they arrive.

    ``max_bytes`` bounds the UTF-8 bytes of text and argument JSON together;
    every limit defaults to its ``hostkit.types`` bound.
    """

    max_tool_calls: int = MAX_TOOL_CALLS
    max_name_chars: int = MAX_TOOL_NAME_CHARS
    max_call_id_chars: int = MAX_CALL_ID_CHARS
    max_bytes: int = MAX_RESPONSE_BYTES
    calls: int = 0
    size: int = 0

    def open_call(self) -> None:
        """Count one more tool call; raise ``OverBound`` past ``max_tool_calls``."""
        if self.calls >= self.max_tool_calls:
            raise OverBound(f"more than {self.max_tool_calls} tool calls")
        self.calls += 1

    def name(self, name: str) -> str:
        """``name`` when it can name a tool; raise ``OverBound`` when it is longer."""
        if len(name) > self.max_name_chars:
            raise OverBound(f"a tool name longer than {self.max_name_chars} characters")
        return name

    def call_id(self, call_id: str) -> str:
        """``call_id`` when it is short enough; raise ``OverBound`` when it is longer."""
        if len(call_id) > self.max_call_id_chars:
            raise OverBound(f"a tool call id longer than {self.max_call_id_chars} characters")
        return call_id

    def add(self, text: str) -> str:
        """Count ``text`` (a text delta, an argument fragment); ``OverBound`` past the bytes."""
        # A lone surrogate (a JSON "\\ud83d" escape) counts; it does not fail the count.
        self.size += len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        if self.size > self.max_bytes:
            raise OverBound(f"more than {self.max_bytes} bytes of text and tool arguments")
        return text
