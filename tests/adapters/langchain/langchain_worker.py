"""One OS process serving one call on a thread of the parcel agent, through a shared checkpointer.

The checkpointer tests start it as ``python langchain_worker.py ...`` to prove the guard's counts follow
the thread across processes. It prints one JSON line: the last message, the guard's saved state, and
whether the run stopped at an interrupt. Every call that reached a tool is appended to ``--calls-file``.

    --saver sqlite:PATH | postgres:URL    the shared checkpointer
    --say TEXT                            start a new turn with this user message (else resume: input None)
    --scenario loop | approval            a model that keeps tracking; or tracking that needs approval (HITL)
    --mode batched | per_call             HumanInTheLoopMiddleware's interrupt mode (approval scenario)
    --approvals N                         approve up to N interrupts, then exit (default: all of them)
    --hang-at N                           the tool hangs when it is the N-th call in the calls file
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command
from repeat_hooks_langchain import RepeatGuardMiddleware
from repeat_hooks_langchain.testing import ScriptedChatModel, answer, keep_calling, steps

from repeat_hooks import Policy

ARGS = {"tracking_number": "FR-7731"}


@contextlib.contextmanager
def open_saver(spec: str) -> Iterator[BaseCheckpointSaver[Any]]:
    kind, _, where = spec.partition(":")
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        connection = sqlite3.connect(where, check_same_thread=False)
        try:
            yield SqliteSaver(connection)
        finally:
            connection.close()
    elif kind == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(where) as saver:
            saver.setup()
            yield saver
    else:
        raise SystemExit(f"unknown saver {spec!r}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--saver", required=True)
    parser.add_argument("--thread", required=True)
    parser.add_argument("--calls-file", type=Path, required=True)
    parser.add_argument("--say")
    parser.add_argument("--scenario", choices=["loop", "approval"], default="loop")
    parser.add_argument("--mode", choices=["batched", "per_call"], default="batched")
    parser.add_argument("--approvals", type=int, default=1_000)
    parser.add_argument("--hang-at", type=int)
    options = parser.parse_args()

    @tool
    def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        with options.calls_file.open("a") as calls:
            calls.write(f"{tracking_number}\n")
        if options.hang_at is not None and len(options.calls_file.read_text().splitlines()) == options.hang_at:
            options.calls_file.with_suffix(".hanging").write_text("hanging")
            time.sleep(3600)  # killed here by the test, mid-turn
        return f"{tracking_number}: in transit, hub Lyon"

    middleware: list[Any] = [RepeatGuardMiddleware(Policy(count="per_turn", match="tool", max_calls=2, max_refusals=3))]
    if options.scenario == "approval":
        model = ScriptedChatModel(
            then=steps(*[keep_calling("track_parcel", ARGS)] * 3, then=answer("Still in transit."))
        )
        review = HumanInTheLoopMiddleware(interrupt_on={"track_parcel": True}, interrupt_mode=options.mode)
        middleware.insert(0, review)
    else:
        model = ScriptedChatModel(then=keep_calling("track_parcel", ARGS))
    config: Any = {"configurable": {"thread_id": options.thread}}

    with open_saver(options.saver) as saver:
        agent = create_agent(model, tools=[track_parcel], middleware=middleware, checkpointer=saver)
        payload: Any = {"messages": [("user", options.say)]} if options.say else None
        # durability="sync": each step's checkpoint is written before the next step starts, so a process
        # killed inside a tool loses that step only (LangGraph's default, "async", may lose the one before).
        result = agent.invoke(payload, config, durability="sync")
        approvals = 0
        while result.get("__interrupt__") and approvals < options.approvals:
            approvals += 1
            interrupts = result["__interrupt__"]
            if options.mode == "per_call":
                answer_: Any = {interrupt.id: {"type": "approve"} for interrupt in interrupts}
            else:
                answer_ = {"decisions": [{"type": "approve"}]}
            result = agent.invoke(Command(resume=answer_), config, durability="sync")
        last = result["messages"][-1]
        print(
            json.dumps(
                {
                    "last": last.content,
                    "last_type": last.type,
                    "guard": result.get("repeat_guard"),
                    "interrupted": bool(result.get("__interrupt__")),
                    "model_calls_here": model.calls,
                    "approvals_here": approvals,
                    "tool_results": [m.content for m in result["messages"] if m.type == "tool"],
                }
            )
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
