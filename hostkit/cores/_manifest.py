"""``agent.yaml``: what an Agent Core declares, as a strict pydantic schema.

The core owns this file (and ``agent/``); the Host owns which revision of it
runs. Capability grants are effect rules with an approval policy each:
anything not granted is denied. Rules in the Host's vocabulary
(``fs.read``, ``fs.write``, ``terminal.run``, ``terminal.network``,
``web.extract``, ``mcp.connect:<server>``, ``secret.bind:<NAME>``) switch the
builtin on; ``mcp.<server>.<glob>`` is a glob over a declared server's
tools (``mcp.docs.*``); any other rule is a glob over the names of the core's
authored tools (``notes.*``), whose first segment is a literal name outside
the Host's namespaces: a wildcard there (``*``, ``m*``) would match the
Host's own effects (an MCP connect, a file write) without naming them.
"""

from __future__ import annotations

import re
from typing import Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from hostkit._unknown_keys import EXTRA_FORBIDDEN, reported_error, unknown_key
from hostkit.effects import (
    MAX_MCP_SERVERS,
    EffectPolicy,
    McpServerConfig,
    McpServerName,
    provider_spelling,
)
from hostkit.errors import ConfigError, bounded

__all__ = [
    "MAX_CAPABILITIES",
    "MAX_MANIFEST_BYTES",
    "Approval",
    "CoreLimits",
    "CoreManifest",
    "SlotsSpec",
    "capability_problem",
    "effect_policy",
    "load_manifest",
    "manifest_error",
    "manifest_with_lines",
    "policy_rules",
]

MAX_MANIFEST_BYTES = 256 * 1024
MAX_CAPABILITIES = 256
Approval = Literal["allow", "ask", "deny"]
# "module:function" inside the core's agent/ package ("slots:on_input").
_ENTRY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
# Builtin rules, and the effect names each one grants.
BUILTIN_RULES: dict[str, tuple[str, ...]] = {
    "fs.read": ("files.read", "files.list"),
    "fs.write": ("files.write", "files.edit"),
    "fs.*": ("files.read", "files.list", "files.write", "files.edit"),
    "terminal.run": ("terminal.run", "terminal.status", "terminal.stop"),
    "terminal.network": ("terminal.network",),
    "web.extract": ("web.extract",),
}
_RESERVED_PREFIXES = ("fs.", "files.", "terminal.", "web.", "mcp.connect:", "mcp.call:", "secret.")
_SECRET_RULE = re.compile(r"secret\.bind:([A-Za-z_][A-Za-z0-9_]{0,127})")
_MCP_CONNECT = re.compile(r"mcp\.connect:([a-z][a-z0-9_]{0,31})")
_TOOL_GLOB = re.compile(r"[a-z0-9_*?]+(\.[a-z0-9_*?]+)*")
# A declared MCP server's tools: "mcp.<server>.<glob>" (the effect names are mcp.<server>.<tool>).
_MCP_TOOLS = re.compile(r"mcp\.([a-z][a-z0-9_]{0,31})\.[a-z0-9_*?]+(\.[a-z0-9_*?]+)*")
# First segments of the Host's own effects and grants: never the start of a tool glob.
_RESERVED_SEGMENTS = frozenset(
    {"fs", "files", "terminal", "web", "mcp", "secret", "memory", "host"}
)
_WILDCARDS = frozenset("*?[")
_MEMORY_RULE = "memory.*"
_NETWORK = "terminal.network"
_RUN = "terminal.run"
_CONNECT = "mcp.connect:"
_CALL = "mcp.call:"
# The Host's effects, whose provider spellings (``files_write``) a rule must not be.
_HOST_EFFECTS = (
    *dict.fromkeys(effect for effects in BUILTIN_RULES.values() for effect in effects),
    "memory.recall",
    "memory.store",
    "memory.forget",
)


def capability_problem(rule: str) -> str | None:
    """Why ``rule`` is not a capability rule (None when it is one)."""
    if rule in BUILTIN_RULES or _SECRET_RULE.fullmatch(rule) or _MCP_CONNECT.fullmatch(rule):
        return None
    if len(rule) <= 64 and _MCP_TOOLS.fullmatch(rule):
        return None
    if rule.startswith(_RESERVED_PREFIXES):
        known = ", ".join([*BUILTIN_RULES, "mcp.connect:<server>", "secret.bind:<NAME>"])
        return f"unknown capability {rule[:80]!r} (known: {known})"
    if len(rule) > 64 or not _TOOL_GLOB.fullmatch(rule):
        return f"{rule[:80]!r} is neither a known capability nor a tool-name glob"
    first = rule.split(".", 1)[0]
    if _WILDCARDS.intersection(first):
        return (
            f"{rule[:80]!r}: a tool-name glob starts with a literal name ('notes.*'); "
            "a wildcard in the first segment would also match the Host's own effects"
        )
    if first in _RESERVED_SEGMENTS:
        return (
            f"{rule[:80]!r}: {first!r} is the Host's namespace, not a tool glob "
            "(an MCP server's tools are 'mcp.<server>.<glob>', with <server> declared under 'mcp')"
        )
    return None


class _Strict(BaseModel):
    # No NaN or infinity: NaN passes every bound, and an infinite wait is no bound.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SlotsSpec(_Strict):
    """Authored slots, each ``"module:function"`` inside ``agent/`` (all optional).

    ``bootstrap(ctx)`` returns text added to the instructions of every turn;
    ``input(ctx, text)`` returns the normalized input that is persisted and
    sent to the model; ``output(ctx, text)`` returns the final answer.
    """

    bootstrap: str | None = None
    input: str | None = None
    output: str | None = None

    @pydantic.field_validator("bootstrap", "input", "output")
    @classmethod
    def _entry(cls, value: str | None) -> str | None:
        if value is not None and not _ENTRY.fullmatch(value):
            raise ValueError(
                "a slot is 'module:function' inside agent/ (for example 'slots:on_input')"
            )
        return value


class CoreLimits(_Strict):
    """Bounds of one core: model steps per turn, slot deadline, secret lifetime, test gate."""

    max_steps: int = Field(default=8, ge=1, le=64)
    slot_timeout_s: float = Field(default=10.0, gt=0, le=600)
    secret_ttl_s: float = Field(default=300.0, gt=0, le=86_400)
    test_timeout_s: float = Field(default=300.0, gt=0, le=3_600)


class CoreManifest(_Strict):
    """The whole ``agent.yaml``.

    ``model`` names a provider under ``[providers]`` of the Host's
    ``hostkit.toml`` (credentials stay with the Host, never in the core).
    ``instructions`` or ``instructions_file`` (a path inside the core), not
    both. ``tools`` are module names inside ``agent/``. ``workspace`` is
    relative to ``hostkit.toml``'s folder (default: the Host's).
    ``dependencies`` are the Python requirements the core's code needs; a
    change of them is flagged for manual review at promotion.
    """

    id: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,63}$")
    description: str = Field(default="", max_length=2_000)
    model: str = Field(min_length=1, max_length=200)
    summarizer: str | None = Field(default=None, min_length=1, max_length=200)
    instructions: str | None = Field(default=None, max_length=100_000)
    instructions_file: str | None = Field(default=None, max_length=500)
    capabilities: dict[str, Approval] = Field(default_factory=dict, max_length=MAX_CAPABILITIES)
    mcp: dict[McpServerName, McpServerConfig] = Field(
        default_factory=dict, max_length=MAX_MCP_SERVERS
    )
    tools: list[str] = Field(default_factory=list, max_length=64)
    slots: SlotsSpec = Field(default_factory=SlotsSpec)
    limits: CoreLimits = Field(default_factory=CoreLimits)
    workspace: str | None = Field(default=None, max_length=500)
    sandbox: Literal["bubblewrap", "none"] = "bubblewrap"
    memory: bool = True
    url_allow_private: list[str] = Field(default_factory=list, max_length=64)
    dependencies: list[str] = Field(default_factory=list, max_length=256)

    @pydantic.field_validator("capabilities")
    @classmethod
    def _rules(cls, value: dict[str, Approval]) -> dict[str, Approval]:
        for rule in value:
            problem = capability_problem(rule)
            if problem is not None:
                raise ValueError(problem)
        return value

    @pydantic.field_validator("tools")
    @classmethod
    def _modules(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _MODULE.fullmatch(name):
                raise ValueError(f"{name[:80]!r} is not a module name inside agent/ (like 'tools')")
        return value

    @pydantic.model_validator(mode="after")
    def _coherent(self) -> CoreManifest:
        if self.instructions is not None and self.instructions_file is not None:
            raise ValueError("give 'instructions' or 'instructions_file', not both")
        for rule in self.capabilities:
            server = _MCP_CONNECT.fullmatch(rule) or _MCP_TOOLS.fullmatch(rule)
            if server and server.group(1) not in self.mcp:
                # Only the rule is quoted: the error points at the rule's line, not at mcp's.
                raise ValueError(f"{rule!r} grants a server that is not declared under mcp")
            meant = provider_spelling(rule, _HOST_EFFECTS, self.mcp)
            if meant is not None:
                raise ValueError(
                    f"{rule!r} is a tool's name as the model sees it; capabilities name "
                    f"effects: did you mean {meant}?"
                )
        if self.capabilities.get(_NETWORK) == "ask" and self.capabilities.get(_RUN) != "ask":
            # Held for every run or for none: asked only through each run it gives a network.
            raise ValueError(
                f"'{_NETWORK}' cannot be ask while {_RUN} is not: the grant is held for every "
                f"run or none, so nobody would be asked; ask for {_RUN} too (each run, with "
                "the network, is then approved), or allow or deny it"
            )
        return self

    def secrets(self) -> tuple[str, ...]:
        """The environment variables granted by ``secret.bind:<NAME>`` rules (not denied)."""
        return tuple(
            match.group(1)
            for rule, approval in self.capabilities.items()
            if approval != "deny" and (match := _SECRET_RULE.fullmatch(rule))
        )


def policy_rules(manifest: CoreManifest) -> dict[Approval, list[str]]:
    """The effect globs per approval that ``manifest``'s capabilities compile to.

    A builtin rule stands for its effects; a ``secret.bind`` rule stands for
    itself, the grant the Host holds only where it is not denied (each binding
    is asked per call anyway); ``mcp.connect:<server>`` brings the server's
    ``mcp.call:<server>`` grant with it (allowed, or denied with the connect:
    each tool is decided by its ``mcp.<server>.<glob>`` rules, and a core cannot
    name the call grant itself); ``memory: true`` allows ``memory.*``. Nothing
    else is allowed: there is no default ``*``.
    """
    rules: dict[Approval, list[str]] = {"allow": [], "ask": [], "deny": []}
    for rule, approval in manifest.capabilities.items():
        rules[approval].extend(BUILTIN_RULES.get(rule, (rule,)))
        if rule.startswith(_CONNECT):
            call = _CALL + rule.removeprefix(_CONNECT)
            rules["deny" if approval == "deny" else "allow"].append(call)
    if manifest.memory:
        rules["allow"].append(_MEMORY_RULE)
    return {kind: list(dict.fromkeys(effects)) for kind, effects in rules.items()}


def effect_policy(manifest: CoreManifest) -> EffectPolicy:
    """The ``EffectPolicy`` a Host runs ``manifest``'s core with (what the security diff judges)."""
    rules = policy_rules(manifest)
    return EffectPolicy(
        allow=tuple(rules["allow"]), deny=tuple(rules["deny"]), ask=tuple(rules["ask"])
    )


_SHOWN_MESSAGE = 300
_QUOTED = re.compile(r"'([^'\s]{1,80})'")


def load_manifest(
    data: bytes, *, source: str = "agent.yaml", max_bytes: int = MAX_MANIFEST_BYTES
) -> CoreManifest:
    """Parse and validate ``agent.yaml`` (blocking work: run it off the event loop).

    Every problem is a ``ConfigError`` naming ``source``, the line and the key
    path: ``agent.yaml line 7: capabilities.fs.wrte: unknown capability ...``.
    Refused before validation: more than ``max_bytes``, not UTF-8, not YAML,
    aliases or merge keys, duplicate keys, a document that is not a mapping.
    """
    return manifest_with_lines(data, source=source, max_bytes=max_bytes)[0]


def manifest_with_lines(
    data: bytes, *, source: str = "agent.yaml", max_bytes: int = MAX_MANIFEST_BYTES
) -> tuple[CoreManifest, dict[str, int]]:
    """``load_manifest``, plus the line of each top-level key (for later errors)."""
    if len(data) > max_bytes:
        raise ConfigError(f"{source} is larger than {max_bytes} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source} is not UTF-8 text (bad byte at offset {exc.start})") from None
    from hostkit.cores._yaml import YamlProblem, parse_yaml  # PyYAML loads with a manifest

    try:
        document, lines = parse_yaml(text)
    except YamlProblem as exc:
        raise manifest_error(source, exc.line, exc.path, exc.message) from None
    if not isinstance(document, dict):
        raise manifest_error(source, 1, (), "agent.yaml must be a mapping of keys (id, model, ...)")
    rules = document.get("capabilities")
    if isinstance(rules, dict):
        # Checked one rule at a time so the error names the rule and its line.
        for rule in rules:
            problem = capability_problem(str(rule))
            if problem is not None:
                path = ("capabilities", rule)
                raise manifest_error(source, _line_of(lines, path), path, problem)
    try:
        manifest = CoreManifest.model_validate(document)
    except pydantic.ValidationError as exc:
        first = reported_error(exc)
        loc: tuple[str | int, ...] = tuple(part for part in first["loc"] if part != "[key]")
        if first["type"] == EXTRA_FORBIDDEN:
            # One sentence naming the key, not "key: message" (see hostkit._unknown_keys).
            error = manifest_error(
                source, _line_of(lines, loc), (), unknown_key(CoreManifest, loc, style="yaml")
            )
            error.key = ".".join(str(part) for part in loc)
            raise error from None
        message = str(first["msg"]).removeprefix("Value error, ")
        if not loc:
            loc = _named_in(message, lines)
        raise manifest_error(source, _line_of(lines, loc), loc, message) from None
    top = {str(path[0]): line for path, line in lines.items() if len(path) == 1}
    return manifest, top


def manifest_error(
    source: str, line: int | None, path: tuple[str | int, ...], message: str
) -> ConfigError:
    """A ``ConfigError`` for ``agent.yaml``: "<source> line <n>: <key.path>: <message>".

    ``key`` is the dotted key path (None at the document's root).
    """
    key = ".".join(str(part) for part in path) or None
    where = source if line is None else f"{source} line {line}"
    shown = bounded(message, _SHOWN_MESSAGE)
    error = ConfigError(f"{where}: {bounded(key, 200)}: {shown}" if key else f"{where}: {shown}")
    error.key = key
    return error


def _named_in(message: str, lines: dict[tuple[str | int, ...], int]) -> tuple[str | int, ...]:
    """A whole-document problem names its keys in quotes: point at the last one present."""
    found: tuple[str | int, ...] = ()
    for name in _QUOTED.findall(message):
        for path in ((name,), ("capabilities", name)):
            if path in lines:
                found = path
    return found


def _line_of(lines: dict[tuple[str | int, ...], int], path: tuple[str | int, ...]) -> int | None:
    """The line of ``path``, else of its nearest ancestor present in the document."""
    for end in range(len(path), -1, -1):
        line = lines.get(tuple(path[:end]))
        if line is not None:
            return line
    return None
