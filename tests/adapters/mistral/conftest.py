"""Shared pieces for the Mistral adapter tests: the carrier tool, the agent, the turn runner.

Every test drives the SDK's real agent loop offline: the model is ``repeat_hooks_mistral.testing.
ScriptedModel`` at the SDK's provider seam, nothing of the SDK is mocked.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

os.environ.pop("MISTRAL_API_KEY", None)  # offline: no key reaches the SDK

from mistralai.agents import agents


@dataclass
class Carrier:
    """The fake carrier: records every call that reached it; ``fail`` makes it raise."""

    calls: list[str] = field(default_factory=list)
    fail: bool = False


CARRIER = Carrier()


@agents.tool
def track_parcel(tracking_number: str) -> dict[str, str]:
    """The carrier's latest scan of a parcel."""
    CARRIER.calls.append(tracking_number)
    if CARRIER.fail:
        raise RuntimeError("carrier unreachable")
    return {"tracking_number": tracking_number, "status": "in transit", "last_scan": "Lyon hub, 06:12"}


@pytest.fixture
def carrier() -> Iterator[Carrier]:
    """The carrier, reset for this test."""
    CARRIER.calls.clear()
    CARRIER.fail = False
    yield CARRIER
    CARRIER.calls.clear()
    CARRIER.fail = False


def make_agent(model: Any, *hooks: agents.Hook, builtins: Any = None, max_iterations: int = 20) -> agents.Agent:
    """The parcel tracker with ``model`` and ``hooks``; only ``track_parcel`` unless ``builtins`` says so."""
    return agents.Agent(
        model=model.name,
        completion=model.completion(),
        name="parcel-tracker",
        instructions="You track parcels with track_parcel.",
        builtins=builtins if builtins is not None else agents.Builtins.none(),
        max_iterations=max_iterations,  # a broken guard cannot loop forever
        harness=agents.Harness(tools=[track_parcel], hooks=list(hooks)),
    )


@pytest.fixture
def agent_for() -> Any:
    """``make_agent`` as a fixture."""
    return make_agent


@dataclass
class HungRedis:
    """A TCP port that accepts connections and never answers: a hung Redis (or a black-holing proxy)."""

    port: int
    connections: list[socket.socket]
    """Every connection accepted so far: a client that retried a timed-out request would open another."""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


@pytest.fixture
def hung_redis() -> Iterator[HungRedis]:
    """A ``HungRedis``, closed when the test ends."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted: list[socket.socket] = []
    closing = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not closing.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield HungRedis(listener.getsockname()[1], accepted)
    finally:
        closing.set()
        thread.join(5)
        for connection in accepted:
            connection.close()
        listener.close()
