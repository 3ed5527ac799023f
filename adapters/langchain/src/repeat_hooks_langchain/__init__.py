"""repeat-hooks for LangChain v1 agents (``langchain`` 1.x ``create_agent``).

::

    from langchain.agents import create_agent
    from repeat_hooks_langchain import RepeatGuardMiddleware, stop_of

    agent = create_agent(model, tools=[track_parcel], checkpointer=checkpointer,
                         middleware=[RepeatGuardMiddleware()])   # Policy() by default
    result = agent.invoke({"messages": [("user", "Keep checking FR-7731")]}, {"configurable": {"thread_id": "t1"}})
    result["messages"][-1].content   # the answer, or the guard's stop message
    stop_of(result)                  # Stop(reason, message) when the guard ended the turn, else None

A turn is one ``invoke`` / ``ainvoke`` / ``stream`` / ``astream``. A refused call never runs: the model
reads the refusal as that call's ``ToolMessage``. The counts live in the graph state (``repeat_guard``,
plain JSON), checkpointed with the thread.
"""

from repeat_hooks import Policy, Stop, StopReason, TokenPrices

from .calls import model_view
from .guard import RepeatGuardMiddleware
from .state import STATE_KEY, RepeatGuardState, guard_state_of, stop_of

__all__ = [
    "STATE_KEY",
    "Policy",
    "RepeatGuardMiddleware",
    "RepeatGuardState",
    "Stop",
    "StopReason",
    "TokenPrices",
    "guard_state_of",
    "model_view",
    "stop_of",
]

__version__ = "0.3.0"
