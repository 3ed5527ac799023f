"""This module exists for 0.2's import path only: ``registered`` moved to ``calls`` and warns, naming its home."""

from repeat_hooks import kit

__getattr__ = kit.moved(__name__, {"registered": "repeat_hooks_pydantic_ai.calls:registered"})
