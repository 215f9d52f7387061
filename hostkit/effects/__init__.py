"""EffectRuntime: the per-turn catalog seam and the one effect pipeline."""

from hostkit.effects._authored import AuthoredTool, ToolContext, tool
from hostkit.effects._catalog import PreparedEffectCatalog, provider_name
from hostkit.effects._policy import EffectPolicy, PolicyDecision
from hostkit.effects._runtime import EffectRuntime, Toolset, ToolsetProvider

__all__ = [
    "AuthoredTool",
    "EffectPolicy",
    "EffectRuntime",
    "PolicyDecision",
    "PreparedEffectCatalog",
    "ToolContext",
    "Toolset",
    "ToolsetProvider",
    "provider_name",
    "tool",
]
