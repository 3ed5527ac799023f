"""The guard's errors, defined once: a setup that could not work, and a store that could not decide.

Adapters subclass ``GuardSetupError`` together with their SDK's own setup error where the SDK must re-raise it
as it is; they catch ``StoreUnavailable`` (and every other store error: ``repeat_hooks.kit.outage``) to fail
open or closed. Nothing here needs a store's optional dependencies.
"""

from __future__ import annotations


class GuardSetupError(ValueError):
    """A guard is set up so that it could not work as written (a budget nothing feeds, a tool name that
    matches no tool, a policy given twice, a digest key other than the conversation's); the message says how to
    fix it. Raised at construction, or at the first hook call that can see the mistake."""


class StoreUnavailable(RuntimeError):
    """The store could not decide: its server is unreachable, timed out, answered an error, or holds a
    state that is not a ``GuardState``. The cause is chained (``__cause__``).

    After a timeout or a lost connection, the write may or may not have happened. Adapters catch this
    to fail open (let the call run, log the error) or fail closed (refuse it).
    """


class StateCorrupt(StoreUnavailable):
    """The stored state is not a ``GuardState`` (written by someone else, or damaged). The message says how
    to recover: delete it, and the conversation counts afresh."""


class StoreContention(StoreUnavailable):
    """Other writers kept the session busy: ``max_attempts`` compare-and-sets lost, or ``max_wait`` seconds
    spent waiting for their leases. Nothing was written by this update."""
