"""Which names a policy rule can match at all: a rule no effect or grant name can match is
refused, never read and then ignored.

Effect names are dotted lower-case ASCII words (``files.write``, ``mcp.git.delete_repo``);
grants are ``terminal.network``, ``secret.bind:<NAME>`` (an environment variable's name,
the only capitals), ``mcp.connect:<server>`` and ``mcp.call:<server>``. A rule is an
``fnmatch`` glob; whether one of these names can match it is decided exactly, on the
glob's tokens against a small automaton of the names, not by trying names.
"""

from __future__ import annotations

import fnmatch
import functools
import re
import string
from collections.abc import Iterable

from hostkit.effects._mcp import mcp_call_grant, mcp_connect_grant
from hostkit.effects._mcp_names import mcp_rule
from hostkit.errors import bounded

__all__ = ["may_match_tools", "quoted_rule", "rule_problem"]

# ``secret_grant``'s prefix (``_runtime`` imports the policy, so it cannot be imported here).
_SECRET = "secret.bind:"
_LOWER = frozenset(string.ascii_lowercase)
_WORD = _LOWER | frozenset(string.digits + "_")
_ENV_FIRST = frozenset(string.ascii_letters + "_")
_ENV = _ENV_FIRST | frozenset(string.digits)
# Every character any name has: what ``?`` and a bracket expression can stand for.
_ALPHABET = _ENV | frozenset(".:")
# A name's tail after its literal prefix, as (characters, next state) per state, state 1
# accepting: dotted words (an effect), one word (a server, an MCP tool), an environment
# variable.
_Tail = dict[int, tuple[tuple[frozenset[str], int], ...]]
_TAILS: dict[str, _Tail] = {
    "effect": {0: ((_LOWER, 1),), 1: ((_WORD, 1), (frozenset("."), 0))},
    "word": {0: ((_LOWER, 1),), 1: ((_WORD, 1),)},
    "env": {0: ((_ENV_FIRST, 1),), 1: ((_ENV, 1),)},
}
# Names, each a (literal prefix, tail); and a position in them: which name, how far in.
_Language = tuple[tuple[str, str], ...]
_State = tuple[int, int]
# Every effect and grant name: (literal prefix, tail).
_NAMES: _Language = (
    ("", "effect"),
    (_SECRET, "env"),
    (mcp_connect_grant(""), "word"),
    (mcp_call_grant(""), "word"),
)
_SHAPES = (
    "effect names are dotted words of a-z, 0-9 and _ ('files.write', 'mcp.git.*'); grants "
    "are terminal.network, secret.bind:<NAME>, mcp.connect:<server> and mcp.call:<server>"
)
# Of a rule quoted in a refusal: enough to find it in the file (a rule has up to 256).
_QUOTED_CHARS = 100
# Checked rules remembered: a policy is built again from the same few rules for each
# generation, agent and grant decided.
_CACHED_RULES = 4096


@functools.lru_cache(maxsize=_CACHED_RULES)
def rule_problem(rule: str) -> str | None:
    """Why no effect or grant name can ever match ``rule``, and what to write instead
    (None: one can). Capitals are refused outside the ``<NAME>`` of ``secret.bind:<NAME>``
    even where a glob could reach a secret's name (``*Delete*``): such a rule is written
    for effects, and would guard none of them."""
    if rule != rule.lower() and not rule.startswith(_SECRET):
        why = "effect names are lower case (capitals only follow secret.bind:)"
    elif _can_match(rule, _NAMES):
        return None
    elif any(char.isspace() for char in rule):
        why = "names have no spaces"
    elif not rule.isascii():
        why = "names are ASCII"
    else:
        why = "no effect or grant name has its shape"
    fixed = _respelled(rule)
    if fixed != rule and rule_problem(fixed) is None:
        return f"can never match: {why}; write {fixed!r}"
    return f"can never match: {why}; {_SHAPES}"


def quoted_rule(rule: str) -> str:
    """``rule`` as a refusal quotes it: its ``repr`` (a space or a control character
    shows), bounded."""
    return bounded(repr(rule), _QUOTED_CHARS)


def may_match_tools(rule: str, servers: Iterable[str]) -> bool:
    """Whether ``rule`` can match a tool of one of the MCP ``servers`` (``mcp.<server>.<tool>``),
    which are discovered per session and so are not known when the policy is checked."""
    return _can_match(rule, tuple((f"mcp.{server}.", "word") for server in servers))


def _respelled(rule: str) -> str:
    """``rule`` as an effect or grant name would spell it: trimmed and lower-cased (a
    secret's ``<NAME>`` kept), an MCP tool part spelled as the effect names spell tools."""
    trimmed = rule.strip()
    kind, colon, name = trimmed.partition(":")
    if colon and kind.lower() == _SECRET[:-1]:
        return f"{_SECRET}{name}"
    return mcp_rule(trimmed.lower())


def _can_match(rule: str, language: _Language) -> bool:
    """Whether some name of ``language`` matches the glob ``rule`` as ``fnmatchcase`` does."""
    states = frozenset((index, 0) for index in range(len(language)))
    for token in _tokens(rule):
        states = _after(states, token, language)
        if not states:
            return False
    return any(_accepts(state, language) for state in states)


@functools.lru_cache(maxsize=_CACHED_RULES)
def _after(
    states: frozenset[_State], token: frozenset[str] | None, language: _Language
) -> frozenset[_State]:
    """The states one token leads to from ``states`` (remembered: rules repeat a few)."""
    if token is None:
        return frozenset(_reachable(states, language))
    return frozenset(
        after for state in states for chars, after in _steps(state, language) if chars & token
    )


def _tokens(rule: str) -> list[frozenset[str] | None]:
    """``rule``'s glob as tokens: per character of a name, the characters it may be (a
    literal, ``?``, a bracket expression, ended as ``fnmatch.translate`` ends one), or
    None for a run of ``*``."""
    tokens: list[frozenset[str] | None] = []
    index, size = 0, len(rule)
    while index < size:
        char = rule[index]
        index += 1
        if char == "*":
            if not tokens or tokens[-1] is not None:
                tokens.append(None)
        elif char == "?":
            tokens.append(_ALPHABET)
        elif char == "[":
            end = index + (index < size and rule[index] == "!")
            end += end < size and rule[end] == "]"
            end = rule.find("]", end)
            if end < 0:
                tokens.append(frozenset())  # a literal "[", which no name has
                continue
            tokens.append(_bracket(rule[index - 1 : end + 1]))
            index = end + 1
        else:
            tokens.append(frozenset(char) & _ALPHABET)
    return tokens


@functools.lru_cache(maxsize=_CACHED_RULES)
def _bracket(expression: str) -> frozenset[str]:
    """The characters of names the bracket expression ``expression`` (``[a-z]``) matches."""
    matches = re.compile(fnmatch.translate(expression)).match
    return frozenset(char for char in _ALPHABET if matches(char))


def _steps(state: _State, language: _Language) -> tuple[tuple[frozenset[str], _State], ...]:
    """Each (characters, next state) from ``state``: a position in a name's literal prefix,
    then one of its tail's states."""
    index, position = state
    prefix, tail = language[index]
    if position < len(prefix):
        return ((frozenset(prefix[position]), (index, position + 1)),)
    return tuple(
        (chars, (index, len(prefix) + after))
        for chars, after in _TAILS[tail][position - len(prefix)]
    )


def _accepts(state: _State, language: _Language) -> bool:
    index, position = state
    return position == len(language[index][0]) + 1


def _reachable(states: frozenset[_State], language: _Language) -> set[_State]:
    """Every state ``*`` leads to from ``states``: any number of any characters."""
    seen = set(states)
    todo = list(states)
    while todo:
        for _, after in _steps(todo.pop(), language):
            if after not in seen:
                seen.add(after)
                todo.append(after)
    return seen
