"""Loopback HTTP servers that speak model providers' wire formats, for adapter tests.

``serve_wire()`` runs a scripted uvicorn/starlette server on 127.0.0.1;
``tests.wire.openai_chat`` and ``tests.wire.anthropic_messages`` build
payloads shaped like each API's real answers, and encode a neutral
``tests.wire.scenario.Answer`` in them; ``RecordingRetryPolicy`` makes
retries instant while recording the waits they asked for;
``tests.wire.rigs`` puts every ModelProvider adapter behind one interface for
the provider contract suite.
"""

from tests.wire.policy import RecordingRetryPolicy
from tests.wire.server import Reply, Seen, WireServer, json_reply, serve_wire, sse_reply, text_reply

__all__ = [
    "RecordingRetryPolicy",
    "Reply",
    "Seen",
    "WireServer",
    "json_reply",
    "serve_wire",
    "sse_reply",
    "text_reply",
]
