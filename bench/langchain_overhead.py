"""What ``RepeatGuardMiddleware`` adds inside LangChain's ``create_agent`` loop, measured side by side.

One turn: a scripted chat model asks for 20 tool calls, one per response (all different, so none is
refused), then answers: 21 model calls, 20 tool runs, through the real graph with an in-memory
checkpointer. Three agents run the same turn: plain; with a do-nothing middleware that has the same
hooks as the guard (``before_agent``, ``before_model`` with an end jump, ``wrap_model_call``,
``wrap_tool_call``: LangChain's own price for any such middleware, a graph node per turn and one per step,
and a traced span per hook call); and with
``RepeatGuardMiddleware``. They are interleaved (rotating which goes first), many rounds; each figure
is the median of the per-round ratios, so a noisy machine moves all sides alike. Times are this
process's CPU time (``time.process_time``): with a scripted model the loop is CPU-bound.

Goal: the middleware's own cost, guard over the do-nothing middleware, at most 1.03x. A figure that a
noisy machine does not move is printed too: the Python function calls one turn makes (``cProfile``).

    .venv/bin/python bench/langchain_overhead.py
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse, ToolCallRequest, hook_config
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from repeat_hooks_langchain import RepeatGuardMiddleware, guard_state_of
from repeat_hooks_langchain.testing import ScriptedChatModel, call_message

CALLS_PER_TURN = 20
TURNS_PER_SAMPLE = 3
ROUNDS = 31
TARGET = 1.03


@tool
def track_parcel(tracking_number: str) -> str:
    """The carrier's latest scan of a parcel."""
    return f"{tracking_number}: in transit"


def twenty_parcels(messages: Sequence[BaseMessage]) -> AIMessage:
    done = sum(isinstance(m, ToolMessage) for m in messages)
    if done == CALLS_PER_TURN:
        return AIMessage(content="All parcels are in transit.")
    return call_message(("track_parcel", {"tracking_number": f"FR-{done}"}))


class SameHooks(AgentMiddleware[Any, Any, Any]):
    """The guard's hooks, doing nothing: what LangChain charges any middleware with these hooks."""

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return None

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return None

    def wrap_model_call(self, request: ModelRequest[Any], handler: Callable[..., Any]) -> ModelResponse[Any]:
        response: ModelResponse[Any] = handler(request)
        return response

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[..., Any]) -> Any:
        return handler(request)


def make_turn(kind: str) -> Callable[[], None]:
    guarded = kind == "guard"
    middleware: list[Any] = {"plain": [], "same hooks": [SameHooks()], "guard": [RepeatGuardMiddleware()]}[kind]
    agent = create_agent(
        ScriptedChatModel(then=twenty_parcels),
        tools=[track_parcel],
        middleware=middleware,
        checkpointer=InMemorySaver(),
    )
    counter = iter(range(10**9))

    def turn() -> None:
        config: Any = {"configurable": {"thread_id": f"t{next(counter)}"}, "recursion_limit": 200}
        result = agent.invoke({"messages": [("user", "Track my 20 parcels")]}, config)
        assert result["messages"][-1].content == "All parcels are in transit."
        if guarded:
            assert guard_state_of(result).turn.refusals == 0

    return turn


def sample(turn: Callable[[], None]) -> float:
    gc.collect()
    started = time.process_time()
    for _ in range(TURNS_PER_SAMPLE):
        turn()
    return time.process_time() - started


def function_calls(turn: Callable[[], None]) -> int:
    """The Python function calls one turn makes."""
    profile = cProfile.Profile()
    profile.enable()
    turn()
    profile.disable()
    return int(pstats.Stats(profile).total_calls)  # type: ignore[attr-defined]


def main() -> None:
    kinds = ["plain", "same hooks", "guard"]
    turns = {kind: make_turn(kind) for kind in kinds}
    for turn in turns.values():
        turn()  # warm up
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for round_number in range(ROUNDS):
        order = kinds[round_number % 3 :] + kinds[: round_number % 3]
        for kind in order:
            times[kind].append(sample(turns[kind]) / TURNS_PER_SAMPLE)

    def ratio(over: str, base: str) -> float:
        return statistics.median(a / b for a, b in zip(times[over], times[base], strict=True))

    print(f"create_agent turn of {CALLS_PER_TURN} tool calls (+1 answer), CPU time, median of {ROUNDS} rounds:")
    for kind in kinds:
        print(f"  {kind + ':':<12} {statistics.median(times[kind]) * 1e3:8.2f} ms / turn")
    own = ratio("guard", "same hooks")
    print(f"  guard / plain:      {ratio('guard', 'plain'):.3f}x")
    print(f"  same hooks / plain: {ratio('same hooks', 'plain'):.3f}x  (LangChain's price for any middleware like it)")
    print(
        f"  guard / same hooks: {own:.3f}x  (the middleware's own work; goal <= {TARGET}x) -> "
        f"{'OK' if own <= TARGET else 'OVER'}"
    )
    calls = {kind: function_calls(turns[kind]) for kind in kinds}
    print(
        f"  Python function calls per turn: plain {calls['plain']}, same hooks {calls['same hooks']}, "
        f"guard {calls['guard']} (guard / same hooks {calls['guard'] / calls['same hooks']:.3f}x)"
    )


if __name__ == "__main__":
    main()
