"""``store=``: the states in a shared ``StateStore`` under ``repeat_hooks:<conversation>/<role>``, the conversation
named by ``repeat_hooks.kit.request(conversation_id=...)`` (or a guarded flow's state id): two crews (two servers)
serving one conversation share its counts; a caller's turn id (``request(turn_id=...)``) continues that turn."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from repeat_hooks_crewai import RepeatGuardStopped, stop_of

from repeat_hooks.kit import request
from repeat_hooks.stores.sqlite import SQLiteStore

from .conftest import STOPPED, Carrier, crew_of, guarded, llm_of, tracker


def test_two_crews_share_a_conversation_through_the_store(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "guard.db")
    first, second = Carrier(), Carrier()
    crew_a, crew_b = crew_of(tracker(first)), crew_of(tracker(second))

    with guarded(crew_a, store=store), request(conversation_id="customer-42"):
        output = crew_a.kickoff(inputs={"message": "Keep checking FR-7731"})
    with guarded(crew_b, store=store), request(conversation_id="customer-42"):
        crew_b.kickoff(inputs={"message": "And now?"})

    assert output.raw == STOPPED and first.calls == second.calls == ["FR-7731"] * 2
    state = asyncio.run(store.load("repeat_hooks:customer-42/tracker"))
    assert state is not None and state.turn.number == 2  # the second server went on with the conversation
    assert stop_of(crew_b) is not None and "FR-7731" not in state.model_dump_json()


def test_a_retried_request_with_its_turn_id_continues_the_turns_counts(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "guard.db")
    first, second = Carrier(), Carrier()
    crew_a, crew_b = crew_of(tracker(first)), crew_of(tracker(second))

    with guarded(crew_a, store=store), request(conversation_id="c-7", turn_id="request-7"):
        crew_a.kickoff(inputs={"message": "Keep checking FR-7731"})
    retried = request(conversation_id="c-7", turn_id="request-7")
    with guarded(crew_b, store=store), retried, pytest.raises(RepeatGuardStopped) as raised:
        crew_b.kickoff(inputs={"message": "Keep checking FR-7731"})

    # The same turn, stopped: its first model call is the stop, which before_llm_call can only raise.
    assert raised.value.message == STOPPED and second.calls == []
    assert llm_of(crew_b.agents[0]).calls == 0  # type: ignore[arg-type]
    state = asyncio.run(store.load("repeat_hooks:c-7/tracker"))
    assert state is not None and state.turn.id == "request-7" and state.turn.number == 1
