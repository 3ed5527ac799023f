"""The errors a guarded run raises when it is set up wrongly: each message says the right spelling.

They subclass the SDK's ``UserError`` (an ``AgentsException``), so the SDK re-raises them as they
are from a tool guardrail, a ``tool_use_behavior`` or a hook, instead of wrapping them in "Error
running tool ...". They are raised at the first model call or tool call that meets the mistake,
never later, and never replaced by a log line.
"""

from __future__ import annotations

from agents import UserError


class GuardSetupError(UserError):
    """A guarded run is set up wrongly (no ``GuardHooks``, an unguarded agent, one guard shared by two
    concurrent runs, a budget that can never trip); the message says how to fix it."""


class MissingGuard(GuardSetupError, TypeError):
    """The run context holds no ``StopRepeatedCalls`` (a ``TypeError`` too, as in earlier versions)."""


NO_HOOKS = (
    "repeat-hooks: a guarded agent ran without GuardHooks, so no turn was started and the counts (and the "
    "last stop) of earlier runs would carry over: pass them to every run, "
    "Runner.run(agent, input, context=guard, hooks=GuardHooks()) (Runner.run_streamed too)"
)
"""A guarded agent's model or tool was called in a run without ``GuardHooks``."""

ONE_GUARD_PER_CONVERSATION = (
    "repeat-hooks: one guard per conversation: another run started turn {new} on this guard while this run "
    "(turn {old}) was still going, and the two runs would reset each other's counts. Give each conversation "
    "its own StopRepeatedCalls and run one turn of it at a time (queue or reject a message sent while a turn "
    "is running)"
)
"""Two runs overlap on one guard (``{old}``: this run's turn, ``{new}``: the one that replaced it)."""
