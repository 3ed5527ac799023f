"""One OS process serving a parcel-tracker conversation kept by Strands' ``FileSessionManager``.

Run by ``test_sessions.py`` (two of them at once, on one storage directory). Commands arrive as JSON lines on
stdin, answers leave as JSON lines on stdout. Each command builds the agent afresh from the session on disk
(as a server handling one request would), guarded by seed 004's policy:

- ``{"op": "run", "session": S, "message": M}``: one turn; answers with what the caller saw.
- ``{"op": "resume", "session": S}``: ``agent()`` with no new input: finishes the turn a crash cut short.
- ``{"op": "state", "session": S}``: the guard's state as the session holds it.
- ``{"op": "hang", "at": "model" | "tool", "n": N}``: this process's N-th model call (or tool run), from now,
  announces ``{"hanging": ...}`` and never returns (the test kills the process there).

Every call that reaches the carrier is appended to the file named by ``--carrier-log`` (``<process name>``
per line, flushed), so the test counts calls across processes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import AsyncGenerator
from typing import Any

from repeat_hooks_strands import STOP_KEY, RepeatGuardHooks, read_state
from repeat_hooks_strands.testing import ScriptedModel, final_text, keep_calling
from strands import Agent, tool
from strands.session import FileSessionManager
from strands.types.streaming import StreamEvent

from repeat_hooks import Policy

SEED_004 = Policy(match="tool", count="per_turn", max_calls=2, max_refusals=3)


def say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class Worker:
    def __init__(self, name: str, storage: str, carrier_log: str) -> None:
        self.name = name
        self.storage = storage
        self.carrier_log = carrier_log
        self.hang: dict[str, int] = {}
        self.model_calls = 0
        self.tool_runs = 0

    def agent(self, session: str) -> tuple[Agent, ScriptedModel]:
        worker = self

        class Model(ScriptedModel):
            async def stream(self, *args: Any, **kwargs: Any) -> AsyncGenerator[StreamEvent, None]:
                worker.model_calls += 1
                if worker.hang.get("model") == worker.model_calls:
                    say({"hanging": "model"})
                    time.sleep(3600)
                async for event in super().stream(*args, **kwargs):
                    yield event

        @tool
        def track_parcel(tracking_number: str) -> str:
            """Where the parcel is now."""
            with open(worker.carrier_log, "a") as log:
                log.write(f"{worker.name}\n")
            worker.tool_runs += 1
            if worker.hang.get("tool") == worker.tool_runs:
                say({"hanging": "tool"})
                time.sleep(3600)
            return f"{tracking_number}: in transit, hub Lyon"

        model = Model(then=keep_calling("track_parcel", {"tracking_number": "FR-7731"}), call_id_prefix=self.name)
        agent = Agent(
            model=model,
            tools=[track_parcel],
            hooks=[RepeatGuardHooks(SEED_004)],
            session_manager=FileSessionManager(session_id=session, storage_dir=self.storage),
            callback_handler=None,
        )
        return agent, model

    def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command["op"]
        if op == "hang":
            self.hang = {command["at"]: command["n"]}
            self.model_calls = self.tool_runs = 0
            return {"ok": True}
        agent, model = self.agent(command["session"])
        if op == "state":
            return {"state": read_state(agent).model_dump(mode="json")}
        result = agent(command["message"]) if op == "run" else agent()
        return {
            "final": final_text(agent),
            "stop": result.state.get(STOP_KEY),
            "model_calls": model.calls,
            "turn": read_state(agent).turn.id,
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--storage", required=True)
    parser.add_argument("--carrier-log", required=True)
    args = parser.parse_args()
    worker = Worker(args.name, args.storage, args.carrier_log)
    say({"ready": args.name})
    for line in sys.stdin:
        try:
            say(worker.handle(json.loads(line)))
        except Exception as error:
            say({"error": f"{type(error).__name__}: {error}"})


if __name__ == "__main__":
    main()
