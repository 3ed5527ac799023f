"""Model cost: what one response's token usage cost, for ``Policy(max_cost_usd=...)``."""

from __future__ import annotations

from collections.abc import Callable

from pydantic_ai.usage import RequestUsage

CostOf = Callable[[RequestUsage], float]
"""The US dollars one model response cost, from the ``RequestUsage`` pydantic-ai reports for it."""


def token_prices(
    input_usd_per_million: float,
    output_usd_per_million: float,
    cache_read_usd_per_million: float | None = None,
) -> CostOf:
    """A ``CostOf`` from per-million-token prices; returns the dollars for one response's usage.

    Input tokens read from the provider's cache (``usage.cache_read_tokens``) are charged at
    ``cache_read_usd_per_million`` when given, else as ordinary input tokens. Negative prices are
    refused with a ``ValueError`` (a budget that could never trip).
    """
    prices = (input_usd_per_million, output_usd_per_million, cache_read_usd_per_million or 0.0)
    if any(price < 0 for price in prices) or input_usd_per_million + output_usd_per_million <= 0:
        raise ValueError(f"token_prices needs non-negative prices, not all zero; got {prices[:2]}")

    def cost_of(usage: RequestUsage) -> float:
        cached = usage.cache_read_tokens if cache_read_usd_per_million is not None else 0
        fresh = max(0, usage.input_tokens - cached)
        dollars = fresh * input_usd_per_million + usage.output_tokens * output_usd_per_million
        if cache_read_usd_per_million is not None:
            dollars += cached * cache_read_usd_per_million
        return dollars / 1_000_000

    return cost_of
