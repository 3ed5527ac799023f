"""What one model response cost, from the ``usage_metadata`` LangChain chat models report."""

from __future__ import annotations

from collections.abc import Callable

from langchain_core.messages.ai import UsageMetadata

CostOf = Callable[[UsageMetadata], float]
"""The US dollars one model response cost, from its ``AIMessage.usage_metadata``."""


def token_prices(
    input_usd_per_million: float,
    output_usd_per_million: float,
    cached_input_usd_per_million: float | None = None,
) -> CostOf:
    """A ``CostOf`` from per-million-token prices; returns the dollars for one response's usage.

    Cached input tokens (``usage["input_token_details"]["cache_read"]``) are charged at
    ``cached_input_usd_per_million`` when given, else as ordinary input tokens. Negative prices raise
    ``ValueError``.
    """
    prices = (input_usd_per_million, output_usd_per_million, cached_input_usd_per_million or 0.0)
    if any(not price >= 0 for price in prices):
        raise ValueError(f"token prices must be >= 0 US dollars per million tokens, got {prices}")

    def cost_of(usage: UsageMetadata) -> float:
        input_tokens = max(0, int(usage.get("input_tokens") or 0))
        output_tokens = max(0, int(usage.get("output_tokens") or 0))
        cached = 0
        if cached_input_usd_per_million is not None:
            details = usage.get("input_token_details") or {}
            cached = min(input_tokens, max(0, int(details.get("cache_read") or 0)))
        dollars = (input_tokens - cached) * input_usd_per_million + output_tokens * output_usd_per_million
        if cached_input_usd_per_million is not None:
            dollars += cached * cached_input_usd_per_million
        return dollars / 1_000_000

    return cost_of
