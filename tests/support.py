"""Small helpers shared by test modules."""

from __future__ import annotations

from pathlib import Path

import anyio

from hostkit.types import ConversationFacts


def facts(
    conversation: str, principal: str = "user", channel: str = "webhook"
) -> ConversationFacts:
    """Authenticated adapter facts for a test conversation."""
    return ConversationFacts(
        channel=channel, conversation_key=conversation, principal_key=principal
    )


async def file_bytes(path: Path) -> bytes:
    """Read a file without blocking the event loop."""
    return await anyio.Path(path).read_bytes()
