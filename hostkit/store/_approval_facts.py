"""What an approval's view says beside its arguments, as every list of approvals says it.

A channel's approval prompt and ``hostkit approvals list`` show a call on one
line, next to what the Host knows of it: the tool's warning (``UNSANDBOXED``),
the Host secrets it binds, where it goes (its target) and that it replaces a
file. Both read these facts here, so an approver is told the same wherever
they answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hostkit.errors import bounded, bounded_hides
from hostkit.freeze import thaw

__all__ = ["ApprovalFacts", "approval_facts", "fact_hides", "fact_line"]

# A fact's target (JSON) shown on one line.
TARGET_CHARS = 200
# The approver view's key for a file write's diff, and the prefix of a bound secret's grant.
_DIFF = "diff"
_SECRET_GRANT = "secret.bind:"


@dataclass(frozen=True, slots=True)
class ApprovalFacts:
    """An approval's facts, each ``(name, one line)`` in the order said.

    ``hides`` is True when the facts leave part of the view out: a target cut
    or masked, or a file overwrite's diff, which one line cannot hold.
    """

    facts: tuple[tuple[str, str], ...]
    hides: bool


def approval_facts(view: Mapping[str, Any], *, target_chars: int = TARGET_CHARS) -> ApprovalFacts:
    """The warning, bound secrets, target and file replacement ``view`` records.

    The warning and the secrets' names are never cut short of what a person
    needs (300 and 100 characters); the target is kept to ``target_chars``.
    """
    facts: list[tuple[str, str]] = []
    hides = False
    warning = view.get("warning")
    if warning:
        facts.append(("warning", fact_line(str(warning), 300)))
    binds = [str(grant).removeprefix(_SECRET_GRANT) for grant in view.get("binds") or ()]
    if binds:
        named = ", ".join(fact_line(name, 100) for name in binds)
        facts.append(("binds secrets", fact_line(named, target_chars)))
        hides = fact_hides(named, target_chars)
    target = view.get("target")
    if target:
        shown = json.dumps(thaw(target), ensure_ascii=False, sort_keys=True, default=str)
        facts.append(("target", fact_line(shown, target_chars)))
        hides = hides or fact_hides(shown, target_chars)
    if _DIFF in view:
        facts.append(("replaces a file", "its diff is not shown here"))
        hides = True
    return ApprovalFacts(tuple(facts), hides)


def fact_line(text: str, limit: int) -> str:
    """Bounded, redacted, with control and format characters escaped (they reach chats).

    The bound holds for the escaped line: an invisible character's escape is up to
    ten characters long, so a bound counted before escaping could let it grow tenfold.
    """
    pieces = _escaped(bounded(text, limit))
    if sum(map(len, pieces)) <= limit:
        return "".join(pieces)
    kept, used = [], 1  # room for the "…"
    for piece in pieces:  # whole escapes only
        used += len(piece)
        if used > limit:
            break
        kept.append(piece)
    return "".join(kept) + "…"


def fact_hides(text: str, limit: int) -> bool:
    """Whether ``fact_line(text, limit)`` leaves part of ``text`` out: cut or masked."""
    return bounded_hides(text, limit) or sum(map(len, _escaped(bounded(text, limit)))) > limit


def _escaped(value: str) -> list[str]:
    return [ch if ch.isprintable() else ascii(ch)[1:-1] for ch in value]
