"""What a model call cost, from the ``usage_metadata`` ADK's models report (Gemini's token counts)."""

from __future__ import annotations

from collections.abc import Callable

from google.genai import types

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
    else as ordinary input. Missing counts are 0. Negative prices raise ``ValueError`` here.
    """
    for name, price in (
        ("input_usd_per_million", input_usd_per_million),
        ("output_usd_per_million", output_usd_per_million),
        ("cached_input_usd_per_million", cached_input_usd_per_million),
    ):
        if price is not None and not price >= 0:
            raise ValueError(f"repeat-hooks: token_prices({name}={price!r}) must be a price >= 0")

    def cost_of(usage: types.GenerateContentResponseUsageMetadata) -> float:
        prompt = (usage.prompt_token_count or 0) + (usage.tool_use_prompt_token_count or 0)
        output = (usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0)
        cached = 0
        if cached_input_usd_per_million is not None:
            cached = min(prompt, usage.cached_content_token_count or 0)
        dollars = (prompt - cached) * input_usd_per_million + output * output_usd_per_million
        if cached_input_usd_per_million is not None:
            dollars += cached * cached_input_usd_per_million
        return dollars / 1_000_000

    return cost_of
