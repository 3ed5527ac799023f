"""``repeat-hooks replay --html FILE``: the replay's figures as one self-contained page.

One HTML file, nothing else to fetch: inline CSS, bars drawn with CSS, no script; it opens offline and
prints. Per policy, side by side: the headline figures, refusals by tool and by the call's position in its
turn, the longest loops found, and the first harmful refusals with the calls around them. The page holds
tool names, trajectory ids, policy labels and digests only, never a raw argument or result value, so it can
be shared; every text is ``replay.printable`` (a control character, a bidi mark or a lone surrogate shown as its
escape: the page is valid UTF-8 whatever the names) and HTML-escaped (tool names come from the user's files).

Each figure is an element with a ``data-field`` attribute whose text is the figure (digits, with thousands
separators), inside an element with ``data-policy`` (the policy's index) and ``data-section``: the same
names as ``replay --json``, so a test reads the page back and compares.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from .replay import CONTEXT_CALLS, ROWS, ContextCall, HarmfulRefusal, Position, Refusals, Tally, printable

OPEN_REFUSALS = 3
"""Harmful refusals shown open; the rest are folded (a click opens each)."""

CARDS: tuple[tuple[str, str | None, str], ...] = (
    ("waste_prevented", None, "wasted calls prevented"),
    ("harmful", None, "harmful refusals"),
    ("successful_with_refusal", "successful", "successful runs with a refusal or stop"),
    ("loops_caught", "loops", "no-progress loops caught"),
)
"""The big figures at the top of each policy: (field, field it is "of", words)."""

STYLE = """
:root { --ink: #1d232b; --muted: #5b6672; --line: #d9dee4; --paper: #ffffff; --panel: #f5f7f9;
  --waste: #1f7a5a; --harm: #c0392b; --calls: #c9d3dd; --accent: #2a5db0; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
  background: var(--paper); }
header, main, footer { max-width: 1400px; margin: 0 auto; padding: 0 24px; }
header { padding-top: 28px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 36px 0 12px; padding-bottom: 6px; border-bottom: 2px solid var(--line); }
h3 { font-size: 16px; margin: 0 0 10px; }
h4 { font-size: 14px; margin: 18px 0 8px; color: var(--muted); text-transform: uppercase; letter-spacing: .04em; }
p.lead { color: var(--muted); margin: 0 0 8px; max-width: 70em; }
code, .digest { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 13px; }
.wrap { overflow-wrap: anywhere; }
.policies { display: grid; gap: 20px; grid-template-columns: repeat(auto-fit, minmax(min(440px, 100%), 1fr)); }
.policy { background: var(--panel); border: 1px solid var(--line); border-radius: 10px; padding: 16px 18px;
  min-width: 0; overflow-x: auto; }
.policy h3 code { font-size: 14px; background: #e6ebf0; padding: 2px 6px; border-radius: 4px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(140px, 1fr)); gap: 10px; }
.card { background: var(--paper); border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; }
.card .big { font-size: 28px; font-weight: 650; line-height: 1.1; font-variant-numeric: tabular-nums; }
.card .of { color: var(--muted); font-size: 14px; font-weight: 400; }
.card .words { color: var(--muted); font-size: 13px; }
.card.good .big { color: var(--waste); }
.card.bad .big { color: var(--harm); }
table { border-collapse: collapse; width: 100%; background: var(--paper); }
caption { text-align: left; font-weight: 600; padding: 0 0 6px; }
th, td { padding: 5px 8px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { font-size: 13px; color: var(--muted); font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody th[scope=row] { color: var(--ink); font-weight: 400; font-size: 14px; }
table.figures th[scope=row] { font-size: 15px; }
.sub { display: block; color: var(--muted); font-size: 12px; }
details table { font-size: 14px; }
table.figures td { font-size: 16px; }
td.bar { width: 40%; min-width: 120px; }
.bar-track { display: flex; height: 14px; border-radius: 3px; overflow: hidden; background: #eef1f4; }
.bar-track span { display: block; height: 100%; }
.bar-track .waste { background: var(--waste); }
.bar-track .harm { background: var(--harm); }
.legend { display: flex; gap: 16px; flex-wrap: wrap; font-size: 13px; color: var(--muted); margin: 6px 0 0; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; vertical-align: -1px;
  margin-right: 5px; }
.swatch.waste { background: var(--waste); } .swatch.harm { background: var(--harm); }
.none { color: var(--muted); font-style: italic; margin: 4px 0; }
details { background: var(--paper); border: 1px solid var(--line); border-left: 4px solid var(--harm);
  border-radius: 6px; margin: 0 0 10px; padding: 8px 12px; }
summary { cursor: pointer; }
summary .where { color: var(--muted); font-size: 13px; }
td.digest { white-space: nowrap; }
tr.this td { background: #fdecea; font-weight: 600; }
.status-refused { color: var(--harm); } .status-failed { color: #9a6700; } .status-ran { color: var(--muted); }
.visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
footer { color: var(--muted); font-size: 13px; padding-top: 28px; padding-bottom: 40px; }
@media print { .policy { break-inside: avoid; } details { break-inside: avoid; } }
"""


def escape(text: str) -> str:
    """``text`` as the page shows it: ``printable``, then HTML-escaped (every text of the page goes through it)."""
    return html.escape(printable(text))


def render_html(labels: Sequence[str], tallies: Sequence[Tally], sources: Sequence[str] = ()) -> str:
    """One self-contained HTML page of the replay's figures, one column per policy (``labels[i]`` names
    ``tallies[i]``); ``sources`` names the files replayed (their names are shown, nothing they hold).

    Holds tool names, trajectory ids, policy labels and digests only, never an argument or result value."""
    tool_scale = max([1, *(counts.refused for tally in tallies for _, counts in _tools(tally))])
    position_scale = max([1, *(position.refused for tally in tallies for position in tally.refused_by_position)])
    first = tallies[0] if tallies else Tally()
    files = ", ".join(f"<code>{escape(name)}</code>" for name in sources) or "no files"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>repeat-hooks replay report</title>",
        f"<style>{STYLE}</style></head><body>",
        "<header><h1>What the guard would have done</h1>",
        f'<p class="lead">{_n(first.trajectories)} recorded '
        f"{'trajectory' if first.trajectories == 1 else 'trajectories'} ({_n(first.turns)} turns, "
        f"{_n(first.calls)} tool calls) from {files}, replayed through {_n(len(tallies))} "
        f"{'policy' if len(tallies) == 1 else 'policies'}. A refused call is <strong>waste prevented</strong> "
        "when its recorded result repeated the last one the model had read for that same call, and "
        "<strong>harmful</strong> when it differed: the model would have learned something new.</p></header>",
        "<main>",
        _section("Headline figures", "cards", labels, [_cards(tally) for tally in tallies]),
        '<h2 id="figures">All figures</h2>',
        _figures(labels, tallies),
        _section(
            "Refusals by tool",
            "tools",
            labels,
            [_by_tool(tally, tool_scale, len(tallies)) for tally in tallies],
        ),
        _section(
            "Refusals by position in the turn",
            "positions",
            labels,
            [_by_position(tally, position_scale, len(tallies)) for tally in tallies],
        ),
        _section("Longest loops", "loops", labels, [_loops(tally) for tally in tallies]),
        _section("Harmful refusals", "harmful", labels, [_harmful(tally) for tally in tallies]),
        "</main>",
        "<footer>Made by <code>repeat-hooks replay --html</code>. This page holds tool names, trajectory ids and "
        "digests only, never an argument or result value. Digests are the first 8 hex characters of "
        "unkeyed BLAKE2b digests: equal digests mean equal values, but a short, guessable value (a PIN, "
        "a date) could be recovered by trying every candidate.</footer>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _section(title: str, name: str, labels: Sequence[str], bodies: Sequence[str]) -> str:
    panels = "".join(
        f'<div class="policy" data-policy="{index}" data-section="{name}">'
        f'<h3>Policy <code class="wrap">{escape(label)}</code></h3>{body}</div>'
        for index, (label, body) in enumerate(zip(labels, bodies, strict=True))
    )
    return f'<h2 id="{name}">{escape(title)}</h2><div class="policies">{panels}</div>'


def _cards(tally: Tally) -> str:
    cards = []
    for field, of, words in CARDS:
        value = getattr(tally, field)
        tone = "good" if field in {"waste_prevented", "loops_caught"} else "bad" if value else ""
        total = ""
        if of is not None:
            total = f' <span class="of">of <span data-field="{of}">{_n(getattr(tally, of))}</span></span>'
        cards.append(
            f'<div class="card {tone}"><div class="big"><span data-field="{field}">{_n(value)}</span>{total}</div>'
            f'<div class="words">{escape(words)}</div></div>'
        )
    return f'<div class="cards">{"".join(cards)}</div>'


def _figures(labels: Sequence[str], tallies: Sequence[Tally]) -> str:
    rows = [*ROWS, ("turns", "turns replayed"), ("calls", "calls replayed")]
    head = "".join(f'<th scope="col" class="num wrap"><code>{escape(label)}</code></th>' for label in labels)
    body = []
    for field, name in rows:
        cells = []
        for index, tally in enumerate(tallies):
            text = f'<span data-field="{field}">{_n(getattr(tally, field))}</span>'
            if field == "loops_caught":
                text += f' of <span data-field="loops">{_n(tally.loops)}</span>'
            cells.append(f'<td class="num" data-policy="{index}" data-section="figures">{text}</td>')
        body.append(f'<tr><th scope="row">{escape(name)}</th>{"".join(cells)}</tr>')
    return (
        '<table class="figures"><caption>Every figure, one column per policy (as <code>replay --json</code>)'
        f'</caption><thead><tr><th scope="col">figure</th>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )


def _tools(tally: Tally) -> list[tuple[str | None, Refusals]]:
    """The tools refused, most first, then the tools past ``MAX_TOOLS`` as one row (``None``)."""
    rows: list[tuple[str | None, Refusals]] = list(tally.tools())
    if tally.refused_by_other_tools.refused:
        rows.append((None, tally.refused_by_other_tools))
    return rows


def _bar(counts: Refusals, scale: int) -> str:
    waste = 100 * (counts.refused - counts.harmful) / scale
    harm = 100 * counts.harmful / scale
    return (
        f'<td class="bar" aria-hidden="true"><div class="bar-track"><span class="waste" style="width:{waste:.2f}%">'
        f'</span><span class="harm" style="width:{harm:.2f}%"></span></div></td>'
    )


def _legend(policies: int) -> str:
    shared = "<span>one scale for every policy</span>" if policies > 1 else ""
    return (
        '<p class="legend"><span><span class="swatch waste"></span>waste prevented</span>'
        f'<span><span class="swatch harm"></span>harmful</span>{shared}</p>'
    )


def _by_tool(tally: Tally, scale: int, policies: int) -> str:
    rows = _tools(tally)
    if not rows:
        return '<p class="none">No call refused.</p>'
    body = []
    for tool, counts in rows:
        name = "<em>other tools</em>" if tool is None else f'<code data-field="tool">{escape(tool)}</code>'
        kind = "other" if tool is None else "tool"
        body.append(
            f'<tr data-row="{kind}"><th scope="row">{name}</th>'
            f'<td class="num" data-field="refused">{_n(counts.refused)}</td>'
            f'<td class="num" data-field="harmful">{_n(counts.harmful)}</td>{_bar(counts, scale)}</tr>'
        )
    return (
        '<table><thead><tr><th scope="col">tool</th><th scope="col" class="num">refused</th>'
        '<th scope="col" class="num">harmful</th><th scope="col"><span class="visually-hidden">bar</span></th>'
        f"</tr></thead><tbody>{''.join(body)}</tbody></table>{_legend(policies)}"
    )


def _positions_label(position: Position) -> str:
    if position.last is None:
        return f"{position.first}+"
    if position.first == position.last:
        return f"{position.first}"
    return f"{position.first}–{position.last}"


def _by_position(tally: Tally, scale: int, policies: int) -> str:
    body = []
    for position in tally.refused_by_position:
        share = f"{100 * position.refused / position.calls:.0f}%" if position.calls else "–"
        last = "" if position.last is None else str(position.last)
        body.append(
            f'<tr data-row="position" data-first="{position.first}" data-last="{last}">'
            f'<th scope="row">{_positions_label(position)}</th>'
            f'<td class="num" data-field="calls">{_n(position.calls)}</td>'
            f'<td class="num" data-field="refused">{_n(position.refused)}</td>'
            f'<td class="num" data-field="harmful">{_n(position.harmful)}</td>'
            f'<td class="num">{share}</td>{_bar(Refusals(position.refused, position.harmful), scale)}</tr>'
        )
    return (
        "<table><caption>The call's position in its turn: 1 for the turn's first call</caption><thead><tr>"
        '<th scope="col">position</th><th scope="col" class="num">calls</th><th scope="col" class="num">refused</th>'
        '<th scope="col" class="num">harmful</th><th scope="col" class="num">refused of calls</th>'
        f'<th scope="col"><span class="visually-hidden">bar</span></th></tr></thead><tbody>{"".join(body)}</tbody>'
        f"</table>{_legend(policies)}"
    )


def _loops(tally: Tally) -> str:
    if not tally.longest_loops:
        return '<p class="none">No no-progress loop: no call returned the same outcome three times in a turn.</p>'
    body = "".join(
        f'<tr data-row="loop"><th scope="row"><code data-field="tool">{escape(loop.tool)}</code>'
        f'<span class="sub wrap" data-field="trajectory">{escape(loop.trajectory)}</span></th>'
        f'<td class="num" data-field="turn">{loop.turn}</td>'
        f'<td class="num" data-field="length">{_n(loop.length)}</td>'
        f'<td class="num" data-field="refused">{_n(loop.refused)}</td></tr>'
        for loop in tally.longest_loops
    )
    return (
        "<table><caption>One call (same tool, same arguments) returning the same outcome again and again in "
        'a turn</caption><thead><tr><th scope="col">tool, trajectory</th><th scope="col" class="num">turn</th>'
        '<th scope="col" class="num">runs</th><th scope="col" class="num">refused</th></tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


def _harmful(tally: Tally) -> str:
    if not tally.harmful_refusals:
        return (
            '<p class="none">No harmful refusal: every refused call would have returned what the model had '
            "already read.</p>"
        )
    shown = len(tally.harmful_refusals)
    around = f"up to {CONTEXT_CALLS} calls of its turn before and after it"
    if tally.harmful == 1:
        note = f"The one harmful refusal, shown with {around}."
    elif shown < tally.harmful:
        note = f"The first {shown} of {_n(tally.harmful)} harmful refusals, each shown with {around}."
    else:
        note = f"All {shown} harmful refusals, each shown with {around}."
    items = "".join(_refusal(refusal, index < OPEN_REFUSALS) for index, refusal in enumerate(tally.harmful_refusals))
    return f'<p class="lead">{note}</p>{items}'


def _refusal(refusal: HarmfulRefusal, open_: bool) -> str:
    seen = (
        "it had not run in the turn"
        if refusal.seen is None
        else f'the model had read <span class="digest" data-field="seen">{escape(refusal.seen)}</span>'
    )
    rows = "".join(_context_row(call, call.position == refusal.position) for call in refusal.context)
    new = next(call.outcome for call in refusal.context if call.position == refusal.position)
    return (
        f'<details data-row="harmful"{" open" if open_ else ""}><summary><code data-field="tool">'
        f'{escape(refusal.tool)}</code> refused (<span data-field="rule">{escape(refusal.rule)}</span>): it would '
        f'have returned <span class="digest">{escape(new)}</span>; {seen}'
        '<br><span class="where wrap">'
        f'<span data-field="trajectory">{escape(refusal.trajectory)}</span>, turn <span data-field="turn">'
        f'{refusal.turn}</span>, call <span data-field="position">{refusal.position}</span></span></summary>'
        '<table><thead><tr><th scope="col" class="num">call</th><th scope="col">tool</th>'
        '<th scope="col">arguments</th><th scope="col">outcome</th><th scope="col">what happened</th></tr></thead>'
        f"<tbody>{rows}</tbody></table></details>"
    )


def _context_row(call: ContextCall, this: bool) -> str:
    if call.refused:
        status = "refused: new outcome" if this else "refused"
        kind = "refused"
    else:
        status, kind = ("ran", "ran") if call.ok else ("ran, failed", "failed")
    return (
        f'<tr data-row="context"{" class=this" if this else ""}>'
        f'<td class="num" data-field="position">{call.position}</td>'
        f'<td><code data-field="tool">{escape(call.tool)}</code></td>'
        f'<td class="digest" data-field="arguments">{escape(call.arguments)}</td>'
        f'<td class="digest" data-field="outcome">{escape(call.outcome)}</td>'
        f'<td class="status-{kind}" data-field="status">{status}</td></tr>'
    )


def _n(value: int) -> str:
    return f"{value:,}"
