"""How an MCP server's tool name becomes an effect name, for its catalog entry and for the
policy rules that name it alike: a rule is written with the name the server uses."""

from __future__ import annotations

import re

from hostkit.effects._authored import is_effect_name

__all__ = ["mcp_effect_name", "mcp_rule", "snake_name"]

# Where a camelCase or PascalCase name starts a new word: deleteRepo, HTTPServer.
_WORD_START = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_GLOB = frozenset("*?[]!")


def snake_name(name: str, *, glob: bool = False) -> str:
    """``name`` in lower_snake_case: ``deleteRepo``, ``delete-repo`` and ``Delete Repo`` are
    all ``delete_repo``. With ``glob`` a rule's wildcards (``* ? [ ] !``) are kept."""
    words = _WORD_START.sub("_", name).lower()
    kept = "".join(
        ch if (ch.isascii() and ch.isalnum()) or (glob and ch in _GLOB) else "_" for ch in words
    ).strip("_")
    if kept and not (kept[0].isalpha() or (glob and kept[0] in _GLOB)):
        kept = f"t_{kept}"
    return kept


def mcp_effect_name(server: str, tool: str) -> str | None:
    """``mcp.<server>.<tool>`` with the tool's name in lower_snake_case (``snake_name``), or
    None when the result is no effect name (empty, too long)."""
    normalized = snake_name(tool)
    effect = f"mcp.{server}.{normalized}"
    return effect if normalized and is_effect_name(effect) else None


def mcp_rule(rule: str) -> str:
    """A policy rule over MCP tools (``mcp.<server>.<tool>``) with its tool part spelled as
    the effect names spell it: ``ask = ["mcp.git.deleteRepo"]`` asks before the tool the
    server calls ``deleteRepo`` (effect ``mcp.git.delete_repo``). Other rules are kept."""
    kind, dot, rest = rule.partition(".")
    server, dot2, tool = rest.partition(".")
    if kind != "mcp" or not dot or not dot2 or ":" in server or not tool:
        return rule
    normalized = snake_name(tool, glob=True)
    return f"mcp.{server}.{normalized}" if normalized else rule
