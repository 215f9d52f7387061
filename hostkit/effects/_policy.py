"""Effect policy: which effects an agent may run, resolved by the Host per agent."""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from hostkit.effects._catalog import provider_name
from hostkit.effects._rule_names import may_match_tools, quoted_rule, rule_problem
from hostkit.errors import ConfigError, InvalidValue
from hostkit.types import is_names

__all__ = ["EffectPolicy", "PolicyDecision", "provider_spelling"]

PolicyDecision = Literal["allow", "ask", "deny"]

# Bounds of one rule list: more globs or longer ones than any policy needs.
_MAX_RULES = 1000
_MAX_RULE_CHARS = 256
# How alike a rule and a tool name must be to call the rule a typo of it: a letter or two
# ("file.write", "files.wirte" for "files.write"), never a sibling ("notes.delete" for
# "notes.write", a tool the agent simply does not have).
_TYPO_CUTOFF = 0.85
_STRICTNESS = {"allow": 0, "ask": 1, "deny": 2}


@dataclass(frozen=True, slots=True)
class EffectPolicy:
    """Glob rules over dotted effect names: ``deny`` wins, then ``ask``, then ``allow``.

    An effect no rule matches is denied: authority is explicit. ``ask``
    effects are visible to the model but run only after an approval. A rule
    is taken exactly as written: one no effect or grant name can match
    (``FILES.*``, ``mcp.git.Delete-Repo``) is a ``ConfigError`` naming it and
    what to write instead.
    """

    allow: tuple[str, ...] = ("*",)
    deny: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # A bare string would be matched one character at a time: deny="terminal.run"
        # would deny nothing, and the effect would run unasked.
        for name in ("allow", "deny", "ask"):
            rules = getattr(self, name)
            if not is_names(rules, limit=_MAX_RULE_CHARS, items=_MAX_RULES):
                raise InvalidValue(
                    f"EffectPolicy.{name} must be a list of glob strings (at most {_MAX_RULES}, "
                    f"each 1-{_MAX_RULE_CHARS} characters), not {type(rules).__name__}"
                )
            object.__setattr__(self, name, tuple(rules))
            for rule in rules:
                problem = rule_problem(rule)
                if problem is not None:
                    # Refused, not respelled: the policy every view shows (its fingerprint,
                    # the catalog's reasons) is the one the operator wrote.
                    raise ConfigError(
                        f"the rule {quoted_rule(rule)} {problem}", key=f"policy.{name}"
                    )

    def decide(self, effect: str) -> PolicyDecision:
        if _matches(effect, self.deny):
            return "deny"
        if _matches(effect, self.ask):
            return "ask"
        if _matches(effect, self.allow):
            return "allow"
        return "deny"

    def decide_call(self, effect: str, grant: str | None = None) -> PolicyDecision:
        """The decision for one call of ``effect`` run under ``grant`` (an MCP tool's
        ``mcp.call:<server>``): the stricter of the two, so ``ask = ["mcp.call:git"]``
        asks before every tool of ``git`` and ``deny`` refuses them all."""
        decision = self.decide(effect)
        if grant is None or decision == "deny":
            return decision
        other = self.decide(grant)
        return other if _STRICTNESS[other] > _STRICTNESS[decision] else decision

    def explicitly_allows(self, effect: str) -> bool:
        """True when an ``allow`` rule written for ``effect``'s kind matches it.

        For a ``kind:target`` effect (``mcp.connect:git``) the rule must spell
        the whole kind before any wildcard (``mcp.connect:git``,
        ``mcp.connect:*``): connecting to an MCP server is asked unless a rule
        names it, so the default ``allow = ["*"]`` or a ``mcp.*`` meant for
        tool calls is no approval to start somebody's program.
        """
        kind, colon, _ = effect.partition(":")
        prefix = kind + colon
        return any(
            fnmatch.fnmatchcase(effect, rule) and _literal_prefix(rule).startswith(prefix)
            for rule in self.allow
        )

    def near_misses(
        self, effects: Iterable[str], *, mcp_server: str | None = None
    ) -> tuple[tuple[str, str, str], ...]:
        """Each ``(kind, rule, meant)``: an ``ask`` or ``deny`` rule that matches none of
        ``effects`` but is a slip from a rule that would, ``meant``.

        Such a rule is most often a typo, and then the effect it meant runs unasked.
        A slip is a rule one typo from an effect (``file.write`` for ``files.write``),
        a glob whose first dotted segment is one typo from a namespace of ``effects``
        (``file.*`` for ``files.*``) or a bare namespace (``files`` for ``files.*``);
        an effect as the model sees it is no slip but refused (``model_spellings``).
        A rule near none of them (a tool the agent simply does not have) is left out.
        Rules for MCP tools (``mcp.``) are left out too: those are discovered per session.
        With ``mcp_server``, only the rules written for that server's tools
        (``mcp.<server>.…`` before any wildcard) are checked, against the tools it
        listed.
        """
        names = list(effects)
        prefix = f"mcp.{mcp_server}." if mcp_server is not None else None
        misses = []
        for kind, rules in (("ask", self.ask), ("deny", self.deny)):
            for rule in rules:
                literal = _literal_prefix(rule)
                mine = literal.startswith(prefix) if prefix else not rule.startswith("mcp.")
                if not mine or any(fnmatch.fnmatchcase(name, rule) for name in names):
                    continue
                meant = _meant(rule, names, namespaces=prefix is None)
                if meant is not None:
                    misses.append((kind, rule, meant))
        return tuple(misses)

    def model_spellings(
        self, effects: Iterable[str], *, mcp_servers: Iterable[str] = ()
    ) -> tuple[tuple[str, str, str], ...]:
        """Each ``(kind, rule, meant)``: a rule that matches none of ``effects`` but matches
        how the model sees one of them (``files_*`` over ``files_write``, ``*_write``), so
        it would match nothing; ``meant`` is it in effect names (``files.*``).

        Called with every effect and grant of an agent once its tools are built: a glob
        parsing must accept (``*_write`` may be for a tool module's ``notes_write``) is
        refused then. A rule that may match a tool of one of ``mcp_servers`` (discovered
        per session, later) is left out.
        """
        names = list(effects)
        servers = list(mcp_servers)
        found = []
        for kind, rules in (("allow", self.allow), ("ask", self.ask), ("deny", self.deny)):
            for rule in rules:
                if any(fnmatch.fnmatchcase(name, rule) for name in names):
                    continue
                spelled = [name for name in names if fnmatch.fnmatchcase(provider_name(name), rule)]
                if spelled and not may_match_tools(rule, servers):
                    found.append((kind, rule, _dotted(rule, spelled)))
        return tuple(found)

    def rule_key(self, effect: str) -> str:
        """The rule an approval is cached under: the first matching ``ask`` glob."""
        return next((rule for rule in self.ask if fnmatch.fnmatchcase(effect, rule)), effect)

    def fingerprint(self) -> str:
        """A stable text form, part of the turn's pinned capability snapshot."""
        return (
            f"allow={','.join(sorted(self.allow))};deny={','.join(sorted(self.deny))};"
            f"ask={','.join(sorted(self.ask))}"
        )


def _meant(rule: str, names: list[str], *, namespaces: bool) -> str | None:
    """The rule ``rule`` is a slip from (see ``near_misses``), or None."""
    close = difflib.get_close_matches(rule, names, n=1, cutoff=_TYPO_CUTOFF)
    if close:
        return close[0]
    if not namespaces:
        return None
    first, dot, rest = rule.partition(".")
    if _literal_prefix(first) != first:
        return None  # a wildcard in the first segment: no namespace is named
    families = sorted({name.split(".", 1)[0] for name in names if "." in name})
    if not dot:
        near = first if first in families else _closest(first, families)
        return f"{near}.*" if near is not None else None
    near = None if first in families else _closest(first, families)
    return f"{near}.{rest}" if near is not None else None


def _closest(word: str, words: list[str]) -> str | None:
    close = difflib.get_close_matches(word, words, n=1, cutoff=_TYPO_CUTOFF)
    return close[0] if close else None


def provider_spelling(rule: str, effects: Iterable[str], mcp_servers: Iterable[str]) -> str | None:
    """The effect-name spelling of ``rule`` when it is written as the model sees a tool
    (``files_write``, ``mcp_git_git_commit``, ``files_*``), or None. Such a rule matches no
    effect: policies match effect names, and an ``ask`` written so would ask before nothing.

    A glob is one when it starts as the model sees a namespace of ``effects`` or a server
    of ``mcp_servers`` (``files_``, ``mcp_git_``); any other glob may match a tool
    module's undotted effects (``*_write`` over ``notes_write``), unknown until its tools
    are built (``EffectPolicy.model_spellings`` checks it then)."""
    if "." in rule:
        return None  # a dotted rule names effects
    servers = sorted(mcp_servers, key=len, reverse=True)  # the longest server name first
    literal = _literal_prefix(rule)
    server = next((name for name in servers if literal.startswith(f"mcp_{name}_")), None)
    if server is not None:
        return f"mcp.{server}.{rule.removeprefix(f'mcp_{server}_')}"
    spelled = [name for name in effects if fnmatch.fnmatchcase(provider_name(name), rule)]
    if literal != rule and not any(
        literal.startswith(f"{name.partition('.')[0]}_") for name in spelled if "." in name
    ):
        return None
    return _dotted(rule, spelled) if spelled else None


def _dotted(rule: str, spelled: list[str]) -> str:
    """``rule``, written as the model sees the effects ``spelled``, in effect names: the
    first of its underscores that, written as a dot, matches them all (``files_*`` is
    ``files.*``, ``*_write`` is ``*.write``); else the first of them."""
    for index, char in enumerate(rule):
        dotted = f"{rule[:index]}.{rule[index + 1 :]}"
        if char == "_" and all(fnmatch.fnmatchcase(name, dotted) for name in spelled):
            return dotted
    return spelled[0]


def _literal_prefix(rule: str) -> str:
    """The part of a glob before its first wildcard."""
    for index, char in enumerate(rule):
        if char in "*?[":
            return rule[:index]
    return rule


def _matches(effect: str, rules: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(effect, rule) for rule in rules)
