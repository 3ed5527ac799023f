"""MCP tools through CrewAI's own MCP client (``Agent(mcps=[MCPServerStdio(...)])``, crewai/mcp/, no crewai-tools)
against the shared FastMCP carrier (``support/mcp_carrier.py``, a child process). CrewAI names an MCP tool after
its server's command (sanitized and cut to 64 characters with a hash: a policy names it so, or ``check_tools`` says
which names there are) and drops the server's annotations (``crewai/tools/mcp_native_tool.py``: no ``readOnlyHint``
reaches the guard), so a read-only MCP tool goes in ``Policy(read_only=...)``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from crewai import Agent
from crewai.mcp import MCPServerStdio
from repeat_hooks_crewai import StopReason, stop_of
from repeat_hooks_crewai.testing import ScriptedLLM, tool_call, tool_results
from support import MCP_CARRIER

from repeat_hooks import Policy

from .conftest import ARGS, crew_of, guarded


def carrier_agent(log: Path, llm: ScriptedLLM, *tools: str) -> Agent:
    server = MCPServerStdio(
        command=sys.executable, args=[str(MCP_CARRIER), *tools], env={**os.environ, "CARRIER_LOG": str(log)}
    )
    return Agent(role="tracker", goal="g", backstory="b", llm=llm, mcps=[server], cache=False)


def test_an_mcp_tool_is_refused_at_its_third_same_call_and_the_server_is_reached_twice(tmp_path: Path) -> None:
    log = tmp_path / "carrier.log"
    log.touch()

    def script(llm: ScriptedLLM, messages: list[dict[str, Any]]) -> Any:
        (name,) = llm.offered  # the server's one tool, as CrewAI named it
        return [tool_call(name, ARGS)]

    llm = ScriptedLLM(model="scripted", then=script)
    agent = carrier_agent(log, llm, "track_parcel")
    crew = crew_of(agent)

    with guarded(crew, Policy(max_calls=2)):
        output = crew.kickoff(inputs={"message": "Keep checking FR-7731"})

    assert log.read_text().splitlines() == ["track_parcel FR-7731"] * 2  # what reached the MCP server
    results = tool_results(agent)
    assert results[:2] == ["FR-7731: in transit, hub Lyon"] * 2
    assert len(results) == 5 and all(text.startswith("Refused: you already called") for text in results[2:])
    assert output.raw.startswith("I stopped") and (stop := stop_of(crew)) is not None
    assert stop.reason is StopReason.IGNORED_REFUSALS
    assert llm.offered != ["track_parcel"]  # CrewAI names it after the server's command (sanitized, hashed)


def test_an_mcp_tool_that_always_fails_is_refused_as_the_same_failure(tmp_path: Path) -> None:
    log = tmp_path / "carrier.log"
    log.touch()

    def script(llm: ScriptedLLM, messages: list[dict[str, Any]]) -> Any:
        if llm.calls > 4:
            return "Customs is down."
        (name,) = llm.offered
        return [tool_call(name, ARGS)]

    llm = ScriptedLLM(model="scripted", then=script)
    agent = carrier_agent(log, llm, "customs_status")
    crew = crew_of(agent)

    with guarded(crew, Policy(max_refusals=5)):
        output = crew.kickoff(inputs={"message": "Is FR-7731 through customs?"})

    results = tool_results(agent)
    assert output.raw == "Customs is down." and len(results) == 4
    assert [text.startswith("Refused") for text in results] == [False, False, True, True]
    assert len(log.read_text().splitlines()) == 2
