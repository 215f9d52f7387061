"""Model prices for the budget view: USD per million tokens, per model id.

A small built-in table of list prices that callers extend with ``prices=``;
an unknown model has no price (cost ``None``), never a guessed one. A
provider of a kind in ``FREE_KINDS`` runs on this machine and costs nothing
whatever its model is called (the budget view prices it by its kind).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from hostkit.errors import InvalidValue
from hostkit.types import is_positive

__all__ = ["FREE", "FREE_KINDS", "PRICES", "ModelPrice", "cost_text", "price_for"]


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """USD per million tokens; cache buckets default to the input price when not given."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def __post_init__(self) -> None:
        # A NaN, infinite or negative price has no cost to show (cost_text would fail).
        for name in ("input", "output", "cache_read", "cache_write"):
            value = getattr(self, name)
            if (value is not None or name in ("input", "output")) and not is_positive(
                value, high=1_000_000, zero=True
            ):
                raise InvalidValue(f"ModelPrice.{name} must be USD per million tokens, 0 or more")

    def cost(
        self,
        *,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> float:
        """The cost in USD. ``input_tokens`` includes the cache buckets (see ``Usage``)."""
        cache_read = self.input if self.cache_read is None else self.cache_read
        cache_write = self.input if self.cache_write is None else self.cache_write
        uncached = max(0, input_tokens - cache_read_tokens - cache_write_tokens)
        return (
            uncached * self.input
            + cache_read_tokens * cache_read
            + cache_write_tokens * cache_write
            + output_tokens * self.output
        ) / 1_000_000


FREE = ModelPrice(0.0, 0.0, 0.0, 0.0)
# Provider kinds (``[providers.X] kind``) that run on this machine: any model of theirs is FREE.
FREE_KINDS: frozenset[str] = frozenset({"scripted", "local"})

# List prices at the time of writing; pass ``prices=`` to correct or extend them. Keys are
# model ids as providers report them; a dated id (``gpt-4o-mini-2024-07-18``) falls back to
# its undated key.
PRICES: Mapping[str, ModelPrice] = MappingProxyType(
    {
        "gpt-4o-mini": ModelPrice(0.15, 0.60, cache_read=0.075),
        "gpt-4o": ModelPrice(2.50, 10.00, cache_read=1.25),
        "claude-sonnet-4-5": ModelPrice(3.00, 15.00, cache_read=0.30, cache_write=3.75),
        "claude-haiku-4-5": ModelPrice(1.00, 5.00, cache_read=0.10, cache_write=1.25),
        # The default scripted and embedded models, for a usage row read without the
        # configuration that says its provider's kind (a bare store).
        "scripted-1": FREE,
        "SmolLM2-135M-Instruct.Q4_1": FREE,
    }
)

_DATED = re.compile(r"^(?P<base>.+?)-(?:\d{4}-\d{2}-\d{2}|\d{8})$")


def price_for(model: str, prices: Mapping[str, ModelPrice] | None = None) -> ModelPrice | None:
    """The price of ``model`` from ``prices`` over ``PRICES``, or None when unknown."""
    table = {**PRICES, **(prices or {})}
    found = table.get(model)
    if found is None and (dated := _DATED.match(model)):
        found = table.get(dated.group("base"))
    return found


def cost_text(value: float | None) -> str:
    """A cost in USD: ``$0`` when free, three significant digits under a dollar, else cents.

    ``unknown`` for an unpriced model: never shown as free.
    """
    if value is None or not math.isfinite(value) or value < 0:
        return "unknown"
    if value == 0:
        return "$0"
    if value >= 1:
        return f"${value:,.2f}"
    digits = max(2, 2 - math.floor(math.log10(value)))
    text = f"{value:.{digits}f}".rstrip("0")
    whole, _, cents = text.partition(".")
    return f"${whole}.{cents.ljust(2, '0')}"
