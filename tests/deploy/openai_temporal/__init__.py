"""Harness for ``tests/deploy/test_openai_temporal.py``: a guarded OpenAI agent in a Temporal workflow.

- ``scenario``: the script (prompt, policy, what the model does), the JSON-lines ledger every worker
  process appends to, and the expected outcome.
- ``model``: a scripted ``Model`` / ``ModelProvider`` that decides from the conversation it receives
  (model calls are activities and may run in either worker), and logs what it received.
- ``tools``: ``track_parcel``, a Temporal activity used as the agent's tool via ``activity_as_tool``;
  it logs every attempt that reaches it.
- ``workflows``: the workflow that runs the guarded agent with ``Runner.run`` (the guard runs in
  workflow code and is replayed).
- ``worker``: the worker process (``python -m openai_temporal.worker`` with ``tests/deploy`` on the path).
"""
