"""Effect policy: which effects an agent may run, resolved by the Host per agent."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Literal

__all__ = ["EffectPolicy", "PolicyDecision"]

PolicyDecision = Literal["allow", "deny"]


@dataclass(frozen=True, slots=True)
class EffectPolicy:
    """Glob rules over dotted effect names; a matching ``deny`` always wins.

    An effect no ``allow`` rule matches is denied: authority is explicit.
    """

    allow: tuple[str, ...] = ("*",)
    deny: tuple[str, ...] = ()

    def decide(self, effect: str) -> PolicyDecision:
        if any(fnmatch.fnmatchcase(effect, rule) for rule in self.deny):
            return "deny"
        if any(fnmatch.fnmatchcase(effect, rule) for rule in self.allow):
            return "allow"
        return "deny"

    def fingerprint(self) -> str:
        """A stable text form, part of the turn's pinned capability snapshot."""
        return f"allow={','.join(sorted(self.allow))};deny={','.join(sorted(self.deny))}"
