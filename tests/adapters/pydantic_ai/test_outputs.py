"""The stop never reaches an output function or an output validator as data (issue 18): a plain text
output is the stop message; anything else raises ``RepeatGuardStopped``; ``on_stop="raise"`` always raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from pai_parcels import SEED_004, Carrier, guarded
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, RunContext, TextOutput
from pydantic_ai.exceptions import AgentRunError
from repeat_hooks_pydantic_ai import RepeatGuard, RepeatGuardStopped, stop_of
from repeat_hooks_pydantic_ai.testing import ScriptedModel, answer, keep_calling, steps

from repeat_hooks import StopReason

PARCEL = {"parcel_id": "FR-7731"}
STUCK = keep_calling("track_parcel", PARCEL)


@dataclass
class Summary:
    words: int
    text: str


class Delivery(BaseModel):
    parcel_id: str
    eta: str


class Seen:
    """What an output function or validator was handed."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def summarize(self, text: str) -> Summary:
        self.texts.append(text)
        return Summary(words=len(text.split()), text=text)

    def no_shouting(self, ctx: RunContext[None], output: Any) -> Any:
        self.texts.append(str(output))
        if isinstance(output, str) and output.startswith("I stopped"):
            raise ModelRetry("answer the customer, do not talk about yourself")
        return output


async def test_a_text_output_function_never_gets_the_stop_message(carrier: Carrier) -> None:
    """Before: ``Summary(words=19, text='I stopped: ...')``; now the run raises with the stop."""
    seen = Seen()
    agent, model = guarded(STUCK, carrier, output_type=TextOutput(seen.summarize))
    with pytest.raises(RepeatGuardStopped) as raised:
        await agent.run("Keep checking FR-7731")
    assert raised.value.stop.reason is StopReason.IGNORED_REFUSALS
    assert stop_of(raised.value) == raised.value.stop == stop_of(raised.value.messages)
    assert seen.texts == []
    assert carrier.calls == ["FR-7731"] * 2 and model.calls == 5


async def test_a_text_output_function_still_gets_the_models_own_answers(carrier: Carrier) -> None:
    seen = Seen()
    agent, _ = guarded(answer("FR-7731 is in Lyon."), carrier, output_type=TextOutput(seen.summarize))
    result = await agent.run("Where is FR-7731?")
    assert result.output == Summary(words=4, text="FR-7731 is in Lyon.")


@pytest.mark.parametrize("output_type", [str, [Delivery, str]], ids=["str", "union"])
async def test_output_validators_never_see_the_stop_message(output_type: Any, carrier: Carrier) -> None:
    """Before: the validator rejected it, the guard stopped again, and the run ended in
    ``UnexpectedModelBehavior`` with the stop reason lost."""
    seen = Seen()
    agent, model = guarded(STUCK, carrier, output_type=output_type)
    agent.output_validator(seen.no_shouting)
    result = await agent.run("Keep checking FR-7731")
    stop = stop_of(result)
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert result.output == stop.message
    assert seen.texts == []
    assert model.calls == 5


async def test_output_validators_never_see_the_stop_message_when_streamed(carrier: Carrier) -> None:
    seen = Seen()
    agent, _ = guarded(STUCK, carrier)
    agent.output_validator(seen.no_shouting)
    async with agent.run_stream("Keep checking FR-7731") as stream:
        output = await stream.get_output()
    stop = stop_of(stream)
    assert stop is not None and output == stop.message
    assert seen.texts == []


async def test_output_validators_still_check_the_models_own_answers(carrier: Carrier) -> None:
    seen = Seen()
    agent, _ = guarded(steps("I stopped caring.", "FR-7731 is in Lyon."), carrier)
    agent.output_validator(seen.no_shouting)
    result = await agent.run("Where is FR-7731?")
    assert result.output == "FR-7731 is in Lyon."
    assert seen.texts == ["I stopped caring.", "FR-7731 is in Lyon."]


async def test_a_function_output_raises_with_the_stop(carrier: Carrier) -> None:
    seen = Seen()
    agent, _ = guarded(STUCK, carrier, output_type=[seen.summarize])
    with pytest.raises(RepeatGuardStopped):
        await agent.run("Keep checking FR-7731")
    assert seen.texts == []


@pytest.mark.parametrize("output_type", [str, [Delivery, str], Delivery], ids=["str", "union", "structured"])
async def test_on_stop_raise_raises_with_the_stop_reason_like_usage_limits(output_type: Any, carrier: Carrier) -> None:
    agent, model = guarded(STUCK, carrier, output_type=output_type, guard=RepeatGuard(SEED_004, on_stop="raise"))
    with pytest.raises(RepeatGuardStopped) as raised:
        await agent.run("Keep checking FR-7731")
    error = raised.value
    assert isinstance(error, AgentRunError)  # as UsageLimitExceeded is
    assert error.stop.reason is StopReason.IGNORED_REFUSALS
    assert "ignored_refusals" in str(error) and error.stop.message in str(error)
    assert carrier.calls == ["FR-7731"] * 2 and model.calls == 5
    # The messages continue the same turn: still stopped, nothing more runs.
    with pytest.raises(RepeatGuardStopped):
        await agent.run(message_history=error.messages)
    assert carrier.calls == ["FR-7731"] * 2 and model.calls == 5


def test_on_stop_takes_reply_or_raise() -> None:
    with pytest.raises(TypeError, match=r"on_stop=\.\.\.\) is 'reply' or 'raise', not 'exception'"):
        RepeatGuard(on_stop="exception")  # type: ignore[arg-type]


async def test_on_stop_output_warns_naming_reply_and_still_works(carrier: Carrier) -> None:
    with pytest.warns(DeprecationWarning, match=r'on_stop="output"\) is deprecated: use on_stop="reply"'):
        guard = RepeatGuard(SEED_004, on_stop="output")
    assert guard.core.on_stop == "reply"
    agent, _ = guarded(STUCK, carrier, guard=guard)
    result = await agent.run("Keep checking FR-7731")
    stop = stop_of(result)
    assert stop is not None and result.output == stop.message


def test_a_sync_run_raises_the_same(carrier: Carrier) -> None:
    agent = Agent(ScriptedModel(STUCK), tools=[carrier.tool], capabilities=[RepeatGuard(SEED_004, on_stop="raise")])
    with pytest.raises(RepeatGuardStopped, match="ignored_refusals"):
        agent.run_sync("Keep checking FR-7731")
