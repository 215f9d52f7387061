"""Counted nouns for messages, logs and views: ``1 attempt``, ``2 attempts``."""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, noun: str) -> str:
    """``1 item``, ``2 items``, ``1,200 tokens``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"
