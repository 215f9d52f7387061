"""The secret-safe MCP declaration diff an operator reviews before a promotion.

An MCP server runs code or reaches a service with the core's authority, so a
change of the declarations (or of their ``mcp.connect:<server>`` grants)
needs a human to look. What they look at is recorded and shown in CLIs and
widgets, so it must never carry a secret: env entries appear by NAME only
("set", "changed", "removed"), a URL only as its origin (no userinfo, path or
query), and argv items that look like credentials are redacted. The review
token binds the operator's "yes" to this exact diff between these two
commits: a token for any other change is stale.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from hostkit.cores._manifest import CoreManifest
from hostkit.effects import McpServerConfig

__all__ = ["REVIEW_PREFIX", "mcp_security_diff", "review_token"]

REVIEW_PREFIX = "mcp-review:"
REDACTED = "[redacted]"
_CONNECT = "mcp.connect:"
# A flag whose value is a credential, either "--token=x" or "--token x".
_SECRET_FLAG = re.compile(
    r"(?i)^-{1,2}[a-z0-9_-]*(pass(word|wd)?|secret|token|api[_-]?key|auth|credential|key)[a-z0-9_-]*$"
)
_SECRET_ASSIGN = re.compile(
    r"(?i)^(-{0,2}[a-z0-9_.-]*(pass(word|wd)?|secret|token|api[_-]?key|auth|credential|key)"
    r"[a-z0-9_.-]*)[=:]"
)
# Bearer-like strings that need no flag to be recognised (sk-..., ghp_..., long hex/base64).
_SECRET_SHAPE = re.compile(r"^(sk-|ghp_|gho_|xox[abp]-|AKIA)|^[A-Za-z0-9+/_-]{32,}={0,2}$")
_MAX_ARG = 200


def mcp_security_diff(live: CoreManifest | None, candidate: CoreManifest) -> dict[str, Any]:
    """What changes in MCP declarations and connect grants from ``live`` to ``candidate``.

    ``{}`` when nothing changed. Otherwise ``{"servers": {name: {...}}}`` with
    one entry per added, removed or changed server, each with ``change``,
    ``before``/``after`` views (transport, argv, url origin, env names,
    network, timeouts, connect approval) and, for a changed server, the
    ``fields`` that differ and per env name ``set``/``changed``/``removed``.
    """
    before = live.mcp if live is not None else {}
    after = candidate.mcp
    servers: dict[str, Any] = {}
    for name in sorted({*before, *after}):
        old, new = before.get(name), after.get(name)
        old_connect = _connect(live, name)
        new_connect = _connect(candidate, name)
        if old == new and old_connect == new_connect:
            continue
        entry: dict[str, Any] = {
            "before": None if old is None else _view(old, old_connect),
            "after": None if new is None else _view(new, new_connect),
        }
        if old is None:
            entry["change"] = "added"
        elif new is None:
            entry["change"] = "removed"
        else:
            entry["change"] = "changed"
            entry["fields"] = _changed_fields(old, new, old_connect, new_connect)
        entry["env"] = _env_changes(old, new)
        servers[name] = entry
    # A connect grant for a server neither side declares is refused by the schema.
    return {"servers": servers} if servers else {}


def review_token(core_id: str, live: str | None, candidate: str, diff: Mapping[str, Any]) -> str:
    """``mcp-review:<sha256>`` over canonical JSON of {core_id, from, to, diff}."""
    payload = {"core_id": core_id, "from": live, "to": candidate, "diff": _plain(diff)}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return REVIEW_PREFIX + hashlib.sha256(text.encode()).hexdigest()


def _connect(manifest: CoreManifest | None, name: str) -> str | None:
    if manifest is None:
        return None
    return manifest.capabilities.get(_CONNECT + name)


def _view(server: McpServerConfig, connect: str | None) -> dict[str, Any]:
    view: dict[str, Any] = {"transport": server.transport}
    if server.command is not None:
        view["command"] = _safe_argv(server.command)
        view["env"] = sorted(server.env)
        view["network"] = server.network
    else:
        view["url"] = _origin(server.url or "")
    view["connect_timeout_seconds"] = server.connect_timeout_seconds
    view["call_timeout_seconds"] = server.call_timeout_seconds
    # None: no mcp.connect grant, so the server is declared but cannot be used.
    view["connect"] = connect
    return view


def _changed_fields(
    old: McpServerConfig, new: McpServerConfig, old_connect: str | None, new_connect: str | None
) -> list[str]:
    fields = [
        name
        for name in (
            "command",
            "url",
            "env",
            "network",
            "connect_timeout_seconds",
            "call_timeout_seconds",
        )
        if getattr(old, name) != getattr(new, name)
    ]
    if old_connect != new_connect:
        fields.append("connect")
    return fields


def _env_changes(old: McpServerConfig | None, new: McpServerConfig | None) -> dict[str, str]:
    """Per env NAME: set / changed / removed. Values are compared, never copied."""
    before = old.env if old is not None else {}
    after = new.env if new is not None else {}
    changes: dict[str, str] = {}
    for name in sorted({*before, *after}):
        if name not in before:
            changes[name] = "set"
        elif name not in after:
            changes[name] = "removed"
        elif before[name] != after[name]:
            changes[name] = "changed"
    return changes


def _origin(url: str) -> str:
    """``scheme://host[:port]``: userinfo, path, query and fragment can all carry secrets."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def _safe_argv(argv: list[str]) -> list[str]:
    shown: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            shown.append(REDACTED)
            hide_next = False
            continue
        assign = _SECRET_ASSIGN.match(arg)
        if assign:
            shown.append(assign.group(0) + REDACTED)
        elif _SECRET_FLAG.match(arg):
            shown.append(arg)
            hide_next = True
        elif "://" in arg:
            shown.append(_origin(arg))
        elif _SECRET_SHAPE.search(arg):
            shown.append(REDACTED)
        else:
            shown.append(arg if len(arg) <= _MAX_ARG else arg[: _MAX_ARG - 1] + "…")
    return shown


def _plain(value: Any) -> Any:
    """Frozen maps/tuples back to JSON data, so a recorded diff hashes like a fresh one."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
