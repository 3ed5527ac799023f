"""What a store raises when it cannot decide. Here, apart from the stores, so that adapters (and the
state loader) can catch them without a store's optional dependencies."""

from __future__ import annotations


class StoreUnavailable(RuntimeError):
    """The store could not decide: its server is unreachable, timed out, answered an error, or holds a
    state that is not a ``GuardState``. The cause is chained (``__cause__``).

    After a timeout or a lost connection, the write may or may not have happened. Adapters catch this
    to fail open (let the call run, log the error) or fail closed (refuse it). Shared stores raise it;
    it lives here so that adapters can catch it without the store's optional dependencies.
    """


class StateCorrupt(StoreUnavailable):
    """The stored state is not a ``GuardState`` (written by someone else, or damaged). The message says how
    to recover: delete it, and the conversation counts afresh."""


class StoreContention(StoreUnavailable):
    """Other writers kept the session busy: ``max_attempts`` compare-and-sets lost, or ``max_wait`` seconds
    spent waiting for their leases. Nothing was written by this update."""
