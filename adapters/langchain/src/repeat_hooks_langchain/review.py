"""Human review next to the guard: ``HumanInTheLoopMiddleware`` asks only about calls the guard let run.

The guard decides a response's calls in the model node, before any ``after_model`` hook or tool call, and
keeps the decisions in the graph state (``repeat_guard_refusals``). ``skip_refused`` gives each tool of
``interrupt_on`` a ``when`` predicate (LangChain's own way to skip a review) that reads them, so a reviewer
is never asked to approve a call that would be refused anyway, in either interrupt mode (``"batched"``:
the predicate runs in ``after_model``; ``"per_call"``: in ``wrap_tool_call``) and either middleware order.
The predicate reads only the checkpointed state, so it answers the same when the run resumes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from langchain.agents.middleware import InterruptOnConfig, ToolCallRequest

from .calls import last_ai_message, request_position
from .state import REFUSALS_KEY

ALL_DECISIONS: list[Any] = ["approve", "edit", "reject", "respond"]
"""What ``interrupt_on={"tool": True}`` allows (``HumanInTheLoopMiddleware.__init__``)."""


def skip_refused(interrupt_on: Mapping[str, bool | InterruptOnConfig]) -> dict[str, bool | InterruptOnConfig]:
    """``interrupt_on`` for ``HumanInTheLoopMiddleware``, asking about a call only if the guard let it run::

        HumanInTheLoopMiddleware(interrupt_on=skip_refused({"refund_order": True}))

    Each tool's config is kept (``True`` as every decision, as ``HumanInTheLoopMiddleware`` reads it); its
    ``when`` predicate, if any, still decides for the calls the guard allowed. ``False`` stays ``False``.
    """
    guarded: dict[str, bool | InterruptOnConfig] = {}
    for name, config in interrupt_on.items():
        if config is False:
            guarded[name] = False
            continue
        base: dict[str, Any] = {"allowed_decisions": list(ALL_DECISIONS)} if config is True else dict(config)
        base["when"] = _Unrefused(base.get("when"))
        guarded[name] = cast(InterruptOnConfig, base)
    return guarded


class _Unrefused:
    """A ``when`` predicate: ``False`` for a call the guard refused, else the user's predicate (or ``True``)."""

    def __init__(self, when: Callable[[ToolCallRequest], bool] | None) -> None:
        self.when = when

    def __call__(self, request: ToolCallRequest) -> bool:
        if refused(request.state, request.tool_call):
            return False
        return True if self.when is None else bool(self.when(request))

    def __repr__(self) -> str:
        return f"skip_refused(when={self.when!r})"


def refused(state: Mapping[str, Any], call: Any) -> bool:
    """The guard refused ``call`` (a call of the state's last ``AIMessage``)."""
    decisions = state.get(REFUSALS_KEY)
    if not decisions:
        return False
    message = last_ai_message(state.get("messages", ()))
    position = None if message is None else request_position(message, call)
    return position is not None and bool(decisions.get(str(position)))
