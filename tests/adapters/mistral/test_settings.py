"""Settings in the wrong place fail at once; hook points reach the guard at any depth; state names never collide.

Each test makes the mistake a user would make and checks what they would see: an error naming the right
spelling, or (for overrides and names) the counts the guard keeps through the SDK's real loop.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest
from mistralai.agents import agents
from mistralai.vibe.harness.core.protocol import HookToolCall, ProvidedToolCall
from mistralai.vibe.harness.runtime.capabilities import PreToolCallHookInvocation
from mistralai.vibe_agents.sdk.authoring.contracts import HookContext, HookSession
from repeat_hooks_mistral import RepeatGuardHook, state, stop_of
from repeat_hooks_mistral.testing import ScriptedModel, ToolUse, run_turn, tool_messages

from repeat_hooks import GuardSetupError, MemoryStore, Policy, StopReason

FR = {"tracking_number": "FR-7731"}
REFUSED = "Refused: you already called track_parcel 2 times"


class ParcelGuard(RepeatGuardHook):
    policy = Policy(match="tool", max_calls=2, max_refusals=3)


# -- 11. settings anywhere but the class body raise at once, with the right spelling ---------------------


def test_a_policy_set_on_a_hook_object_is_refused() -> None:
    hook = ParcelGuard()
    with pytest.raises(TypeError, match=r"class ParcelGuard\(RepeatGuardHook\): policy = Policy\(") as caught:
        hook.policy = Policy(max_calls=1)  # type: ignore[misc]
    assert "cannot be set on a hook object" in str(caught.value)


def test_a_policy_set_in_init_is_refused_when_the_hook_is_made() -> None:
    class InitGuard(RepeatGuardHook):
        def __init__(self) -> None:
            super().__init__()
            self.policy = Policy(max_calls=1)  # type: ignore[misc]

    with pytest.raises(TypeError, match=r"class InitGuard\(RepeatGuardHook\): policy = Policy\(max_calls=1"):
        InitGuard()


def test_fail_set_on_a_hook_object_is_refused() -> None:
    hook = ParcelGuard()
    with pytest.raises(TypeError, match=r"class ParcelGuard\(RepeatGuardHook\): fail = 'closed'"):
        hook.fail = "closed"  # type: ignore[misc]
    with pytest.raises(TypeError, match=r"class ParcelGuard\(RepeatGuardHook\): fail_closed = True"):
        hook.fail_closed = True


def test_a_policy_passed_to_the_constructor_is_refused() -> None:
    with pytest.raises(TypeError, match=r"policy = Policy\(max_calls=1"):
        ParcelGuard(max_calls=1)


def test_a_policy_field_as_a_class_variable_is_refused() -> None:
    with pytest.raises(TypeError, match=r"OneCall\.max_calls is a Policy setting.*policy = Policy\(max_calls=1\)"):

        class OneCall(RepeatGuardHook):
            max_calls = 1


def test_a_policy_field_set_on_the_class_later_is_refused() -> None:
    with pytest.raises(TypeError, match=r"policy = Policy\(max_calls=1\)"):
        ParcelGuard.max_calls = 1  # type: ignore[attr-defined]
    assert "max_calls" not in vars(ParcelGuard)


def test_a_misspelt_setting_or_a_policy_under_another_name_is_refused() -> None:
    with pytest.raises(TypeError, match=r"did you mean fail_closed = True"):

        class Typo(RepeatGuardHook):
            fail_close = True

    with pytest.raises(TypeError, match=r"Rules\.rules is a Policy the guard never reads: name it policy ="):

        class Rules(RepeatGuardHook):
            rules = Policy(max_calls=1)


def test_a_misspelt_setting_holding_what_the_setting_takes_is_refused() -> None:
    """Further from the name than a typo of one letter, a value the setting takes is the sign: ``fial = "closed"``
    would leave the guard failing open without a word. The hint names the setting, not the value's repr."""
    with pytest.raises(TypeError, match=r"Fial\.fial is not a guard setting: did you mean fail = 'closed'\?"):

        class Fial(RepeatGuardHook):
            fial = "closed"

    with pytest.raises(TypeError, match=r"OnStop\.onstop is not a guard setting: did you mean on_stop = 'raise'\?"):

        class OnStop(RepeatGuardHook):
            onstop = "raise"

    with pytest.raises(TypeError, match=r"Stor\.stor is not a guard setting: did you mean store = \.\.\.\?$"):

        class Stor(RepeatGuardHook):
            stor = MemoryStore()

    class Own(RepeatGuardHook):  # a name near a setting with a value it never takes is the subclass's own
        failure = 3
        stories = ("FR-7731",)

    assert Own.failure == 3 and Own.core.fail == "open"


def test_0_2_fail_closed_says_the_fail_it_means_and_refuses_a_fail_saying_otherwise() -> None:
    with pytest.deprecated_call(match=r'Open\.fail_closed is deprecated: use fail = "open"'):

        class Open(RepeatGuardHook):
            fail_closed = False

    assert Open.core.fail == "open"
    with pytest.raises(GuardSetupError, match=r"Both sets fail_closed = True and fail = 'open': keep only fail ="):

        class Both(RepeatGuardHook):
            fail_closed = True
            fail = "open"

    with pytest.deprecated_call(match=r'Open\.fail_closed is deprecated: use fail = "closed"'):
        Open.fail_closed = True  # set later, it decides again
    assert Open.core.fail == "closed"


def test_a_setting_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(TypeError, match=r"Wrong takes a repeat_hooks\.Policy, not str"):

        class Wrong(RepeatGuardHook):
            policy = "max_calls=2"  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"fail_closed must be True or False"):

        class Closed(RepeatGuardHook):
            fail_closed = "yes"  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"takes a repeat_hooks StateStore .*not dict .*class body of ParcelGuard"):
        ParcelGuard.store = {}  # type: ignore[assignment]
    assert isinstance(ParcelGuard.store, MemoryStore) and ParcelGuard.core.store is ParcelGuard.store


def test_the_hook_object_may_still_hold_what_the_sdk_gives_it(agent_for: Any) -> None:
    """The checks refuse settings only: the SDK's own ``tools=`` still works, and ``to_workflow()`` builds."""

    class ToolsGuard(RepeatGuardHook):  # its own name: rc11 registers workflow hooks by class name
        policy = Policy(match="tool", max_calls=2, max_refusals=3)

    hook = ToolsGuard(tools=())
    agent_for(ScriptedModel.keep_calling("track_parcel", FR), hook).to_workflow()


# -- 12. policy changed on a class after it was made: refused --------------------------------------------


def test_changing_the_policy_of_a_class_is_refused_with_the_subclass_spelling() -> None:
    class Quiet(RepeatGuardHook):
        policy = Policy(match="tool", max_calls=2)

    with pytest.raises(TypeError, match=r"class StrictQuiet\(Quiet\): policy = Policy\(\.\.\.\)"):
        Quiet.policy = Policy(max_model_calls=2)  # type: ignore[misc]
    assert Quiet.policy == Policy(match="tool", max_calls=2)


async def test_a_subclass_with_a_budget_binds_what_its_policy_needs(carrier: Any, agent_for: Any) -> None:
    """The spelling the error gives works: the subclass's model budget trips through the real loop."""

    class Quiet(RepeatGuardHook):
        policy = Policy(match="tool", max_calls=9, max_refusals=None)

    class Budgeted(Quiet):
        policy = Policy(match="tool", max_calls=9, max_refusals=None, max_model_calls=2)

    model = ScriptedModel.keep_calling("track_parcel", FR)
    async with await agent_for(model, Budgeted()).create_session() as session:
        await run_turn(session, "Keep checking FR-7731.")
        stop = await stop_of(session, guard=Budgeted)

    assert len(model.requests) == 2
    assert stop is not None and stop.reason is StopReason.MAX_STEPS
    assert Quiet.pre_llm_call is agents.Hook.pre_llm_call, "the parent still offers rc11 no pre_llm_call"


# -- 13. an override that calls super() reaches the guard at any depth -----------------------------------

SEEN: list[str] = []


class CountOnly(RepeatGuardHook):
    """No stop rule: this class offers rc11 no pre_llm_call."""

    policy = Policy(match="tool", max_calls=2, max_refusals=None)


class LoggedGuard(CountOnly):
    """A subclass of a subclass that adds a stop rule and overrides pre_llm_call, calling super()."""

    policy = Policy(match="tool", max_calls=2, max_refusals=3)

    async def pre_llm_call(self, ctx: Any, invocation: Any) -> Any:
        SEEN.append("pre_llm_call")
        return await super().pre_llm_call(ctx, invocation)


class DeeperGuard(LoggedGuard):
    """One level further down, overriding another point, also calling super()."""

    async def pre_tool_call(self, ctx: Any, call: Any) -> Any:
        SEEN.append("pre_tool_call")
        return await super().pre_tool_call(ctx, call)


@pytest.mark.parametrize("guard_class", [LoggedGuard, DeeperGuard])
async def test_an_override_calling_super_reaches_the_guard_at_any_depth(
    guard_class: type[RepeatGuardHook], carrier: Any, agent_for: Any
) -> None:
    SEEN.clear()
    model = ScriptedModel.keep_calling("track_parcel", FR)
    async with await agent_for(model, guard_class()).create_session() as session:
        result = await run_turn(session, "Keep checking FR-7731.")
        stop = await stop_of(session, guard=guard_class)

    assert len(carrier.calls) == 2
    assert len(model.requests) == 5, "3 refusals, then the override's super() ended the turn"
    assert [m.startswith(REFUSED) for m in tool_messages(model.requests[-1])] == [False, False, True, True]
    assert stop is not None and stop.reason is StopReason.IGNORED_REFUSALS
    assert result.text == ""
    assert SEEN.count("pre_llm_call") == 6
    assert SEEN.count("pre_tool_call") == (5 if guard_class is DeeperGuard else 0)


def test_which_hook_points_rc11_sees_follows_each_class_policy() -> None:
    hook = agents.Hook
    assert CountOnly.pre_llm_call is hook.pre_llm_call
    assert LoggedGuard.pre_llm_call is LoggedGuard.__dict__["pre_llm_call"], "a user's own method is kept"
    assert DeeperGuard.pre_llm_call is LoggedGuard.__dict__["pre_llm_call"]
    assert CountOnly.pre_tool_call is not hook.pre_tool_call


# -- 14. state names: module.qualname, and two classes with one name are an error ------------------------


def _named(module: str, store: MemoryStore, **namespace: Any) -> type[RepeatGuardHook]:
    body = {"__module__": module, "__qualname__": "Guard", "policy": Policy(match="tool", max_calls=2)}
    body["store"] = store
    body.update(namespace)
    return cast(type[RepeatGuardHook], type(RepeatGuardHook)("Guard", (RepeatGuardHook,), body))


def _context(session_id: str) -> HookContext:
    return HookContext(session=HookSession(id=session_id, turn_id="turn-1"), harness=cast(Any, None))


def _pre_tool_call() -> Any:
    call = ProvidedToolCall(group_name="client", tool_name="track_parcel", arguments=FR)
    tool_call = HookToolCall(action_id="a", call_id="call_1", call=call)
    return PreToolCallHookInvocation(action_id="h", turn_id="turn-1", binding_id="b", tool_call=tool_call)


async def test_two_classes_named_guard_in_two_modules_keep_apart_counts_in_one_store() -> None:
    shared = MemoryStore()
    shop, billing = _named("shop.guards", shared), _named("billing.guards", shared)
    assert (shop.state_name, billing.state_name) == ("shop.guards.Guard", "billing.guards.Guard")

    ctx = _context("session-1")
    for _ in range(2):
        assert type(await shop().pre_tool_call(ctx, _pre_tool_call())).__name__ == "PreToolCallHookContinue"
    decision = await billing().pre_tool_call(ctx, _pre_tool_call())

    assert type(decision).__name__ == "PreToolCallHookContinue", "billing's 1st call was counted as shop's 3rd"
    assert len(shared) == 2


def test_two_classes_with_one_explicit_state_name_are_an_error() -> None:
    first = _named("shop.guards", MemoryStore(), state_name="guard")
    clash = r"billing\.guards\.Guard and shop\.guards\.Guard both store their states under state_name 'guard'"
    with pytest.raises(TypeError, match=clash):
        _named("billing.guards", MemoryStore(), state_name="guard")
    again = _named("shop.guards", MemoryStore(), state_name="guard")  # the same class, imported again: fine
    assert again.state_name == first.state_name
    billing = _named("billing.guards", MemoryStore())
    with pytest.raises(TypeError, match="both store their states under state_name 'guard'"):
        billing.state_name = "guard"
    assert billing.state_name == "billing.guards.Guard"


def test_the_default_state_name_is_module_and_qualname() -> None:
    assert ParcelGuard.state_name == f"{__name__}.ParcelGuard"
    assert ParcelGuard.state_key("s-1") == f"{__name__}.ParcelGuard:s-1"


# -- 15. the default in-process store: 1024 sessions, LRU, configurable, loud when it forgets -----------


def test_the_default_store_keeps_1024_sessions_and_a_class_may_set_its_own() -> None:
    class Big(RepeatGuardHook):
        store = MemoryStore(max_sessions=100_000)

    assert isinstance(ParcelGuard.store, MemoryStore) and ParcelGuard.store.max_sessions == 1024
    assert Big.store.max_sessions == 100_000  # type: ignore[attr-defined]


async def test_the_default_store_warns_the_first_time_it_forgets_a_session(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(state, "DEFAULT_MAX_SESSIONS", 2)

    class Small(RepeatGuardHook):
        policy = Policy(match="tool", max_calls=1)

    hook = Small()
    with caplog.at_level(logging.WARNING, logger="repeat_hooks_mistral"):
        await hook.pre_tool_call(_context("a"), _pre_tool_call())
        await hook.pre_tool_call(_context("b"), _pre_tool_call())
        assert "forgetting" not in caplog.text
        await hook.pre_tool_call(_context("c"), _pre_tool_call())  # "a" is forgotten
        await hook.pre_tool_call(_context("d"), _pre_tool_call())  # "b" too: no second warning
        again = await hook.pre_tool_call(_context("a"), _pre_tool_call())

    assert caplog.text.count("has begun forgetting the least recently used") == 1
    assert "store = MemoryStore(max_sessions=...)" in caplog.text
    assert type(again).__name__ == "PreToolCallHookContinue", "a forgotten session counts from zero"


# -- a tool name in the policy that is none of the agent's tools: the first hook call fails the turn ------


class TypoGuard(RepeatGuardHook):
    policy = Policy(limits={"track_parcels": 1})


async def test_a_policy_naming_a_tool_the_agent_lacks_fails_the_turn_before_the_model_is_called(
    carrier: Any, agent_for: Any
) -> None:
    model = ScriptedModel.keep_calling("track_parcel", FR)
    typo = r"limits=\.\.\.\) names 'track_parcels', which is none of TypoGuard's agent's tools; "
    typo += "did you mean 'track_parcel'"
    async with await agent_for(model, TypoGuard()).create_session() as session:
        with pytest.raises(agents.TurnFailedError, match=typo):
            await run_turn(session, "Where is FR-7731?")

    assert model.requests == [] and carrier.calls == []


class OtherGroupsGuard(RepeatGuardHook):
    """Names an MCP server's tool (``group.tool``): rc11 lists those only at run time, so they are not checked."""

    policy = Policy(match="tool", limits={"track_parcel": 1}, read_only=frozenset({"carrier.track_parcel"}))


async def test_tools_of_other_groups_are_not_checked_and_the_agent_s_own_are_found(
    carrier: Any, agent_for: Any
) -> None:
    model = ScriptedModel.keep_calling("track_parcel", FR)
    async with await agent_for(model, OtherGroupsGuard()).create_session() as session:
        result, stop = await OtherGroupsGuard.run(session, "Keep checking FR-7731.")

    assert len(carrier.calls) == 1, "limits={'track_parcel': 1} applies"
    assert stop is not None and result.text == stop.message


async def test_the_hook_itself_guards_with_the_default_policy(carrier: Any, agent_for: Any) -> None:
    """``hooks=[RepeatGuardHook()]``, no subclass: ``Policy()``, the same scan twice, the 3rd call refused."""
    model = ScriptedModel.replies(*[ToolUse("track_parcel", FR)] * 3, "FR-7731 is in transit.")
    result, stop = await RepeatGuardHook.run(agent_for(model, RepeatGuardHook()), "Where is FR-7731?")

    assert RepeatGuardHook.policy == Policy()
    assert len(carrier.calls) == 2
    assert [m.startswith("Refused") for m in tool_messages(model.requests[-1])] == [False, False, True]
    assert (result.text, stop) == ("FR-7731 is in transit.", None)
