"""What a turn is pinned to at admission: core revision, provider, effects, limits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hostkit.cores import SlotRuntime
from hostkit.effects import EffectRuntime
from hostkit.freeze import FrozenMap
from hostkit.providers import ModelProvider
from hostkit.turns._events import Observer

__all__ = ["CoreResolver", "OutputCheck", "PinnedCore"]


@dataclass(frozen=True, slots=True)
class PinnedCore:
    """The admitted turn's private view of its Agent Core for one config generation.

    This is live Host state (it holds a provider client and the generation's
    EffectRuntime), so it never appears in TurnExecutionContext; the context
    carries only the immutable identities and the capability snapshot.
    """

    core_id: str
    core_revision: str
    generation: int
    instructions: str
    provider: ModelProvider
    effects: EffectRuntime
    effect_names: tuple[str, ...]
    policy_fingerprint: str
    workspace: Path
    max_steps: int = 8
    secret_grants: tuple[str, ...] = ()
    # The limits of every process the Host starts for the agent ([host] limits): what an
    # approved run may consume is part of what was approved.
    process_limits: Mapping[str, int] = field(default_factory=FrozenMap)
    # The generation's own observer: a turn reports to the one it was pinned with, so
    # after apply_config new turns report to the new one and running turns to theirs.
    observer: Observer | None = None
    # What the final answer must be (an Agent's ``output_type``); None: free text.
    output: OutputCheck | None = None
    # The core revision's authored slots (bootstrap, input, output); None: none declared.
    slots: SlotRuntime | None = None


class OutputCheck(Protocol):
    """Validates a final answer; a failure is fed back to the model ``retries`` times."""

    @property
    def retries(self) -> int: ...

    def check(self, text: str) -> Any:
        """The validated answer as JSON-able data; ``InvalidValue`` saying what was wrong."""
        ...


class CoreResolver(Protocol):
    """Resolves a core id (and optional pinned revision) in the current generation.

    Raises ``TurnRejected`` for an unknown core or an unavailable revision.
    """

    async def pin(self, core_id: str, revision: str | None) -> PinnedCore: ...

    async def release(self, core: PinnedCore) -> None:
        """The turn that pinned ``core`` has ended (its generation may now close)."""
        ...
