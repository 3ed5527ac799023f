"""One process of the persistence test: a guarded ``Flow`` saved by CrewAI's ``@persist(SQLiteFlowPersistence)``,
whose one step kicks off a crew with a looping tracker. ``python flow_worker.py DB FLOW_ID MESSAGE`` (``FLOW_ID``
``""``: a new conversation) prints one JSON line: the flow id, what the caller got, the calls that reached the
carrier, and the guard's state as the flow's state holds it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder: conftest's helpers

from conftest import SEED_004, Carrier, crew_of, tracker  # type: ignore[import-not-found]
from crewai.flow.flow import Flow, start
from crewai.flow.persistence import SQLiteFlowPersistence, persist
from pydantic import BaseModel
from repeat_hooks_crewai import RepeatGuard, stop_of


class ParcelChat(BaseModel):
    id: str = ""
    message: str = ""
    answer: str = ""
    repeat_hooks: dict[str, str] = {}


def main(db: str, flow_id: str, message: str) -> None:
    carrier = Carrier()
    crew = crew_of(tracker(carrier))

    @persist(SQLiteFlowPersistence(db_path=db))
    class ParcelDesk(Flow[ParcelChat]):
        @start()
        def answer(self) -> str:
            self.state.answer = str(crew.kickoff(inputs={"message": self.state.message}).raw)
            return self.state.answer

    flow = ParcelDesk()
    inputs: dict[str, Any] = {"message": message, **({"id": flow_id} if flow_id else {})}
    with RepeatGuard(SEED_004).attach(flow):
        flow.kickoff(inputs=inputs)
    stop = stop_of(flow)
    print(
        json.dumps(
            {
                "flow_id": flow.state.id,
                "answer": flow.state.answer,
                "calls": carrier.calls,
                "stop": None if stop is None else stop.reason.value,
                "state": json.loads(flow.state.repeat_hooks["tracker"]),
            }
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:4])
