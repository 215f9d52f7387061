"""Effect policy: which effects an agent may run, resolved by the Host per agent."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Literal

__all__ = ["EffectPolicy", "PolicyDecision"]

PolicyDecision = Literal["allow", "ask", "deny"]


@dataclass(frozen=True, slots=True)
class EffectPolicy:
    """Glob rules over dotted effect names: ``deny`` wins, then ``ask``, then ``allow``.

    An effect no rule matches is denied: authority is explicit. ``ask``
    effects are visible to the model but run only after an approval.
    """

    allow: tuple[str, ...] = ("*",)
    deny: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()

    def decide(self, effect: str) -> PolicyDecision:
        if _matches(effect, self.deny):
            return "deny"
        if _matches(effect, self.ask):
            return "ask"
        if _matches(effect, self.allow):
            return "allow"
        return "deny"

    def explicitly_allows(self, effect: str) -> bool:
        """True when an ``allow`` rule other than the catch-all ``*`` matches ``effect``.

        Connecting to an MCP server is asked unless a rule names it: the
        default ``allow = ["*"]`` is no approval to start someone's program.
        """
        return _matches(effect, tuple(rule for rule in self.allow if rule != "*"))

    def rule_key(self, effect: str) -> str:
        """The rule an approval is cached under: the first matching ``ask`` glob."""
        return next((rule for rule in self.ask if fnmatch.fnmatchcase(effect, rule)), effect)

    def fingerprint(self) -> str:
        """A stable text form, part of the turn's pinned capability snapshot."""
        return (
            f"allow={','.join(sorted(self.allow))};deny={','.join(sorted(self.deny))};"
            f"ask={','.join(sorted(self.ask))}"
        )


def _matches(effect: str, rules: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(effect, rule) for rule in rules)
