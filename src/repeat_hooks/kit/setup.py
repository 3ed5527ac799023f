"""Setup mistakes every adapter refuses the same way: at construction (or the first call that can see
them), with a message that says the right spelling. Nothing here is a silent no-op."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import GuardSetupError
from ..policy import Policy
from ..stop_rules import STOP_RULES, Feed

__all__ = ["check_budgets", "check_feeds", "check_tool_names", "policy_from"]

_SETTINGS = tuple(Policy.model_fields)
_NAMED_TOOLS = ("limits", "exempt", "read_only", "destructive")


def policy_from(
    policy: Any = None,
    settings: Mapping[str, Any] | None = None,
    *,
    owner: str,
    spelling: str | None = None,
    keywords: Iterable[str] = (),
) -> Policy:
    """The ``Policy`` an adapter's guard runs: ``policy`` itself, ``Policy(**settings)``, or the default.

    ``owner`` names the adapter's class in the messages (``"RepeatGuardPlugin"``); ``spelling`` is the right
    call to show, where it is not ``owner(Policy(...))`` (``"guard_agent(agent, Policy(...))"``). Raises
    ``TypeError`` for a ``StopRepeatedCalls`` (one conversation's guard, not settings), anything else that is not a
    ``Policy``, both a policy and settings, or a setting ``Policy`` does not have (naming the closest one, or the
    closest of the guard's own ``keywords``: ``stor`` -> ``store=``); invalid values raise pydantic's
    ``ValidationError`` naming the field.
    """
    settings = dict(settings or {})
    right = spelling or f"{owner}(Policy(...))"
    if policy is not None:
        if isinstance(policy, type):
            raise TypeError(f"{owner} takes a Policy instance, not the class {policy.__name__}: pass {right}")
        if not isinstance(policy, Policy):
            held = getattr(policy, "policy", None)
            if isinstance(held, Policy):
                raise TypeError(
                    f"{owner} takes a Policy, not a {type(policy).__name__} (which holds one conversation's "
                    f"counts): {right}, or the settings as keywords; each conversation gets its own state"
                )
            raise TypeError(f"{owner} takes a repeat_hooks.Policy, not {type(policy).__name__}: {right}")
        if settings:
            raise TypeError(
                f"{owner} takes a Policy or the settings as keywords, not both: put "
                f"{', '.join(sorted(settings))} inside Policy(...)"
            )
        return policy
    for name in settings:
        if name not in Policy.model_fields:
            keyword = difflib.get_close_matches(name, list(keywords), n=1, cutoff=0.5)
            if keyword and not difflib.get_close_matches(name, _SETTINGS, n=1, cutoff=0.8):
                raise TypeError(f"{owner} got an unexpected keyword {name!r}: did you mean {keyword[0]}=...?")
            close = difflib.get_close_matches(name, _SETTINGS, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise TypeError(
                f"{owner} got an unknown setting {name!r}{hint}; the settings are Policy's: {', '.join(_SETTINGS)}"
            )
    return Policy(**settings)


def check_feeds(
    policy: Policy,
    *,
    can: Iterable[Feed],
    owner: str,
    how: Mapping[Feed, str] | None = None,
    why: Mapping[Feed, str] | None = None,
    error: type[GuardSetupError] = GuardSetupError,
) -> None:
    """Raise ``GuardSetupError`` if ``policy`` needs a figure the adapter cannot (or was not set up to) feed.

    ``can``: what the adapter feeds as set up; ``how``: for a figure it could feed with more setup, the
    spelling that does it (``{Feed.COST: "RepeatGuard(policy, cost=TokenPrices(...))"}``), else the budget
    is said to be one this SDK cannot feed, for the reason ``why`` gives (``{Feed.SECONDS: "rc11 records no
    model latency"}``). ``error``: the adapter's own ``GuardSetupError`` subclass, if any.
    """
    missing = policy.feeds() - frozenset(can)
    for rule in STOP_RULES:
        if rule.feed in missing and getattr(policy, rule.setting) is not None:
            fix = (how or {}).get(rule.feed)
            reason = (why or {}).get(rule.feed)
            cannot = f"{owner} cannot feed {rule.feed.value}" + (f" ({reason})" if reason else "")
            advice = f"set it up with {fix}" if fix else f"{cannot}: leave it None"
            raise error(f"Policy({rule.setting}=...) could never trip: {advice}")
    if Feed.WARNINGS in missing:
        raise error(
            f"Policy(warn=True) needs {owner} to hand the model a note with a result, which it cannot "
            f"({(why or {}).get(Feed.WARNINGS, 'not supported')}): leave warn off"
        )
    if Feed.OUTCOMES in missing:
        raise error(
            f"{owner} does not record tool outcomes, which count='progress' and count_failures=False need: "
            "use Policy(count='per_turn')"
        )


def check_budgets(
    policy: Policy,
    *,
    owner: str,
    cost: object | None,
    clock: object | None,
    feeds: Iterable[Feed] = (Feed.OUTCOMES, Feed.MODEL_CALLS),
    why: Mapping[Feed, str] | None = None,
    how: Mapping[Feed, str] | None = None,
    error: type[GuardSetupError] = GuardSetupError,
) -> None:
    """``check_feeds`` for the usual adapter, whose guard takes ``cost=`` and ``clock=``: ``feeds`` is what it
    always feeds; a ``cost`` feeds ``max_cost_usd`` and a ``clock`` feeds ``max_model_seconds``, and the
    message for a missing one names that keyword (``owner(..., cost=TokenPrices(...))``; ``how`` spells it
    otherwise, per figure). A ``cost`` that is not callable, or a ``clock`` that is not, raises ``TypeError`` with
    the right spelling."""
    if cost is not None and not callable(cost):
        raise TypeError(
            f"{owner}(cost=...) takes a CostOf, a function of one response's usage, such as "
            f"TokenPrices(input_usd_per_million, output_usd_per_million); got {type(cost).__name__}"
        )
    if clock is not None and not callable(clock):
        raise TypeError(
            f"{owner}(clock=...) takes a Clock, a function returning seconds, such as "
            f"repeat_hooks.kit.monotonic; got {type(clock).__name__}"
        )
    can = set(feeds)
    if cost is not None:
        can.add(Feed.COST)
    if clock is not None:
        can.add(Feed.SECONDS)
    default_how = {
        Feed.COST: f"{owner}(..., cost=TokenPrices(input_usd_per_million, output_usd_per_million))",
        Feed.SECONDS: f"{owner}(..., clock=repeat_hooks.kit.monotonic) (the default)",
    }
    how = {**default_how, **(how or {})}
    how = {feed: fix for feed, fix in how.items() if feed not in (why or {})}  # a figure this SDK never feeds
    check_feeds(policy, can=can, owner=owner, how=how, why=why, error=error)


def check_tool_names(
    policy: Policy, tools: Iterable[str], *, owner: str, error: type[GuardSetupError] = GuardSetupError
) -> None:
    """Raise ``GuardSetupError`` (or ``error``, the adapter's subclass) if a tool named in ``limits``,
    ``exempt``, ``read_only`` or ``destructive`` matches none of ``tools`` (the agent's tool names), naming
    the closest real one: a typo there would leave the tool unguarded without a word."""
    known = sorted(set(tools))
    for setting in _NAMED_TOOLS:
        for name in sorted(getattr(policy, setting)):
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
                hint = (
                    f"; did you mean {close[0]!r}?"
                    if close
                    else f"; the agent's tools are {', '.join(known) or 'none'}"
                )
                raise error(f"Policy({setting}=...) names {name!r}, which is none of {owner}'s agent's tools{hint}")
