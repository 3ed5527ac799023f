"""Where the guard goes in ``middleware=[...]`` next to middleware with an ``after_agent`` hook, on the real
``create_agent`` loop. When every call of a response is refused, the guard's ``after_agent`` sends the agent
back to the model; ``after_agent`` hooks run in reverse list order, so one listed after the guard would already
have run as if the run were over (LangChain's ``ShellToolMiddleware`` closes its shell there). Listed after
every such middleware, the guard's runs first and the others run once, at the real end; listed before one, the
run fails with ``GuardSetupError`` naming the order that works, before anything runs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelCallLimitMiddleware, ShellToolMiddleware
from langchain_core.messages import ToolMessage
from langchain_parcels import ARGS, REFUSAL, STOPPED, USER, Carrier, parcel_agent, seed_004, thread
from langgraph.checkpoint.memory import InMemorySaver
from repeat_hooks_langchain import RepeatGuardMiddleware
from repeat_hooks_langchain.testing import ScriptedChatModel, answer, call_message, keep_calling, steps

from repeat_hooks import GuardSetupError


class TurnAudit(AgentMiddleware[Any, Any, Any]):
    """Bills a run in ``after_agent`` (a per-run memory, an audit log...)."""

    def __init__(self) -> None:
        super().__init__()
        self.started = 0
        self.ended = 0

    def before_agent(self, state: Any, runtime: Any) -> None:
        self.started += 1

    def after_agent(self, state: Any, runtime: Any) -> None:
        self.ended += 1


def test_listed_after_every_after_agent_hook_the_guard_sends_the_agent_back_before_they_run(carrier: Carrier) -> None:
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    audit, limit = TurnAudit(), ModelCallLimitMiddleware(thread_limit=100)
    agent = parcel_agent(model, carrier, middleware=[audit, limit, RepeatGuardMiddleware(seed_004())])

    result = agent.invoke(USER, thread("t1"))

    # 2 calls ran, 3 responses were refused whole (each sent back to the model), then the stop: one run.
    assert carrier.calls == ["FR-7731", "FR-7731"] and model.calls == 5
    assert [m.text for m in result["messages"] if isinstance(m, ToolMessage)][2:] == [REFUSAL] * 3
    assert result["messages"][-1].content == STOPPED
    assert (audit.started, audit.ended) == (1, 1)
    assert agent.get_state(thread("t1")).values["thread_model_call_count"] == 5


def test_a_middleware_with_an_after_agent_hook_listed_after_the_guard_fails_before_anything_runs(
    carrier: Carrier,
) -> None:
    model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    audit = TurnAudit()
    agent = parcel_agent(model, carrier, middleware=[RepeatGuardMiddleware(seed_004()), audit])

    spelled = r"list RepeatGuardMiddleware after it: create_agent\(\.\.\., middleware=\[TurnAudit\(\.\.\.\), "
    with pytest.raises(GuardSetupError, match=r"TurnAudit is listed after RepeatGuardMiddleware .*" + spelled):
        agent.invoke(USER, thread("t1"))
    with pytest.raises(GuardSetupError, match=spelled):
        asyncio.run(agent.ainvoke(USER, thread("t2")))
    assert (model.calls, carrier.calls, audit.ended) == (0, [], 0)


def shell_agent(model: ScriptedChatModel, workspace: Path, *, guard_last: bool) -> Any:
    shell = ShellToolMiddleware(workspace_root=str(workspace))
    guard = RepeatGuardMiddleware()
    middleware = [shell, guard] if guard_last else [guard, shell]
    return create_agent(model, tools=[], middleware=middleware, checkpointer=InMemorySaver())


def test_langchains_shell_keeps_its_session_when_the_guard_sends_the_agent_back(tmp_path: Path) -> None:
    (tmp_path / "status.txt").write_text("build: running\n")
    same = {"command": "cat status.txt"}
    model = ScriptedChatModel(
        then=steps(
            *[call_message(("shell", same))] * 3,  # the third is refused: no call left for the tool node
            call_message(("shell", {"command": "echo after-refusal"})),
            then=answer("The build is running."),
        )
    )
    agent = shell_agent(model, tmp_path, guard_last=True)

    result = agent.invoke({"messages": [("user", "Check the build")]}, thread("t1"))

    texts = [(m.status, m.text.strip()) for m in result["messages"] if isinstance(m, ToolMessage)]
    assert texts[:2] == [("success", "build: running")] * 2
    assert texts[2][0] == "error" and texts[2][1].startswith("Refused: you already called shell")
    assert texts[3] == ("success", "after-refusal")  # the shell session is still open
    assert result["messages"][-1].content == "The build is running."


def test_langchains_shell_listed_after_the_guard_fails_before_its_shell_starts(tmp_path: Path) -> None:
    model = ScriptedChatModel(then=keep_calling("shell", {"command": "cat status.txt"}))
    agent = shell_agent(model, tmp_path, guard_last=False)

    with pytest.raises(GuardSetupError, match=r"ShellToolMiddleware is listed after RepeatGuardMiddleware"):
        agent.invoke({"messages": [("user", "Check the build")]}, thread("t1"))
    assert model.calls == 0
