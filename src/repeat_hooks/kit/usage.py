"""What a model response cost: per-million-token prices, and the token counts of every SDK's usage object.

``TokenPrices(3, 15)`` is a ``CostOf``: called with one response's usage, as any supported SDK reports it
(``usage_tokens`` reads them all), it returns US dollars for ``post_llm_call(cost_usd=...)`` and
``max_cost_usd``. Adapters take a ``CostOf`` (``cost=``), so a function of your own works as well.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class CostOf(Protocol):
    """The US dollars one model response cost, from the usage its SDK reports for it: ``TokenPrices(3, 15)``,
    or any function of one argument (a Protocol, so that it types right as a class attribute too)."""

    def __call__(self, usage: Any, /) -> float: ...


_INPUT = ("input_tokens", "prompt_tokens", "prompt_token_count")
_INPUT_EXTRA = ("tool_use_prompt_token_count",)
_OUTPUT = ("output_tokens", "completion_tokens", "candidates_token_count")
_OUTPUT_EXTRA = ("thoughts_token_count",)
_CACHED = ("cache_read_tokens", "cached_content_token_count")
_CACHED_DETAILS = (
    ("input_tokens_details", "cached_tokens"),
    ("input_token_details", "cache_read"),
    ("prompt_tokens_details", "cached_tokens"),
)


def _get(source: Any, name: str) -> Any:
    if isinstance(source, Mapping):
        return source.get(name)
    return getattr(source, name, None)


def _first(source: Any, names: tuple[str, ...]) -> float:
    for name in names:
        value = _get(source, name)
        if value is not None:
            return _tokens(value)
    return 0


def _anthropic(usage: Any) -> tuple[int, int, int]:
    cached = _first(usage, ("cache_read_input_tokens",))
    fresh = _first(usage, ("input_tokens",)) + cached + _first(usage, ("cache_creation_input_tokens",))
    return int(fresh), int(_first(usage, ("output_tokens",))), int(cached)


def _camel_case(usage: Any) -> tuple[int, int, int]:
    output = _first(usage, ("outputTokens",))
    cached = _first(usage, ("cacheReadInputTokens",))
    given = _first(usage, ("inputTokens",))
    total = _first(usage, ("totalTokens",))
    fresh = total - output if total - output >= given else given + cached + _first(usage, ("cacheWriteInputTokens",))
    return int(fresh), int(output), int(min(cached, fresh))


def usage_tokens(usage: Any) -> tuple[int, int, int]:
    """``(input, output, cached input)`` tokens of one response's usage, as any supported SDK spells them.

    - pydantic-ai ``RequestUsage``: ``input_tokens``, ``output_tokens``, ``cache_read_tokens``;
    - OpenAI Agents ``Usage``: ``input_tokens``, ``output_tokens``, ``input_tokens_details.cached_tokens``;
    - LangChain ``usage_metadata`` (a dict): ``input_tokens``, ``output_tokens``,
      ``input_token_details["cache_read"]``;
    - Google ADK (genai ``usage_metadata``): ``prompt_token_count`` + ``tool_use_prompt_token_count``,
      ``candidates_token_count`` + ``thoughts_token_count``, ``cached_content_token_count``;
    - Mistral and chat completions: ``input_tokens`` or ``prompt_tokens``, ``output_tokens`` or
      ``completion_tokens``, ``prompt_tokens_details.cached_tokens``;
    - Anthropic (the Claude Agent SDK): ``input_tokens`` counts only uncached input, so the input is it plus
      ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` (cache writes priced as input), the
      cached part ``cache_read_input_tokens``;
    - Strands (camelCase): ``inputTokens``, ``outputTokens``, ``cacheReadInputTokens``; its providers
      disagree on whether ``inputTokens`` includes the cache, so the input is ``totalTokens - outputTokens``
      where that is larger, else ``inputTokens`` plus the cache counts.

    Missing, negative or odd counts count as 0; ``None`` usage is all zeros.
    """
    if usage is None:
        return 0, 0, 0
    try:
        if _get(usage, "inputTokens") is not None or _get(usage, "outputTokens") is not None:
            return _camel_case(usage)
        if _get(usage, "cache_read_input_tokens") is not None or _get(usage, "cache_creation_input_tokens") is not None:
            return _anthropic(usage)
        fresh = _first(usage, _INPUT) + sum(_first(usage, (name,)) for name in _INPUT_EXTRA)
        output = _first(usage, _OUTPUT) + sum(_first(usage, (name,)) for name in _OUTPUT_EXTRA)
        cached = _first(usage, _CACHED)
        if not cached:
            for details, name in _CACHED_DETAILS:
                inner = _get(usage, details)
                if inner is not None:
                    cached = _first(inner, (name,))
                    if cached:
                        break
    except Exception:  # a hostile usage object: nothing is known
        return 0, 0, 0
    return int(fresh), int(output), int(cached)


@dataclass(frozen=True)
class TokenPrices:
    """US dollars per million tokens; call it with a response's usage for its cost (a ``CostOf``).

    ``cost=TokenPrices(3, 15)`` in any adapter. Invalid prices raise ``ValueError`` naming the price.

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
                raise ValueError(f"TokenPrices: {name}={price!r} must be a finite price >= 0 US dollars")
        if self.input_usd_per_million + self.output_usd_per_million <= 0:
            raise ValueError(
                "TokenPrices: input_usd_per_million and output_usd_per_million are both 0, so max_cost_usd "
                "could never trip"
            )

    def __call__(self, usage: Any) -> float:
        """The US dollars of one response's ``usage`` (any SDK's usage object: see ``usage_tokens``)."""
        return self.dollars(*usage_tokens(usage))

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
