"""Testing adapters that ship with hostkit, for your own tests and notebooks.

The same contract suites run on these and on the real adapters.
"""

from hostkit.adapters.scripted import CallTools, Fail, Reply, ScriptedModel, ScriptStep
from hostkit.testing._sources import (
    InMemoryMemory,
    InMemoryMemorySource,
    StaticProviderSource,
    StaticToolSource,
    capabilities,
)

__all__ = [
    "CallTools",
    "Fail",
    "InMemoryMemory",
    "InMemoryMemorySource",
    "Reply",
    "ScriptStep",
    "ScriptedModel",
    "StaticProviderSource",
    "StaticToolSource",
    "capabilities",
]
