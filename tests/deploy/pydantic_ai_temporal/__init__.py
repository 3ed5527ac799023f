"""Harness for ``tests/deploy/test_pydantic_ai_temporal.py``: a guarded pydantic-ai agent in a Temporal workflow.

- ``scenario``: the script (prompts, policy, what the model does), the JSON-lines ledger every worker
  process appends to, kill points, and the workflow's input and report types.
- ``agent``: the agent (``ScriptedModel`` + ``track_parcel`` + ``RepeatGuard`` + ``TemporalDurability``)
  and the workflow that runs it for each prompt. Model requests and the tool are activities; the
  agent graph and every ``RepeatGuard`` hook are workflow code, replayed by a worker taking over.
- ``worker``: the worker process (``python -m pydantic_ai_temporal.worker`` with ``tests/deploy`` on the path).
"""
