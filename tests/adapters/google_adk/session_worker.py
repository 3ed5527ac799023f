"""One ADK Runner process serving a parcel-tracker session stored in a ``DatabaseSessionService``.

Run by ``test_shared_sessions.py`` (two of them at once, on one database). Commands arrive as JSON
lines on stdin, answers leave as JSON lines on stdout:

- ``{"op": "create"}``: a new session; answers ``{"session": id}``.
- ``{"op": "state", "session": S}``: the guard's state as stored; answers ``{"state": {...}}``.
- ``{"op": "run", "session": S, "message": M}``: one new invocation; answers with what the caller saw.
- ``{"op": "resume", "session": S, "invocation": I}``: resumes an interrupted invocation (ADK's
  resumability), answers the same way.
- ``{"op": "hang_at_model_call", "n": N}``: this process's N-th model call (from now) announces
  ``{"hanging": ...}`` and never returns (the test kills the process there).

Every call that reaches the carrier is appended to the file named by ``--carrier-log`` (one line
per call, flushed), so the test counts calls across processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from google.genai import types
from repeat_hooks_google_adk import STOP_METADATA, RepeatGuardPlugin, read_state
from repeat_hooks_google_adk.testing import ScriptedLlm, keep_calling

from repeat_hooks import Policy

APP = "parcels"
USER = "u1"


def say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class HangingLlm(ScriptedLlm):
    """The scripted model, which hangs in its ``hang_at``-th call when that is set."""

    hang_at: int | None = None

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        if self.hang_at is not None and self.calls + 1 >= self.hang_at:
            say({"hanging": self.calls + 1})
            await asyncio.sleep(3600)
        async for response in super().generate_content_async(llm_request, stream):
            yield response


class Worker:
    def __init__(self, name: str, db_url: str, carrier_log: str) -> None:
        self.name = name
        self.carrier_log = carrier_log
        self.model = HangingLlm(then=keep_calling("track_parcel", {"tracking_number": "FR-7731"}), call_id_prefix=name)
        agent = LlmAgent(name="parcel_tracker", model=self.model, tools=[self.track_parcel])
        plugin = RepeatGuardPlugin(Policy(match="tool", max_calls=2, max_refusals=3))
        app = App(
            name=APP,
            root_agent=agent,
            plugins=[plugin],
            resumability_config=ResumabilityConfig(is_resumable=True),
        )
        self.runner = Runner(app=app, session_service=DatabaseSessionService(db_url))

    def track_parcel(self, tracking_number: str) -> dict[str, Any]:
        """Where the parcel is now."""
        with open(self.carrier_log, "a") as log:
            log.write(f"{self.name} {tracking_number}\n")
            log.flush()
        return {"status": f"{tracking_number}: in transit, hub Lyon"}

    async def serve(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command["op"]
        if op == "hang_at_model_call":
            self.model.hang_at = self.model.calls + int(command["n"])
            return {"ok": True}
        if op == "create":
            created = await self.runner.session_service.create_session(app_name=APP, user_id=USER)
            return {"session": created.id}
        session: str = command["session"]
        if op == "state":
            stored = await self.runner.session_service.get_session(app_name=APP, user_id=USER, session_id=session)
            assert stored is not None
            return {"state": read_state(stored).model_dump(mode="json")}
        kwargs: dict[str, Any] = {"user_id": USER, "session_id": session}
        if op == "run":
            kwargs["new_message"] = types.Content(role="user", parts=[types.Part(text=command["message"])])
        else:
            kwargs["invocation_id"] = command["invocation"]
        calls_before = self.model.calls
        finals: list[str] = []
        stop: Any = None
        invocation = None
        async for event in self.runner.run_async(**kwargs):
            invocation = event.invocation_id
            if event.is_final_response() and event.content and event.content.parts:
                finals.append("".join(p.text or "" for p in event.content.parts))
                stop = (event.custom_metadata or {}).get(STOP_METADATA)
        return {
            "worker": self.name,
            "invocation": invocation,
            "finals": finals,
            "stop": stop,
            "model_calls": self.model.calls - calls_before,
        }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--carrier-log", required=True)
    args = parser.parse_args()
    worker = Worker(args.name, args.db, args.carrier_log)
    say({"ready": args.name})
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        try:
            say(await worker.serve(json.loads(line)))
        except Exception as error:  # reported to the test, which fails with it
            say({"error": f"{type(error).__name__}: {error}"})


if __name__ == "__main__":
    asyncio.run(main())
