"""This module exists because rc11 rebuilds hook objects from their class: a guard's settings are class variables.

They are checked where they are written, each class gets its ``GuardCore`` from them (``configure``), and
``GuardClass`` offers rc11 only the hook points the class's policy needs (each one is a step of rc11's loop).
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Iterator
from typing import Any

from mistralai.agents import agents

from repeat_hooks import GuardSetupError, Policy, StateStore, TokenPrices
from repeat_hooks.kit import GuardCore
from repeat_hooks.stop_rules import Feed, HookPoint

from .calls import FEEDS
from .state import ClassStore

CORE = ("store", "cost", "is_failure", "check_tools", "on_stop", "fail")
"""The settings a class hands its ``GuardCore`` as they are."""
SETTINGS = ("policy", "state_name", "clock", *CORE, "fail_closed")
"""The class variables a guard reads (``fail_closed``: deprecated, ``fail = "closed"``); nothing else configures it."""
REPLACED = ("usd_per_million_input_tokens", "usd_per_million_output_tokens")
"""Settings of repeat-hooks-mistral 0.1, which ``cost = TokenPrices(...)`` replaces."""
POLICY_FIELDS = frozenset(Policy.model_fields)
HOOK_POINTS = ("pre_tool_call", "post_tool_call", "pre_llm_call", "post_llm_call")
"""The rc11 hook points the guard implements, named as the core's ``HookPoint`` (no ``pre_agent_turn``: every
hook call carries ``ctx.session.turn_id``)."""
NO_LATENCY = "rc11 records no model latency: post_llm_call carries token usage only"
NO_ANSWERS = (
    "a turn ends in CompletedTurn with the model's answer (vibe/harness/core/protocol.py:310), so no answer repeats "
    "within one"
)


def hook_points(policy: Policy) -> dict[str, bool]:
    """Which rc11 hook points ``policy`` needs (``Policy.hook_points``; ``post_tool_call`` too for ``warn=True``,
    whose note goes with the result that hook returns): a class offers rc11 only these."""
    needed = policy.hook_points() | ({HookPoint.POST_TOOL_CALL} if Feed.WARNINGS in policy.feeds() else set())
    return {point: HookPoint(point) in needed for point in HOOK_POINTS}


def _hook_point(point: str) -> Any:
    """A hook point as read on a guard class (a data descriptor on the metaclass): ``agents.Hook``'s own when the
    class's policy does not need it and nobody overrode the guard's; hook objects and ``super()`` read the
    classes' own dicts, so an override calling ``super()`` reaches the guard at any depth."""

    def read(cls: Any) -> Any:
        value = next(klass.__dict__[point] for klass in cls.__mro__ if point in klass.__dict__)
        root = next(klass for klass in reversed(cls.__mro__) if isinstance(klass, GuardClass))
        if value is root.__dict__[point] and not hook_points(cls.policy)[point]:
            return getattr(agents.Hook, point)
        return value

    def write(cls: type, value: Any) -> None:
        spelling = f"(async def {point}(self, ...): ... return await super().{point}(...))"
        raise TypeError(f"{cls.__name__}.{point} cannot be replaced once the class is made: override it {spelling}")

    return property(read, write)


class GuardClass(type):
    """The metaclass of ``RepeatGuardHook``: offers rc11 the hook points a policy needs, checks every setting
    written on a class (a later ``store``, ``cost``... rebuilds its ``core``), refuses a later ``policy``."""

    pre_tool_call = _hook_point("pre_tool_call")
    post_tool_call = _hook_point("post_tool_call")
    pre_llm_call = _hook_point("pre_llm_call")
    post_llm_call = _hook_point("post_llm_call")

    def __setattr__(cls, name: str, value: Any) -> None:
        if name == "policy":
            why = "rc11 binds a policy's hook points when it builds the agent: a later one would be half applied"
            subclass = f"class Strict{cls.__name__}({cls.__name__}): policy = Policy(...)"
            raise TypeError(f"{cls.__name__}.policy cannot change once the class is made: {why}. Write {subclass}")
        _check_name(cls.__name__, name, value)
        if name not in SETTINGS:
            return type.__setattr__(cls, name, value)
        before = cls.__dict__.get(name, _UNSET)
        if name == "fail_closed" and before is not _UNSET:  # the fail the earlier one set is derived again
            type.__delattr__(cls, "fail")
        type.__setattr__(cls, name, value)
        try:
            configure(cls)
        except BaseException:
            if before is _UNSET:
                type.__delattr__(cls, name)
            else:
                type.__setattr__(cls, name, before)
            configure(cls)
            raise
        for guard in _guards(cls):
            if guard is not cls:
                configure(guard)


_UNSET = object()


def _check_name(owner: str, name: str, value: Any) -> None:
    """Refuse a class variable the guard would not read: a ``Policy`` field, a 0.1 setting, a misspelt one."""
    if name in POLICY_FIELDS:
        raise TypeError(
            f"{owner}.{name} is a Policy setting, which the guard reads only from its policy: write "
            f"policy = Policy({name}={value!r}) in the class body"
        )
    if name in REPLACED:
        raise TypeError(
            f"{owner}.{name} is no longer a setting: write cost = TokenPrices(input_usd_per_million, "
            "output_usd_per_million) in a class body"
        )
    if name in SETTINGS or name.startswith("__") or isinstance(value, staticmethod | classmethod):
        return
    if isinstance(value, Policy):
        raise TypeError(f"{owner}.{name} is a Policy the guard never reads: name it policy = Policy(...)")
    close = difflib.get_close_matches(name, SETTINGS, n=1, cutoff=0.6)
    fits = bool(close) and _fits(close[0], value)  # a value the close setting takes: a strong sign
    if callable(value) and not fits:  # a method, or a helper of the subclass's own
        return
    if close and (fits or difflib.get_close_matches(name, close, cutoff=0.85)):
        shown = spell(value) if value is None or isinstance(value, str | int | float | Policy) else "..."
        raise TypeError(f"{owner}.{name} is not a guard setting: did you mean {close[0]} = {shown}?")


def _fits(setting: str, value: Any) -> bool:
    """Whether ``value`` is one the guard setting ``setting`` takes (``fail``'s ``"closed"``, a store...)."""
    choices = {"fail": ("open", "closed"), "on_stop": ("reply", "raise")}.get(setting, ())
    kind = {"store": StateStore, "cost": TokenPrices, "check_tools": bool, "fail_closed": bool}.get(setting)
    return (isinstance(value, str) and value in choices) or (kind is not None and isinstance(value, kind))


def configure(guard: Any) -> None:
    """Check a guard class's body, name its states, give it its own store unless it names or inherits one, and
    build its ``core`` from its settings. Raises with the right spelling (``TypeError``, ``GuardSetupError``)."""
    name = guard.__name__
    for attribute, value in list(vars(guard).items()):
        _check_name(name, attribute, value)
    if "fail_closed" in vars(guard):
        closed, fail = vars(guard)["fail_closed"], vars(guard).get("fail")
        if not isinstance(closed, bool):
            raise TypeError(f"{name}.fail_closed must be True or False, got {closed!r}: write fail = 'closed'")
        implied = "closed" if closed else "open"
        if fail not in (None, implied):
            raise GuardSetupError(f"{name} sets fail_closed = {closed} and fail = {fail!r}: keep only fail = {fail!r}")
        warnings.warn(f'{name}.fail_closed is deprecated: use fail = "{implied}"', DeprecationWarning, stacklevel=4)
        type.__setattr__(guard, "fail", implied)
    if "state_name" not in vars(guard):
        type.__setattr__(guard, "state_name", f"{guard.__module__}.{guard.__qualname__}")
    _claim_state_name(guard)
    inherited = getattr(guard, "store", None)
    if "store" not in vars(guard) and (inherited is None or type(inherited) is ClassStore):
        type.__setattr__(guard, "store", ClassStore(name))
    try:
        core = GuardCore(
            guard.policy,
            owner=name,
            **{key: getattr(guard, key) for key in CORE},
            clock=guard.clock,
            feeds=FEEDS,
            why={Feed.SECONDS: NO_LATENCY, Feed.ANSWERS: NO_ANSWERS},
            how={Feed.COST: f"class {name}(RepeatGuardHook): cost = TokenPrices(...)"},
            spelling=f"class {name}(RepeatGuardHook): policy = Policy(...)",
        )
    except TypeError as error:
        raise TypeError(f"{error} (a class variable: set it in the class body of {name})") from None
    type.__setattr__(guard, "core", core)


def instance_setting_message(owner: str, name: str, value: Any) -> str:
    """Why a setting cannot be given to a hook object, and where it goes instead."""
    where = f"policy = Policy({name}={value!r})" if name in POLICY_FIELDS else f"{name} = {spell(value)}"
    return (
        f"{owner}: {name} cannot be set on a hook object: rc11 rebuilds hook objects from their class (per "
        f"hook point, per activity), so it would be ignored. Set it in the class body: class {owner}(RepeatGuardHook): "
        f"{where}"
    )


def spell(value: Any) -> str:
    """``value`` as it would be written in a class body: a ``Policy`` with only its non-default settings."""
    if not isinstance(value, Policy):
        return repr(value)
    given = [
        (key, getattr(value, key))
        for key, field in Policy.model_fields.items()
        if getattr(value, key) != field.get_default(call_default_factory=True)
    ]
    return "Policy(" + ", ".join(f"{key}={setting!r}" for key, setting in given) + ")"


def _guards(guard: type) -> Iterator[Any]:
    """``guard`` and its live subclasses that were made (a class whose body raised has no ``core``)."""
    stack = [guard]
    while stack:
        klass = stack.pop()
        stack.extend(klass.__subclasses__())
        if "core" in vars(klass):
            yield klass


def _claim_state_name(guard: Any) -> None:
    """Raise ``TypeError`` if another live guard class of this process (not this one imported again: the same
    module and qualified name) stores its states under ``guard``'s ``state_name``: they would share counts."""
    name = guard.state_name
    if not (isinstance(name, str) and name):
        raise TypeError(f"{guard.__name__}.state_name must be a non-empty str, got {name!r}")
    root = next(klass for klass in reversed(guard.__mro__) if isinstance(klass, GuardClass))
    for other in _guards(root):
        same = (other.__module__, other.__qualname__) == (guard.__module__, guard.__qualname__)
        if other is not guard and not same and other.state_name == name:
            both = f"{guard.__module__}.{guard.__qualname__} and {other.__module__}.{other.__qualname__}"
            raise TypeError(f"{both} both store their states under state_name {name!r}: give each its own state_name")
