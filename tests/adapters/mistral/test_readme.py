"""The adapter README's quick start runs as written, with the scripted model in place of Mistral's."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest
from repeat_hooks_mistral.testing import ScriptedModel

README = Path(__file__).resolve().parents[3] / "adapters" / "mistral" / "README.md"
LIVE_MODEL = 'model="mistral-medium-latest",'


async def test_the_quick_start_runs_and_the_caller_reads_the_stop(capsys: pytest.CaptureFixture[str]) -> None:
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
    assert code is not None and LIVE_MODEL in code.group(1)
    model = ScriptedModel.keep_calling("track_parcel", {"tracking_number": "FR-7731"})
    module = types.ModuleType("readme_quick_start")
    module.__dict__["SCRIPTED"] = model
    sys.modules[module.__name__] = module  # rc11 finds @agents.tool functions by module
    try:
        exec(
            code.group(1).replace(LIVE_MODEL, "model=SCRIPTED.name, completion=SCRIPTED.completion(),"), module.__dict__
        )
        await module.main()
    finally:
        del sys.modules[module.__name__]

    guard = module.ParcelGuard
    stop = "I stopped: I kept calling track_parcel, and its result would not change in this turn. Ask me again later."
    assert capsys.readouterr().out == stop + "\n", "the first turn's text is the guard's stop message"
    assert guard.policy.max_calls == 2 and len(model.requests) == 10, "two turns of 5 model calls each"
