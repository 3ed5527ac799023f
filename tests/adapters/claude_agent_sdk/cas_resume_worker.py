"""One process of the resume test: ``python cas_resume_worker.py STORE HOME PHASE [SESSION TURN]``.

``STORE`` is a Redis URL or ``memory``. Phase ``first``: a new session; turn 1 loops until the guard stops it
(seed 004), turn 2 (``resume``) calls track_parcel twice and the app's own hook defers the 2nd call (a human
must approve it), so the query ends with ``tool_deferred``. Phase ``second`` (a fresh process): resumes the
session; Claude Code first runs the approved call, then a new turn. Prints one JSON line of what it saw.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cas_parcels import SEED_004, allowed, call, carrier, scripted
from claude_agent_sdk import HookMatcher, ResultMessage
from repeat_hooks_claude_agent_sdk import RepeatGuardHooks, read_state, stop_of
from repeat_hooks_claude_agent_sdk.testing import FakeMessagesAPI, offline_options

from repeat_hooks import MemoryStore, StateStore

PROMPTS = {"Keep checking FR-7731": [call("track_parcel")] * 10, "Check it twice": [call("track_parcel")] * 2}
PROMPTS["And now?"] = [call("track_parcel")]


def store_of(spec: str) -> StateStore:
    if spec == "memory":
        return MemoryStore()
    from repeat_hooks.stores.redis import RedisStore

    return RedisStore.from_url(spec)


async def turn(guard: RepeatGuardHooks, options: Any, prompt: str) -> ResultMessage:
    result = None
    async for message in guard.query(prompt=prompt, options=options):
        if isinstance(message, ResultMessage):
            result = message
    assert result is not None
    return result


async def main(spec: str, home: str, phase: str, session: str = "", turn_one: str = "") -> None:
    parcels = carrier()
    guard = RepeatGuardHooks(store=store_of(spec), **SEED_004)
    seen: dict[str, Any] = {}
    with FakeMessagesAPI(scripted(PROMPTS)) as api:
        base = {"mcp_servers": {"parcels": parcels.server}, "allowed_tools": allowed()}
        if phase == "first":
            first = await turn(guard, offline_options(api, home, **base), "Keep checking FR-7731")
            state = await read_state(first, guard=guard)
            assert state is not None
            seen["session"], seen["turn_one"] = first.session_id, state.turn.id
            seen["stop_one"] = getattr(await stop_of(first, guard=guard), "reason", None)
            asked: list[str] = []

            async def approval(event: Any, tool_use_id: str | None, context: Any) -> Any:
                asked.append(str(tool_use_id))
                if len(asked) == 2:  # the 2nd call needs a human: Claude Code ends the query and waits
                    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "defer"}}
                return {}

            hooks = {"PreToolUse": [HookMatcher(hooks=[approval])]}
            second = await turn(
                guard, offline_options(api, home, resume=first.session_id, hooks=hooks, **base), "Check it twice"
            )
            seen["deferred"] = second.terminal_reason
        else:
            third = await turn(guard, offline_options(api, home, resume=session, **base), "And now?")
            seen["result"] = third.result
            stop = await stop_of(session, guard=guard, turn_id=turn_one)
            seen["stop_one"] = None if stop is None else stop.reason
            state = await read_state(session, guard=guard)
            seen["turn_number"] = None if state is None else state.turn.number
            seen["refusals_seen"] = sum(
                1 for request in api.model_requests() for message in request["messages"] if "Refused" in str(message)
            )
        seen["runs"] = parcels.count("track_parcel")
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
