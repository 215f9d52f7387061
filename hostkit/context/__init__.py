"""ContextManager: bounded, budgeted provider context for every step."""

from hostkit.context._bootstrap import (
    DEFAULT_BOOTSTRAP_FILES,
    BootstrapSnapshot,
    BootstrapSource,
    WorkspaceBootstrap,
)
from hostkit.context._compaction import (
    DEFAULT_SUMMARY_INSTRUCTIONS,
    CommittedSummary,
    CompactionKind,
    CompactionOutcome,
    ProviderSummarizer,
    SessionCompactor,
    Summarizer,
    fallback_summary,
)
from hostkit.context._estimate import (
    DEFAULT_CACHE_CHARS,
    DEFAULT_CACHE_ENTRIES,
    MESSAGE_OVERHEAD_TOKENS,
    REQUEST_OVERHEAD_TOKENS,
    CharEstimator,
    Estimator,
    EstimatorRegistry,
    TokenizerEstimator,
)
from hostkit.context._manager import REFERENCE_ONLY, SUMMARY_CUT, ContextManager, SummarizerSource

__all__ = [
    "DEFAULT_BOOTSTRAP_FILES",
    "DEFAULT_CACHE_CHARS",
    "DEFAULT_CACHE_ENTRIES",
    "DEFAULT_SUMMARY_INSTRUCTIONS",
    "MESSAGE_OVERHEAD_TOKENS",
    "REFERENCE_ONLY",
    "REQUEST_OVERHEAD_TOKENS",
    "SUMMARY_CUT",
    "BootstrapSnapshot",
    "BootstrapSource",
    "CharEstimator",
    "CommittedSummary",
    "CompactionKind",
    "CompactionOutcome",
    "ContextManager",
    "Estimator",
    "EstimatorRegistry",
    "ProviderSummarizer",
    "SessionCompactor",
    "Summarizer",
    "SummarizerSource",
    "TokenizerEstimator",
    "WorkspaceBootstrap",
    "fallback_summary",
]
