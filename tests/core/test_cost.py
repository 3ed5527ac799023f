"""``TokenPrices``: the cost arithmetic every adapter shares (``cost=TokenPrices(...)``)."""

from __future__ import annotations

import math

import pytest

from repeat_hooks import TokenPrices


def test_dollars_per_million_tokens_with_cached_input_at_its_own_price() -> None:
    prices = TokenPrices(2.0, 8.0, cached_input_usd_per_million=0.5)
    assert prices.dollars(1_000_000, 0) == pytest.approx(2.0)
    assert prices.dollars(0, 1_000_000) == pytest.approx(8.0)
    assert prices.dollars(1_000_000, 0, 400_000) == pytest.approx(600_000 * 2e-6 + 400_000 * 0.5e-6)


def test_without_a_cached_price_cached_input_is_ordinary_input() -> None:
    assert TokenPrices(2.0, 8.0).dollars(1_000, 10, 1_000) == pytest.approx((1_000 * 2 + 10 * 8) / 1e6)


def test_odd_counts_count_as_zero_and_cached_never_exceeds_input() -> None:
    prices = TokenPrices(1.0, 1.0, 0.0)
    assert prices.dollars(-5, math.nan, 0) == 0
    assert prices.dollars(None, "12", 0) == 0  # type: ignore[arg-type]
    assert prices.dollars(100, 0, 1_000) == 0  # all 100 input tokens came from the cache, free


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ((-1.0, 8.0), "input_usd_per_million"),
        ((2.0, math.inf), "output_usd_per_million"),
        ((2.0, 8.0, math.nan), "cached_input_usd_per_million"),
        ((0.0, 0.0), "both 0"),
    ],
)
def test_invalid_prices_name_the_price(arguments: tuple[float, ...], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        TokenPrices(*arguments)
