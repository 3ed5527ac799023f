"""This module exists for 0.2's import path only: its names moved to ``calls``; each one warns, naming its home."""

from repeat_hooks import kit

_MOVED = ("REFUSED_KEY", "edit_refusal", "ended_on_refusals", "refuse")
__getattr__ = kit.moved(
    __name__,
    {name: f"repeat_hooks_langchain.calls:{name}" for name in _MOVED},
    gone={"kept_positions": "refuse(...) keeps the calls it lets through in their order: count them yourself"},
)
