"""One OS process serving a parcel-tracker conversation whose ``AgentSession`` is saved as JSON in a file.

Run by ``test_sessions.py`` (two of them at once, on one folder). Commands arrive as JSON lines on stdin, answers
leave as JSON lines on stdout. Each command restores the session from ``<folder>/<session>.json`` with
``AgentSession.from_dict`` (a fresh one if there is none), builds the agent afresh (as a server handling one request
would), guarded by seed 004's policy (refunds: ``REFUNDS``), and saves ``session.to_dict()`` back after the run:

- ``{"op": "run", "session": S, "message": M}``: one turn; answers with what the caller saw;
- ``{"op": "approve", "session": S}``: answers the run's pending approvals (all approved), as the next request.

Every call that reaches the carrier is appended to the file named by ``--carrier-log`` (``<process name> <tool>``
per line), so the test counts calls across processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "adapters" / "agent_framework" / "src"))

from agent_framework import Agent, AgentSession, Message, tool
from repeat_hooks_agent_framework import RepeatGuardMiddleware, read_state, stop_of
from repeat_hooks_agent_framework.testing import ScriptedClient, keep_calling

from repeat_hooks import Policy

SEED_004 = Policy(match="tool", count="per_turn", max_calls=2, max_refusals=3)
REFUNDS = Policy(destructive=frozenset({"refund_order"}), max_refusals=2)
"""A refund runs once: the same refund again is refused (it succeeded), and after 2 refusals the turn ends."""


def say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class Worker:
    def __init__(self, name: str, folder: str, carrier_log: str) -> None:
        self.name = name
        self.folder = Path(folder)
        self.carrier_log = carrier_log

    def agent(self, reply: str) -> tuple[Agent[Any], ScriptedClient]:
        def reached(line: str) -> None:
            with open(self.carrier_log, "a") as log:
                log.write(f"{self.name} {line}\n")

        @tool
        def track_parcel(tracking_number: str) -> str:
            """Where the parcel is now."""
            reached("track_parcel")
            return f"{tracking_number}: in transit, hub Lyon"

        @tool(approval_mode="always_require")
        def refund_order(order: int) -> str:
            """Refund an order."""
            reached("refund_order")
            return f"refund sent for {order}"

        if reply == "refund":
            client = ScriptedClient(then=keep_calling("refund_order", {"order": 7731}), call_id_prefix=self.name)
        else:
            client = ScriptedClient(then=keep_calling("track_parcel", {"tracking_number": "FR-7731"}))
        guard = RepeatGuardMiddleware(REFUNDS if reply == "refund" else SEED_004)
        return Agent(client=client, tools=[track_parcel, refund_order], middleware=[guard]), client

    async def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        path = self.folder / f"{command['session']}.json"
        session = AgentSession.from_dict(json.loads(path.read_text())) if path.exists() else AgentSession()
        agent, client = self.agent(command.get("reply", "track"))
        if command["op"] == "run":
            response = await agent.run(command["message"], session=session)
        else:
            pending = json.loads((self.folder / f"{command['session']}.pending.json").read_text())
            answers = [Message.from_dict(item).contents[0].to_function_approval_response(True) for item in pending]
            response = await agent.run(Message(role="user", contents=answers), session=session)
        path.write_text(json.dumps(session.to_dict()))
        asked = [Message(role="user", contents=[item]).to_dict() for item in response.user_input_requests]
        (self.folder / f"{command['session']}.pending.json").write_text(json.dumps(asked))
        stop = stop_of(response)
        state = read_state(session)
        return {
            "final": response.text,
            "stop": None if stop is None else stop.reason.value,
            "model_calls": client.calls,
            "asked": len(asked),
            "turn": state.turn.id,
            "number": state.turn.number,
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--folder", required=True)
    parser.add_argument("--carrier-log", required=True)
    args = parser.parse_args()
    worker = Worker(args.name, args.folder, args.carrier_log)
    say({"ready": args.name})
    for line in sys.stdin:
        try:
            say(asyncio.run(worker.handle(json.loads(line))))
        except Exception as error:
            say({"error": f"{type(error).__name__}: {error}"})


if __name__ == "__main__":
    main()
