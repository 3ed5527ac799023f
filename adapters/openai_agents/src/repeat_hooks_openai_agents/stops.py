"""The guard's stop after a run: what the caller, a session and the next turn's history should see.

When the guard ends a run, the SDK ends it from ``tool_use_behavior`` with
``final_output = stop.message``: no model message is produced, so ``result.new_items``, a
``Session`` (``SQLiteSession``, ...) and ``result.to_input_list()`` hold the refused calls but not the
text the caller was given, ``run_streamed`` emits no message event for it, and an agent with an
``output_type`` gets that text as a ``str``. These helpers close the gap::

    result = await Runner.run(agent, text, context=guard, hooks=GuardHooks(), session=session)
    stop = run_stop(result)              # Stop(reason, message) when the guard ended this run, else None
    await save_stop(session, result)     # the session then holds the stop message as the assistant's reply
    history = result.to_input_list() + stop_items(result)   # the same for a history you keep yourself
"""

from __future__ import annotations

from typing import Any, Protocol

from agents import TResponseInputItem
from agents.memory import Session

from repeat_hooks import Stop

from .context import find_guard
from .turns import turn_of


class _RunOutcome(Protocol):
    """What ``run_stop`` reads of a ``RunResult`` / ``RunResultStreaming``."""

    @property
    def final_output(self) -> Any: ...

    @property
    def context_wrapper(self) -> Any: ...


def run_stop(result: _RunOutcome) -> Stop | None:
    """The guard's ``Stop`` when it ended the run ``result`` comes from; ``None`` when the run ended otherwise.

    Then ``result.final_output`` is ``stop.message``, a ``str`` whatever the agent's ``output_type``:
    check this before using ``final_output`` as your type. For a streamed run, call it once the
    stream is done.
    """
    wrapper = result.context_wrapper
    guard = find_guard(wrapper.context)
    turn_id = turn_of(wrapper.usage)
    if guard is None or turn_id is None:
        return None
    stop = guard.stop_of(turn_id)
    if stop is None or result.final_output != stop.message:
        return None  # the guard stopped, but your own tool_use_behavior ended the run first
    return stop


def stop_items(result: _RunOutcome) -> list[TResponseInputItem]:
    """``[{"role": "assistant", "content": stop.message}]`` when the guard ended the run, else ``[]``.

    Append it to ``result.to_input_list()`` when you keep the conversation yourself, so the next
    turn's model sees what the user was told.
    """
    stop = run_stop(result)
    if stop is None:
        return []
    item: TResponseInputItem = {"role": "assistant", "content": stop.message}
    return [item]


async def save_stop(session: Session, result: _RunOutcome) -> bool:
    """Add the guard's stop message to ``session`` as the assistant's reply; ``True`` if it did.

    The SDK saves the run's items to the session but not a final output that no model produced.
    Call it after each run with that session (it adds nothing when the guard did not end the run).
    """
    items = stop_items(result)
    if not items:
        return False
    await session.add_items(items)
    return True
