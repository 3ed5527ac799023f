"""What a model call cost, from the ``usage_metadata`` ADK's models report (Gemini's token counts)."""

from __future__ import annotations

from collections.abc import Callable

from google.genai import types

from repeat_hooks.cost import TokenPrices

CostOf = Callable[[types.GenerateContentResponseUsageMetadata], float]
"""The US dollars one model response cost, from its ``usage_metadata``."""


def token_prices(
    input_usd_per_million: float,
    output_usd_per_million: float,
    cached_input_usd_per_million: float | None = None,
) -> CostOf:
    """A ``CostOf`` from per-million-token prices; returns the dollars for one response's usage.

    Input is ``prompt_token_count`` (+ ``tool_use_prompt_token_count``); output is
    ``candidates_token_count`` + ``thoughts_token_count`` (Gemini bills thinking as output). Cached
    input (``cached_content_token_count``) is charged at ``cached_input_usd_per_million`` when given,
    else as ordinary input. Missing counts are 0. Invalid prices raise ``ValueError`` here (``TokenPrices``).
    """
    prices = TokenPrices(input_usd_per_million, output_usd_per_million, cached_input_usd_per_million)

    def cost_of(usage: types.GenerateContentResponseUsageMetadata) -> float:
        prompt = (usage.prompt_token_count or 0) + (usage.tool_use_prompt_token_count or 0)
        output = (usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0)
        return prices.dollars(prompt, output, usage.cached_content_token_count or 0)

    return cost_of
