"""How an MCP server's tool name becomes an effect name: for its catalog entry, and for the
rule a refused policy rule in the server's spelling is told to be written as."""

from __future__ import annotations

from hostkit.effects._authored import is_effect_name

__all__ = ["effect_spelling", "mcp_effect_name", "mcp_rule"]

# A rule's wildcards, kept as written; a bracket expression is kept whole (``[a-z]``).
_WILDCARDS = frozenset("*?")


def effect_spelling(name: str, *, glob: bool = False) -> str:
    """``name`` as an effect name spells it: lower-cased, every character that is not an
    ASCII letter or digit an underscore (``Delete-Repo`` is ``delete_repo``, ``deleteRepo``
    is ``deleterepo``), without leading or trailing underscores, ``t_`` before a leading
    digit. With ``glob``, a rule's ``*`` and ``?`` and its bracket expressions are kept."""
    spelled: list[str] = []
    bracket = False
    for ch in name.lower():
        if bracket or (glob and ch == "["):
            spelled.append(ch)
            bracket = ch != "]" or (spelled[-2:-1] == ["["])
        elif (ch.isascii() and ch.isalnum()) or (glob and ch in _WILDCARDS):
            spelled.append(ch)
        else:
            spelled.append("_")
    kept = "".join(spelled).strip("_")
    if kept and not (kept[0].isalpha() or (glob and not kept[0].isdigit())):
        kept = f"t_{kept}"
    return kept


def mcp_effect_name(server: str, tool: str) -> str | None:
    """``mcp.<server>.<tool>`` with the tool's name spelled as effect names are
    (``effect_spelling``), or None when the result is no effect name (empty, too long)."""
    spelled = effect_spelling(tool)
    effect = f"mcp.{server}.{spelled}"
    return effect if spelled and is_effect_name(effect) else None


def mcp_rule(rule: str) -> str:
    """A policy rule over MCP tools (``mcp.<server>.<tool>``) with its tool part spelled as
    the effect names spell it: ``mcp.git.delete_repo`` for ``mcp.git.Delete-Repo``, a rule
    in the server's own spelling that matches nothing and is refused (what to write
    instead). Wildcards and bracket expressions are kept; other rules are kept whole."""
    kind, dot, rest = rule.partition(".")
    server, dot2, tool = rest.partition(".")
    if kind != "mcp" or not dot or not dot2 or ":" in server or not tool:
        return rule
    spelled = effect_spelling(tool, glob=True)
    return f"mcp.{server}.{spelled}" if spelled else rule
