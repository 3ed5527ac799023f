"""One OS process serving one turn of a parcel-tracker conversation whose ``Context`` is kept as JSON in a file.

Run by ``test_sessions.py``: ``python context_worker.py CONTEXT_FILE CARRIER_LOG MESSAGE``. It builds the guarded
agent afresh (seed 004's policy), rebuilds the conversation's ``Context`` from the file with ``Context.from_dict``
(a fresh one if the file is missing), runs one turn, writes ``ctx.to_dict()`` back, and prints what the caller saw
as one JSON line. Every call that reaches the carrier is appended to CARRIER_LOG."""

import asyncio
import json
import sys
from pathlib import Path

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.workflow import Context
from repeat_hooks_llama_index import RepeatGuard, read_state, stop_of
from repeat_hooks_llama_index.testing import Script, keep_calling

from repeat_hooks import Policy


async def main(path: Path, log: Path, message: str) -> None:
    async def track_parcel(tracking_number: str) -> str:
        """Where the parcel is now."""
        with log.open("a") as carrier:
            carrier.write(f"{tracking_number}\n")
        return f"{tracking_number}: in transit, hub Lyon"

    script = Script(then=keep_calling("track_parcel", {"tracking_number": "FR-7731"}))
    guard = RepeatGuard(Policy(match="tool", count="per_turn", max_calls=2, max_refusals=3))
    agent = guard.agent(FunctionAgent(name="parcel_tracker", llm=script.llm(), tools=[track_parcel], streaming=False))
    ctx = Context.from_dict(agent, json.loads(path.read_text())) if path.exists() else Context(agent)
    before = await read_state(ctx, "parcel_tracker")
    output = await agent.run(user_msg=message, ctx=ctx)
    path.write_text(json.dumps(ctx.to_dict()))
    stop = stop_of(output)
    after = await read_state(ctx, "parcel_tracker")
    print(
        json.dumps(
            {
                "final": output.response.content,
                "stop": None if stop is None else stop.reason.value,
                "turn_before": before.turn.number,
                "turn_after": after.turn.number,
                "model_calls": script.calls,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]))
