"""ContextManager: bounded, budgeted provider context for every step."""

from hostkit.context._estimate import CharEstimator, Estimator
from hostkit.context._manager import ContextManager

__all__ = ["CharEstimator", "ContextManager", "Estimator"]
