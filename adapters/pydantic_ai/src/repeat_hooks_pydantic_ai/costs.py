"""Model cost: what one response's token usage cost, for ``Policy(max_cost_usd=...)``."""

from __future__ import annotations

from collections.abc import Callable

from pydantic_ai.usage import RequestUsage

from repeat_hooks.cost import TokenPrices

CostOf = Callable[[RequestUsage], float]
"""The US dollars one model response cost, from the ``RequestUsage`` pydantic-ai reports for it."""


def token_prices(
    input_usd_per_million: float,
    output_usd_per_million: float,
    cached_input_usd_per_million: float | None = None,
) -> CostOf:
    """A ``CostOf`` from per-million-token prices; returns the dollars for one response's usage.

    Input tokens read from the provider's cache (``usage.cache_read_tokens``) are charged at
    ``cached_input_usd_per_million`` when given, else as ordinary input tokens. Invalid prices (negative, or
    input and output both free: a budget that could never trip) raise ``ValueError`` (``TokenPrices``).
    """
    prices = TokenPrices(input_usd_per_million, output_usd_per_million, cached_input_usd_per_million)

    def cost_of(usage: RequestUsage) -> float:
        return prices.dollars(usage.input_tokens, usage.output_tokens, usage.cache_read_tokens)

    return cost_of
