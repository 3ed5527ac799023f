"""A guard class's settings: where they may be written, which hook points they bind, which name states take.

Why this module exists beyond the adapter shape (``guard``, ``calls``, ``state``, ``testing``): rc11
rebuilds hook objects from their class (per hook point under ``local_runtime()``, per activity when
deployed) and refuses hooks with instance attributes, so a guard's settings can only be class variables
of a ``RepeatGuardHook`` subclass, written in its body; and rc11 makes every hook point a class overrides
a step of its loop, so which points a class offers must follow its policy. Settings written anywhere else
(a hook object, ``self.x`` in ``__init__``, a ``Policy`` field as a class variable, ``policy`` changed on
the class later) would be silently ignored by the rebuilt hooks, so ``GuardClass`` and
``RepeatGuardHook`` refuse them at once, with the right spelling in the message.
"""

from __future__ import annotations

import difflib
import weakref
from collections.abc import Callable
from typing import Any

from mistralai.agents import agents

from repeat_hooks import Policy, StateStore
from repeat_hooks.stop_rules import HookPoint

SETTINGS = ("policy", "store", "state_name", "fail_closed", "cost")
"""The class variables a guard reads; nothing else configures it."""
REPLACED = {
    "usd_per_million_input_tokens": "cost = TokenPrices(input_usd_per_million, output_usd_per_million)",
    "usd_per_million_output_tokens": "cost = TokenPrices(input_usd_per_million, output_usd_per_million)",
}
"""Settings of repeat-hooks-mistral 0.1 and what replaces them."""
POLICY_FIELDS = frozenset(Policy.model_fields)
"""``Policy``'s settings (``max_calls``, ``match``, ...): they go inside ``policy = Policy(...)``."""
HOOK_POINTS = {
    "pre_tool_call": HookPoint.PRE_TOOL_CALL,
    "post_tool_call": HookPoint.POST_TOOL_CALL,
    "pre_llm_call": HookPoint.PRE_LLM_CALL,
    "post_llm_call": HookPoint.POST_LLM_CALL,
}
"""The rc11 hook points the guard implements, and the core's name for each. The core's
``pre_agent_turn`` needs no rc11 hook: every hook call carries ``ctx.session.turn_id``, which starts the
turn's count at the turn's first call."""

_IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {}
"""``RepeatGuardHook``'s own method for each hook point (filled by ``implement``)."""
_STATE_NAMES: dict[str, weakref.ref[type]] = {}
"""Which guard class stores its states under each ``state_name``, in this process."""


def hook_points(policy: Policy) -> dict[str, bool]:
    """Which rc11 hook points ``policy`` needs (``Policy.hook_points``). rc11 runs a hook point only if the
    class overrides it, and each one adds a step to every model or tool call of the loop, so the guard
    takes only these."""
    needed = policy.hook_points()
    return {point: core in needed for point, core in HOOK_POINTS.items()}


def implement(guard: type) -> None:
    """Record ``guard``'s own hook point methods: the ones ``GuardClass`` binds or hides by policy."""
    for point in HOOK_POINTS:
        _IMPLEMENTATIONS[point] = guard.__dict__[point]


def _hook_point(point: str) -> Any:
    """The class-level view of a hook point: a data descriptor on the metaclass, so it is what
    ``getattr(GuardClass, point)`` returns, while hook objects and ``super()`` still find the methods
    in the classes' own dicts (other class attributes keep Python's usual, fast lookup)."""

    def read(cls: type) -> Any:
        value = next(klass.__dict__[point] for klass in cls.__mro__ if point in klass.__dict__)
        if value is _IMPLEMENTATIONS.get(point) and not hook_points(_policy(cls))[point]:
            return getattr(agents.Hook, point)
        return value

    def write(cls: type, value: Any) -> None:
        raise TypeError(
            f"{cls.__name__}.{point} cannot be replaced once the class is made: override it in a subclass "
            f"(async def {point}(self, ...): ... return await super().{point}(...))"
        )

    return property(read, write, doc=f"``{point}`` as rc11 sees it on the class: bound only if the policy needs it.")


def _policy(cls: type) -> Policy:
    policy: Policy = getattr(cls, "policy")  # noqa: B009 - read through the class's MRO
    return policy


class GuardClass(type):
    """The metaclass of ``RepeatGuardHook``: offers rc11 the hook points a policy needs, refuses
    misplaced settings.

    rc11 decides which hook points a hook has with ``getattr(type(hook), point) is getattr(Hook, point)``.
    Read on the class, a hook point the class's policy does not need is ``agents.Hook``'s own (so rc11
    adds no loop step for it); read on a hook object, or through ``super()`` from a subclass at any
    depth, it is always the guard's, so a user's override that calls ``super()`` reaches the guard.
    """

    pre_tool_call = _hook_point("pre_tool_call")
    post_tool_call = _hook_point("post_tool_call")
    pre_llm_call = _hook_point("pre_llm_call")
    post_llm_call = _hook_point("post_llm_call")

    def __setattr__(cls, name: str, value: Any) -> None:
        if name == "policy":
            raise TypeError(
                f"{cls.__name__}.policy cannot change once the class is made: rc11 takes the hook points "
                "a policy needs when it builds the agent, so a later policy would be half applied. Write it "
                f"in a class body: class Strict{cls.__name__}({cls.__name__}): policy = Policy(...)"
            )
        if name in POLICY_FIELDS:
            raise TypeError(_policy_field_message(cls.__name__, name, value))
        if name in REPLACED:
            raise TypeError(f"{cls.__name__}.{name} is no longer a setting: write {REPLACED[name]} in a class body")
        check_setting(cls.__name__, name, value)
        before = cls.__dict__.get(name)
        type.__setattr__(cls, name, value)
        if name == "state_name":
            try:
                claim_state_name(cls)
            except TypeError:
                type.__setattr__(cls, name, before)
                raise


def check_setting(owner: str, name: str, value: Any) -> None:
    """Raise ``TypeError`` if ``value`` cannot be the setting ``name`` of guard class ``owner``."""
    if name == "policy" and not isinstance(value, Policy):
        raise TypeError(
            f"{owner}.policy must be a repeat_hooks.Policy, got {type(value).__name__}: "
            f"write policy = Policy(...) in the class body"
        )
    if name == "store" and not isinstance(value, StateStore):
        raise TypeError(f"{owner}.store must be a repeat_hooks.StateStore, got {type(value).__name__}")
    if name == "state_name" and not (isinstance(value, str) and value):
        raise TypeError(f"{owner}.state_name must be a non-empty str, got {value!r}")
    if name == "fail_closed" and not isinstance(value, bool):
        raise TypeError(f"{owner}.fail_closed must be True or False, got {value!r}")
    if name == "cost" and value is not None and not callable(value):
        raise TypeError(
            f"{owner}.cost must be a CostOf (the US dollars of one model call's usage), such as "
            f"TokenPrices(3, 15), or None; got {value!r}"
        )


def check_class_body(guard: type) -> None:
    """Refuse what a guard class body sets that the guard would not read: a ``Policy`` field as a class
    variable, a ``Policy`` under another name, a misspelt setting. Then check the settings' types."""
    owner = guard.__name__
    for name, value in guard.__dict__.items():
        if name.startswith("__") or name in SETTINGS:
            continue
        if callable(value) or isinstance(value, staticmethod | classmethod | property):
            continue
        if name in POLICY_FIELDS:
            raise TypeError(_policy_field_message(owner, name, value))
        if name in REPLACED:
            raise TypeError(f"{owner}.{name} is no longer a setting: write {REPLACED[name]}")
        if isinstance(value, Policy):
            raise TypeError(f"{owner}.{name} is a Policy the guard never reads: name it policy = Policy(...)")
        close = difflib.get_close_matches(name, SETTINGS, n=1, cutoff=0.85)
        if close:
            raise TypeError(f"{owner}.{name} is not a guard setting: did you mean {close[0]} = {spell(value)}?")
    for name in SETTINGS:
        if name in guard.__dict__:
            check_setting(owner, name, guard.__dict__[name])


def instance_setting_message(owner: str, name: str, value: Any) -> str:
    """Why a setting cannot be given to a hook object, and where it goes instead."""
    where = f"policy = Policy({name}={value!r})" if name in POLICY_FIELDS else f"{name} = {spell(value)}"
    return (
        f"{owner}: {name} cannot be set on a hook object: rc11 rebuilds hook objects from their class (per "
        "hook point, per activity), so it would be ignored. Set it in the class body: "
        f"class {owner}(RepeatGuardHook): {where}"
    )


def spell(value: Any) -> str:
    """``value`` as it would be written in a class body: a ``Policy`` with only its non-default settings."""
    if isinstance(value, Policy):
        given = [
            (name, getattr(value, name))
            for name, field in Policy.model_fields.items()
            if getattr(value, name) != field.get_default(call_default_factory=True)
        ]
        return "Policy(" + ", ".join(f"{name}={setting!r}" for name, setting in given) + ")"
    return repr(value)


def _policy_field_message(owner: str, name: str, value: Any) -> str:
    return (
        f"{owner}.{name} is a Policy setting, which the guard reads only from its policy: write "
        f"policy = Policy({name}={value!r}) in the class body"
    )


def default_state_name(guard: type) -> str:
    """``module.qualname`` of the class: the name rc11 itself rebuilds the hook by in a worker."""
    return f"{guard.__module__}.{guard.__qualname__}"


def claim_state_name(guard: type) -> None:
    """Record that ``guard`` stores its states under its ``state_name``; raise ``TypeError`` if another
    live guard class of this process already does (they would read and write each other's counts).

    The same class imported again (same module and qualified name) takes the name over.
    """
    name: str = getattr(guard, "state_name")  # noqa: B009 - typed as str here
    holder = _STATE_NAMES.get(name)
    other = holder() if holder is not None else None
    same = other is not None and (other.__module__, other.__qualname__) == (guard.__module__, guard.__qualname__)
    if other is not None and other is not guard and not same:
        raise TypeError(
            f"{guard.__module__}.{guard.__qualname__} and {other.__module__}.{other.__qualname__} both store "
            f"their states under state_name {name!r}: they would share every session's counts. Give each "
            "class its own state_name."
        )
    for key, ref in list(_STATE_NAMES.items()):  # a class renamed: free its old name
        if ref() is guard and key != name:
            del _STATE_NAMES[key]
    _STATE_NAMES[name] = weakref.ref(guard)
