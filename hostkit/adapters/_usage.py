"""What a provider's reported token counts are taken as: one normaliser for every adapter.

A usage block is the server's JSON, and the SDKs build their response objects
without validating it, so a field may arrive as ``"12k"``, ``3.7``, ``-5000``
or ``10**30`` (a whole-number float or ``true`` in a field an SDK types as an
integer arrives as that integer, converted by the SDK). Counts end up summed per
turn, compared against the context estimate and stored as 64-bit integers; a
value that is no count either fails the turn there or quietly corrupts the
calibration. So a count is taken only as an ``int`` (not a ``bool``) from 0 to
``MAX_TOKEN_COUNT``, the bound ``Usage`` holds every provider to;
anything else counts as 0, and ``unusable`` says what it was, in a few words
that never echo the value.
"""

from __future__ import annotations

from hostkit.types import MAX_TOKEN_COUNT

__all__ = ["token_count", "unusable"]


def token_count(value: object) -> int | None:
    """``value`` as a token count; None when it is none (see the module docstring)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= MAX_TOKEN_COUNT else None


def unusable(value: object) -> str:
    """What ``value`` (which ``token_count`` refused) was, without its content."""
    if isinstance(value, int) and not isinstance(value, bool):
        return "a negative int" if value < 0 else f"an int past {MAX_TOKEN_COUNT}"
    return f"a {type(value).__name__}"
