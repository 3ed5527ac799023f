"""What a model response cost: per-million-token prices, the arithmetic every adapter's ``token_prices`` shares.

Each adapter reads its SDK's usage object (input, output and cached input tokens) and hands the counts to
``TokenPrices.dollars``; the result feeds ``post_llm_call(cost_usd=...)`` and ``max_cost_usd``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class TokenPrices:
    """US dollars per million tokens. Invalid prices raise ``ValueError`` naming the price.

    Negative, NaN or infinite prices, or input and output both free, would make a cost budget that can
    never trip (or always trips): they are refused here, at setup.
    """

    input_usd_per_million: float
    """Ordinary (uncached) input tokens."""
    output_usd_per_million: float
    """Output tokens, thinking included where the provider bills it as output."""
    cached_input_usd_per_million: float | None = None
    """Input tokens read from the provider's cache; ``None``: charged as ordinary input."""

    def __post_init__(self) -> None:
        for name in ("input_usd_per_million", "output_usd_per_million", "cached_input_usd_per_million"):
            price = getattr(self, name)
            if price is not None and not (isinstance(price, (int, float)) and math.isfinite(price) and price >= 0):
                raise ValueError(f"token_prices: {name}={price!r} must be a finite price >= 0 US dollars")
        if self.input_usd_per_million + self.output_usd_per_million <= 0:
            raise ValueError(
                "token_prices: input_usd_per_million and output_usd_per_million are both 0, so max_cost_usd "
                "could never trip"
            )

    def dollars(self, input_tokens: float, output_tokens: float, cached_input_tokens: float = 0) -> float:
        """The cost of one response: ``input_tokens`` (cached ones included), ``output_tokens`` and, of the
        input, ``cached_input_tokens`` read from the cache. Missing, negative or odd counts count as 0."""
        fresh, output, cached = (_tokens(n) for n in (input_tokens, output_tokens, cached_input_tokens))
        cached_price = self.cached_input_usd_per_million
        if cached_price is None:
            cached = 0
        cached = min(cached, fresh)
        dollars = (fresh - cached) * self.input_usd_per_million + output * self.output_usd_per_million
        if cached_price is not None:
            dollars += cached * cached_price
        return dollars / 1_000_000


def _tokens(count: object) -> int:
    if not isinstance(count, (int, float)):
        return 0
    try:
        return max(int(count), 0)
    except (ValueError, OverflowError):  # NaN, infinity
        return 0
