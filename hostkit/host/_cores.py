"""Agent Cores composed into a Host configuration, each at its live revision.

``[cores.<id>]`` names a Git repository; the Host loads the commit its
store recorded as live (``hostkit.cores.live_core``: the newest promotion or
rollback) and compiles the revision's ``agent.yaml`` into an ``AgentConfig``
of the same name. The repository's ref only mirrors that record: a ref moved
outside hostkit is reported and pointed back, and never changes what runs. A
core never promoted, or whose live revision cannot be loaded or compiled, is
not available: the Host still opens and serves its other agents, and a turn
for that core is rejected with the reason.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Collection, Mapping
from typing import get_args

import anyio
import pydantic

from hostkit._lazy import load_off_loop
from hostkit.cores import (
    BUILTIN_RULES,
    CoreLocation,
    LoadedCore,
    live_core,
    policy_rules,
)
from hostkit.errors import ConfigError, HostkitError, StoreError
from hostkit.freeze import FrozenMap
from hostkit.host._config import AgentConfig, HostConfig, PolicyConfig
from hostkit.host._grants import Builtin, policy_problem
from hostkit.store import CoreStore

__all__ = ["compile_core", "compose_cores", "core_locations", "unavailable_reasons"]

_log = logging.getLogger("hostkit.host")
_BUILTINS = frozenset(get_args(Builtin))


def core_locations(config: HostConfig) -> dict[str, CoreLocation]:
    """Each ``[cores.<id>]`` as a location: its path resolved against the config's folder."""
    return {
        core_id: CoreLocation(core_id, config.resolve(core.path), core.ref)
        for core_id, core in config.cores.items()
    }


async def compose_cores(
    config: HostConfig,
    store: CoreStore,
    *,
    strict: bool = False,
    required: Collection[str] = (),
) -> tuple[HostConfig, Mapping[str, LoadedCore], tuple[str, ...]]:
    """``config`` with one agent per available core, the loaded cores, and a warning
    per core that is not available (``core '<id>' ...``: the reason its turns get)
    or whose ref had been moved outside hostkit (healed; the promoted revision runs).

    The live revisions are read from ``store`` now, so composing the same
    configuration after a promotion (in any process) gives the new revision.
    An agent already named like a core (a configuration composed before) is
    replaced. ``strict``: the first core
    that is not available raises its ``ConfigError`` instead (a reload that
    must not half-apply, a promotion's manifest gate). ``required``: these cores
    must load (the ones a reload checked): the first that does not raises a
    ``ConfigError`` with its reason; the others may be left out.
    """
    agents = {name: agent for name, agent in config.agents.items() if name not in config.cores}
    loaded: dict[str, LoadedCore] = {}
    warnings: list[str] = []
    if config.cores:
        # With the registry that Host.cores (a property, so on the loop) builds: a core
        # not promoted yet is promoted through it too.
        await load_off_loop("hostkit.cores._mirror", "hostkit.cores._registry")
    for core_id, location in core_locations(config).items():
        try:
            try:
                core = await live_core(location, store, cores_root=config.cores_root)
            except (ConfigError, StoreError):
                raise  # a store that fails (or closed) fails the composition, not one core
            except ImportError:
                raise  # PyYAML or dulwich missing: a broken install, not this core's fault
            except HostkitError as exc:
                raise ConfigError(exc.message) from None
            except Exception as exc:
                # A repository or revision no check foresaw (a corrupt object, a library
                # bug): this core is not available; the Host and its other agents are.
                _log.exception("loading core %r failed", core_id)
                failure = type(exc).__name__
                raise ConfigError(f"its live revision cannot be read ({failure})") from None
            if core is None and not await anyio.Path(location.path).is_dir():
                # Never promoted because there is nothing to promote: say that, not "promote".
                create = shlex.join(["hostkit", "core", "init", str(location.path)])
                raise ConfigError(
                    f"core {core_id!r} has no repository at {location.path} "
                    f"([cores.{core_id}] path); create one with `{create}`"
                )
            if core is None:
                raise ConfigError(
                    f"core {core_id!r} has no live revision; run `{_promote_command(core_id)}`"
                )
            agents[core_id] = compile_core(config, core)
            from hostkit.cores import heal_mirror

            healed = await heal_mirror(location, core.revision)
            if healed is not None:
                warnings.append(healed)
        except ConfigError as exc:
            if strict:
                raise
            reason = exc.message
            if not reason.startswith(f"core {core_id!r} "):
                reason = f"core {core_id!r} is not available: {reason}"
            if core_id in required:
                raise ConfigError(reason) from None
            _log.warning("%s", reason)
            warnings.append(reason)
            continue
        loaded[core_id] = core
    composed = config.model_copy(update={"agents": FrozenMap(agents)})
    return composed, loaded, tuple(warnings)


def _promote_command(core_id: str) -> str:
    """The command that makes a core live, as it works when pasted: ``--reason`` is required."""
    return shlex.join(["hostkit", "core", "promote", core_id]) + ' --reason "..."'


def unavailable_reasons(config: HostConfig, warnings: tuple[str, ...]) -> dict[str, str]:
    """Which configured cores ``compose_cores`` left out, each with its warning."""
    reasons: dict[str, str] = {}
    for core_id in config.cores:
        prefix = f"core {core_id!r} "
        reason = next((warning for warning in warnings if warning.startswith(prefix)), None)
        if reason is not None:
            reasons[core_id] = reason
    return reasons


def compile_core(config: HostConfig, core: LoadedCore) -> AgentConfig:
    """The ``AgentConfig`` a core's revision declares, checked against ``config``.

    Nothing is allowed that no rule grants (no ``*``): the policy is
    ``hostkit.cores.policy_rules`` (the one the security diff judges); each
    builtin rule that is not denied also switches its builtins on.
    ``ConfigError`` naming
    ``agent.yaml``'s line when ``model`` or ``summarizer`` is not a provider
    under ``[providers]``.
    """
    manifest = core.manifest
    for key in ("model", "summarizer"):
        name = getattr(manifest, key)
        if name is not None and name not in config.providers:
            raise core.problem(
                key, f"{name!r} is not a provider under [providers] of the Host's hostkit.toml"
            )
    rules = {str(kind): tuple(effects) for kind, effects in policy_rules(manifest).items()}
    builtins = {
        effect
        for rule, approval in manifest.capabilities.items()
        if approval != "deny"
        for effect in BUILTIN_RULES.get(rule, ())
        if effect in _BUILTINS
    }
    try:
        agent = _agent_config(core, rules, builtins)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "id"
        raise core.problem(key, str(first["msg"])) from None
    # agent.yaml refuses these itself; checked again as every agent of hostkit.toml is.
    problem = policy_problem(agent)
    if problem is not None:
        raise core.problem("capabilities", problem[1])
    return agent


def _agent_config(
    core: LoadedCore, rules: dict[str, tuple[str, ...]], builtins: set[str]
) -> AgentConfig:
    manifest = core.manifest
    return AgentConfig(
        provider=manifest.model,
        instructions=core.instructions or AgentConfig.model_fields["instructions"].default,
        tool_modules=tuple(core.module(name) for name in manifest.tools),
        tool_path=(str(core.root),),
        builtins=tuple(sorted(builtins)),  # type: ignore[arg-type]
        url_allow_private=tuple(manifest.url_allow_private),
        memory=manifest.memory,
        policy=PolicyConfig(**rules),
        max_steps=manifest.limits.max_steps,
        workspace=manifest.workspace,
        secrets=tuple(manifest.secrets()),
        secret_ttl_s=manifest.limits.secret_ttl_s,
        summarizer=manifest.summarizer,
        sandbox=manifest.sandbox,
        mcp=dict(manifest.mcp),
    )
