"""What one model response cost, from the ``usage_metadata`` LangChain chat models report."""

from __future__ import annotations

from collections.abc import Callable

from langchain_core.messages.ai import UsageMetadata

from repeat_hooks.cost import TokenPrices

CostOf = Callable[[UsageMetadata], float]
"""The US dollars one model response cost, from its ``AIMessage.usage_metadata``."""


def token_prices(
    input_usd_per_million: float,
    output_usd_per_million: float,
    cached_input_usd_per_million: float | None = None,
) -> CostOf:
    """A ``CostOf`` from per-million-token prices; returns the dollars for one response's usage.

    Cached input tokens (``usage["input_token_details"]["cache_read"]``) are charged at
    ``cached_input_usd_per_million`` when given, else as ordinary input tokens. Invalid prices raise
    ``ValueError`` (``TokenPrices``).
    """
    prices = TokenPrices(input_usd_per_million, output_usd_per_million, cached_input_usd_per_million)

    def cost_of(usage: UsageMetadata) -> float:
        details = usage.get("input_token_details") or {}
        return prices.dollars(
            usage.get("input_tokens") or 0, usage.get("output_tokens") or 0, details.get("cache_read") or 0
        )

    return cost_of
