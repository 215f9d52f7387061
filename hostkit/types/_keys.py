"""Identity keys: the one bound every conversation key and principal id is held to.

A key is checked where it is composed, against the same bound the inbox, the
scope, turn admission and the store hold it to: a key built from parts that
each fit, but that together do not, is refused before anything is written,
naming the parts the caller gave, instead of being accepted on one path and
refused on a later one (a webhook answered 200 and then dead-lettered, a
scheduled run's binding written and then refused).
"""

from __future__ import annotations

from hostkit.errors import InvalidValue
from hostkit.types._bounds import is_text

__all__ = ["MAX_KEY_CHARS", "check_key", "joined_key", "principal_id_of"]

# A conversation key ("<chat>:<user>", "<schedule_id>/<run_id>") and a principal id
# ("<channel>:<principal_key>"). TEXT columns on both adapters; the PostgreSQL indexes
# that hold one (with a channel id or a request id) stay far below the B-tree row limit.
MAX_KEY_CHARS = 256


def check_key(name: str, value: object) -> str:
    """``value`` as a key of 1 to ``MAX_KEY_CHARS`` characters of valid text; else ``InvalidValue``.

    One check for every holder of a key, so none of them refuses what another accepted.
    """
    if not is_text(value, limit=MAX_KEY_CHARS):  # a NUL or lone surrogate: not every store holds it
        raise InvalidValue(
            f"{name} must be a non-empty string of at most {MAX_KEY_CHARS} characters of valid text"
        )
    return str.__str__(value)


def joined_key(separator: str, *parts: tuple[str, str]) -> str:
    """The ``(parameter, value)`` parts joined by ``separator``, checked as one key.

    Only the first part may contain ``separator``: the key then splits from its
    end into exactly one tuple of parts, so two different inputs never share a
    key, and every accepted input keeps the key it always had. ``InvalidValue``
    names the caller's parameters, never the key.
    """
    names = " and ".join(name for name, _ in parts)
    for name, value in parts[1:]:
        if separator in value:
            raise InvalidValue(
                f"{name} must not contain {separator!r} (it separates the parts of a key)"
            )
    key = separator.join(value for _, value in parts)
    if len(key) > MAX_KEY_CHARS:
        room = MAX_KEY_CHARS - len(separator) * (len(parts) - 1)
        raise InvalidValue(
            f"{names} together must be at most {room} characters "
            f"(their key is at most {MAX_KEY_CHARS})"
        )
    return key


def principal_id_of(channel: str, principal_key: str) -> str:
    """The principal id ``<channel>:<principal_key>``, or ``InvalidValue`` naming the key.

    A channel id has no ':', so the id splits at its first ':' unambiguously;
    only its length needs the check.
    """
    room = MAX_KEY_CHARS - len(channel) - 1
    if len(principal_key) > room:
        raise InvalidValue(
            f"principal_key must be at most {room} characters on channel {channel!r} "
            f"(the principal id '<channel>:<principal_key>' is at most {MAX_KEY_CHARS})"
        )
    return f"{channel}:{principal_key}"
