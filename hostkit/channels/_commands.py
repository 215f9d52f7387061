"""Channel commands: the approval answers a user types (or taps) in a conversation.

``approve K7QX2M`` / ``deny K7QX2M`` (the word in any case, the code as
``hostkit.types.approval_code`` prints it: six base32 characters) is a
``command`` envelope whose payload is the normalised text; everything else is
an ordinary ``message``. Normalising here means the answering path compares
one spelling only.
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = ["classify", "parse_command"]

_COMMAND = re.compile(r"\s*(approve|deny)\s+([A-Za-z2-7]{6})\s*", re.IGNORECASE)


def parse_command(text: str) -> str | None:
    """The normalised command (``"approve K7QX2M"``) this text is, or None."""
    match = _COMMAND.fullmatch(text)
    if match is None:
        return None
    return f"{match.group(1).lower()} {match.group(2).upper()}"


def classify(text: str) -> tuple[Literal["message", "command"], str]:
    """``(kind, payload)`` for a user's text: a normalised command, or the text as is."""
    command = parse_command(text)
    if command is None:
        return "message", text
    return "command", command
