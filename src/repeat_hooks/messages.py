"""The default texts: what the model reads when a call is refused, and what the caller reads when a turn stops.

Templates may use ``{tool}``, ``{count}`` and ``{limit}``; nothing else (checked at construction).
"""

from __future__ import annotations

import re
import string

from .decision import RefusalKind, StopReason

PLACEHOLDERS = frozenset({"tool", "count", "limit"})

REFUSE_SAME_ARGUMENTS = (
    "Refused: you already called {tool} with these exact arguments {limit} times in this turn, and its "
    "result will not change before the turn ends. Do not call it again: use the earlier results, try "
    "different arguments, or give your answer with what you know."
)
REFUSE_SAME_TOOL = (
    "Refused: you already called {tool} {limit} times in this turn, and its result will not change before "
    "the turn ends. Do not call it again: use the earlier results, or give your answer with what you know."
)
REFUSE_NO_PROGRESS = (
    "Refused: you already called {tool} with these exact arguments {limit} times, and nothing has changed "
    "since that could change its result. Do not call it again: use the earlier result, change something "
    "first, try different arguments, or give your answer with what you know."
)
REFUSE_NO_PROGRESS_TOOL = (
    "Refused: you already called {tool} {limit} times, and nothing has changed since that could change its "
    "result. Do not call it again: use the earlier result, change something first, or give your answer "
    "with what you know."
)
REFUSE_SAME_FAILURE = (
    "Refused: {tool} failed the same way {limit} times with these arguments, and it would fail again. Do "
    "not call it again like this: fix the cause, try different arguments, or give your answer with what "
    "you know."
)
REFUSE_CYCLE = (
    "Refused: the last {count} calls, starting with {tool}, repeat the {count} calls before them with the "
    "same results: this is a loop. Do not start it again: use those results, try something different, or "
    "give your answer with what you know."
)
REFUSE_FORBIDDEN = "Refused: {tool} may not be called in this turn. Do not call it: use another tool or answer."
REFUSE_DUPLICATE_WRITE = (
    "Refused: {tool} already succeeded with these exact arguments in this turn, and nothing has changed "
    "since: calling it again would do it twice. Do not call it again: use its earlier result, or give your "
    "answer with what you know."
)
REFUSE_UNKNOWN_WRITE = (
    "Refused: {tool} with these exact arguments was already sent in this turn and how it went is not known: it "
    "may have happened, and sending it again could do it twice. Do not call it again: check whether it happened "
    "with another tool, or give your answer with what you know."
)
REFUSE_OPAQUE = (
    "Refused: you already called {tool} with these exact arguments {limit} times in this turn. Do not call "
    "it again: use the earlier results, try different arguments, or give your answer with what you know."
)
REFUSE_REJECTED = (
    "Refused: {tool} with these exact arguments was already rejected {limit} times before it ran (by a "
    "reviewer or a guardrail), and nothing has changed since. Do not ask for it again: try something "
    "different, or give your answer with what you know."
)
WARNING = (
    "Note: {tool} has now run {count} times like this with nothing changed in between; the same call again will "
    "be refused. Use this result, try something different, or give your answer with what you know."
)
"""What the model reads after a result, with ``Policy(warn=True)``, when the same call made next would be refused."""
TURN_ENDED = "Refused: this turn has ended ({reason}). Do not call any more tools: answer with what you know."
STORE_DOWN_REFUSAL = (
    "Refused: the loop guard could not read this turn's calls, so no tool may run now. "
    "Do not call tools again: answer with what you know."
)
"""What the model reads for a call refused because the guard's store failed (``fail="closed"``)."""
STORE_DOWN_STOP = "I stopped: the loop guard could not read this turn's calls. Try again later."
"""The final message of a turn ended because the guard's store failed (``fail="closed"``)."""

REPEAT_MESSAGES: dict[tuple[str, str], str] = {
    ("per_turn", "tool_and_arguments"): REFUSE_SAME_ARGUMENTS,
    ("per_turn", "tool"): REFUSE_SAME_TOOL,
    ("progress", "tool_and_arguments"): REFUSE_NO_PROGRESS,
    ("progress", "tool"): REFUSE_NO_PROGRESS_TOOL,
}
"""The text of a ``RefusalKind.REPEAT``, by ``(Policy.count, Policy.match)``."""
REFUSAL_MESSAGES: dict[RefusalKind, str] = {
    RefusalKind.FAILURE: REFUSE_SAME_FAILURE,
    RefusalKind.CYCLE: REFUSE_CYCLE,
    RefusalKind.FORBIDDEN: REFUSE_FORBIDDEN,
    RefusalKind.DUPLICATE_WRITE: REFUSE_DUPLICATE_WRITE,
    RefusalKind.UNKNOWN_WRITE: REFUSE_UNKNOWN_WRITE,
    RefusalKind.OPAQUE: REFUSE_OPAQUE,
    RefusalKind.REJECTED: REFUSE_REJECTED,
    RefusalKind.STORE_UNAVAILABLE: STORE_DOWN_REFUSAL,
}
"""The text of every other refusal kind (``TURN_ENDED`` names the stop's reason instead)."""

STOP_MESSAGES: dict[StopReason, str] = {
    StopReason.REPEATED_CALL: (
        "I stopped: I was about to call {tool} again with the same request, and its result would not "
        "change. Ask me again later."
    ),
    StopReason.IGNORED_REFUSALS: (
        "I stopped: I kept calling {tool}, and its result would not change in this turn. Ask me again later."
    ),
    StopReason.TOO_MANY_ERRORS: (
        "I stopped: {count} tool calls failed in a row, the last one {tool}. Try again later."
    ),
    StopReason.REPEATED_ANSWER: (
        "I stopped: I gave the same answer {count} times in a row, and it would not change in this turn. "
        "Ask me again later."
    ),
    StopReason.MAX_STEPS: "I stopped: this turn reached its limit of {limit} model calls.",
    StopReason.TIME: "I stopped: this turn used up its budget of {limit} seconds of model time.",
    StopReason.COST: "I stopped: this turn used up its budget of {limit} US dollars.",
    StopReason.STORE_UNAVAILABLE: STORE_DOWN_STOP,
}


_NOTE = re.compile(
    re.escape(WARNING)
    .replace(re.escape(" {count} times"), r" (?:once|[0-9]{1,19} times)")
    .replace(re.escape("{tool}"), r"[^\n]{1,1000}")
)
"""A note as ``Policy.warning`` renders it."""


def noted(text: str, note: str) -> str:
    """A result's ``text`` with the guard's ``note`` after it (``Policy.warning``), as the model reads it."""
    return f"{text}\n\n{note}"


def unnoted(text: str) -> str:
    """``text`` without the guard's note at its end (``noted``): what the tool itself returned, for an adapter
    that records a result from the conversation, where the note was added to it."""
    start = text.rfind("\n\nNote: ")
    if start < 0 or _NOTE.fullmatch(text, start + 2) is None:
        return text
    return text[:start]


def check_template(template: str) -> str:
    """``template`` itself, or ValueError naming a placeholder it may not use."""
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as error:
        raise ValueError(f"is not a valid template: {error}") from None
    unknown = names - PLACEHOLDERS
    if unknown:
        raise ValueError(
            f"uses {', '.join(sorted('{' + n + '}' for n in unknown))}; a template may use only "
            "{tool}, {count} and {limit}"
        )
    return template


def render(template: str, tool: str | None, count: float, limit: float | None) -> str:
    """``template`` with its placeholders filled in."""
    text = template.format(tool=tool or "a tool", count=_number(count), limit=_number(limit))
    return text.replace(" 1 times", " once")


def _number(value: float | None) -> str:
    if value is None:
        return "no"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:g}"
