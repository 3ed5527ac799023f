"""``repeat-hooks replay --html``: the page opens in a real browser (Debian's chromium, driven by Playwright) and
shows the figures ``--json`` prints, tool names as text, and no argument or result value.

Chromium comes from Debian (``apt-get install chromium``), never from ``playwright install``. A missing
``/usr/bin/chromium`` skips the browser tests, or fails them under ``REPEAT_HOOKS_REQUIRE_SERVICES=1`` (as in CI).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from repeat_hooks import Policy
from repeat_hooks.offline.cli import main
from repeat_hooks.offline.replay import (
    MAX_LOOPS,
    MAX_TOOLS,
    POSITIONS,
    ROWS,
    ContextCall,
    HarmfulRefusal,
    RecordedCall,
    Tally,
    Trajectory,
    replay,
)
from repeat_hooks.offline.report import render_html

_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)  # ``import services``

from services import missing_service  # noqa: E402

CORPUS = Path(__file__).resolve().parents[2] / "bench" / "corpora" / "tau2.jsonl.gz"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">&amp;"\''
"""A tool name from a user's file that would run script if the page did not escape it."""
SECRET = "PIN-4417-correct-horse"
"""An argument and result value that must never reach the page."""
POLICIES = ("--policy", "{}", "--policy", '{"count": "per_turn"}')


def call(name: str, result: str = "same", ok: bool = True, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments, "result": result, "ok": ok}


RECORDS = [
    {  # a loop: the 3rd and 4th identical calls are refused, their results repeat the last one
        "id": "loop",
        "success": False,
        "turns": [[call(HOSTILE, SECRET, pin=SECRET)] * 5],
    },
    {  # a re-check after a fix: counting per turn refuses the 3rd speed test, whose result was new
        "id": "recheck",
        "success": True,
        "turns": [
            [call("lookup", SECRET, pin=SECRET)],
            [
                call("speed_test", "slow"),
                call("fix_apn"),
                call("speed_test", "slow"),
                call("reboot", ok=False),
                call("speed_test", f"ok {SECRET}"),
                call("lookup", SECRET, pin=SECRET),
            ],
        ],
    },
]

# Reads the page back into the shape of ``replay --json``: every figure is an element's text.
READ_PAGE = """
() => {
  const text = (el) => el.textContent.trim();
  const num = (el) => Number(text(el).replaceAll(",", ""));
  const field = (root, name) => root.querySelector(`[data-field="${name}"]`);
  const panels = (section) => [...document.querySelectorAll(`[data-section="${section}"]`)];
  const byPolicy = {};
  const policy = (el) => (byPolicy[el.dataset.policy] ??= {figures: {}, cards: {}});
  for (const cell of panels("figures"))
    for (const el of cell.querySelectorAll("[data-field]")) policy(cell).figures[el.dataset.field] = num(el);
  for (const panel of panels("cards"))
    for (const el of panel.querySelectorAll("[data-field]")) policy(panel).cards[el.dataset.field] = num(el);
  for (const panel of panels("tools")) {
    const rows = [...panel.querySelectorAll("tr[data-row]")];
    policy(panel).tools = rows.map((row) => ({
      tool: row.dataset.row === "other" ? null : text(field(row, "tool")),
      refused: num(field(row, "refused")),
      harmful: num(field(row, "harmful")),
    }));
  }
  for (const panel of panels("positions"))
    policy(panel).positions = [...panel.querySelectorAll("tr[data-row=position]")].map((row) => ({
      first: Number(row.dataset.first),
      last: row.dataset.last === "" ? null : Number(row.dataset.last),
      calls: num(field(row, "calls")),
      refused: num(field(row, "refused")),
      harmful: num(field(row, "harmful")),
    }));
  for (const panel of panels("loops"))
    policy(panel).loops = [...panel.querySelectorAll("tr[data-row=loop]")].map((row) => ({
      trajectory: text(field(row, "trajectory")),
      turn: num(field(row, "turn")),
      tool: text(field(row, "tool")),
      length: num(field(row, "length")),
      refused: num(field(row, "refused")),
    }));
  for (const panel of panels("harmful"))
    policy(panel).harmful = [...panel.querySelectorAll("details[data-row=harmful]")].map((item) => {
      const summary = item.querySelector(":scope > summary");
      const seen = field(summary, "seen");
      return {
        trajectory: text(field(summary, "trajectory")),
        turn: num(field(summary, "turn")),
        position: num(field(summary, "position")),
        tool: text(field(summary, "tool")),
        rule: text(field(summary, "rule")),
        seen: seen === null ? null : text(seen),
        context: [...item.querySelectorAll("tr[data-row=context]")].map((row) => ({
          position: num(field(row, "position")),
          tool: text(field(row, "tool")),
          arguments: text(field(row, "arguments")),
          outcome: text(field(row, "outcome")),
          status: text(field(row, "status")),
          highlighted: row.classList.contains("this"),
        })),
      };
    });
  return Object.keys(byPolicy).sort().map((key) => byPolicy[key]);
}
"""


def expected(figures: dict[str, Any]) -> dict[str, Any]:
    """What the page must show for one policy of ``replay --json``."""
    headline = ("waste_prevented", "harmful", "successful_with_refusal", "successful", "loops_caught", "loops")
    tools = [{key: row[key] for key in ("tool", "refused", "harmful")} for row in figures["refused_by_tool"]]
    if figures["refused_by_other_tools"]["refused"]:
        tools.append({"tool": None, **figures["refused_by_other_tools"]})
    harmful = []
    for refusal in figures["harmful_refusals"]:
        context = []
        for row in refusal["context"]:
            this = row["position"] == refusal["position"]
            status = ("refused: new outcome" if this else "refused") if row["refused"] else "ran"
            status += "" if row["ok"] or row["refused"] else ", failed"
            context.append(
                {key: row[key] for key in ("position", "tool", "arguments", "outcome")}
                | {"status": status, "highlighted": this}
            )
        harmful.append({key: refusal[key] for key in ("trajectory", "turn", "position", "tool", "rule", "seen")})
        harmful[-1]["context"] = context
    return {
        "figures": {key: value for key, value in figures.items() if type(value) is int},
        "cards": {key: figures[key] for key in headline},
        "tools": tools,
        "positions": figures["refused_by_position"],
        "loops": figures["longest_loops"],
        "harmful": harmful,
    }


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.is_file():
        missing_service(f"{CHROMIUM} is missing: apt-get install chromium (Debian's; never `playwright install`)")
    from playwright import sync_api  # the test-core extra's

    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def replay_to_page(tmp_path: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[Path, list[Any]]:
    """Run ``replay --json --html`` once: the page written and the figures printed."""
    page = tmp_path / "report.html"
    assert main(["replay", *argv, "--json", "--html", str(page)]) == 0
    figures: list[Any] = json.loads(capsys.readouterr().out)
    return page, figures


def open_page(browser: Any, path: Path) -> tuple[Any, list[str]]:
    """Open ``path`` offline; returns the page and every URL it requested."""
    context = browser.new_context(offline=True, viewport={"width": 1400, "height": 900})
    page = context.new_page()
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(path.as_uri())
    return page, requested


def test_a_small_corpus_shows_the_json_figures_and_runs_no_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], browser: Any
) -> None:
    corpus = tmp_path / "runs.jsonl"
    corpus.write_text("".join(json.dumps(record) + "\n" for record in RECORDS))
    path, figures = replay_to_page(tmp_path, capsys, str(corpus), *POLICIES)
    default, per_turn = figures
    assert default["waste_prevented"] == 3 and default["refused_by_tool"][0]["tool"] == HOSTILE
    assert per_turn["harmful"] == 1 and per_turn["refused_by_position"][3]["harmful"] == 1  # the 5th call
    page, requested = open_page(browser, path)
    assert page.evaluate(READ_PAGE) == [expected(one) for one in figures]
    assert page.evaluate("window.pwned") is None  # the tool name is text, not markup
    assert page.locator("code", has_text="<script>").first.text_content() == HOSTILE
    assert requested == [path.as_uri()]  # self-contained: nothing else to fetch
    assert page.title() == "repeat-hooks replay report"
    html = path.read_text()
    assert "4417" not in html and "correct-horse" not in html and "slow" not in html
    # the harmful speed test: the model had read "slow"; the refused run would have returned something new
    (speed,) = per_turn["harmful_refusals"]
    assert (speed["trajectory"], speed["turn"], speed["position"], speed["rule"]) == ("recheck", 2, 5, "repeat")
    assert speed["seen"] == speed["context"][1]["outcome"] != speed["context"][3]["outcome"]
    assert [(c["position"], c["tool"], c["ok"], c["refused"]) for c in speed["context"]] == [
        (2, "fix_apn", True, False),
        (3, "speed_test", True, False),
        (4, "reboot", False, False),
        (5, "speed_test", True, True),
        (6, "lookup", True, False),
    ]


def test_the_tau2_corpus_shows_the_json_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], browser: Any
) -> None:
    path, figures = replay_to_page(tmp_path, capsys, str(CORPUS), *POLICIES)
    default, per_turn = figures
    assert default["trajectories"] == 858 and default["harmful"] == 0 and per_turn["harmful"] > 0
    assert len(per_turn["harmful_refusals"]) == 20 and len(default["longest_loops"]) == MAX_LOOPS
    page, requested = open_page(browser, path)
    assert page.evaluate(READ_PAGE) == [expected(one) for one in figures]
    assert requested == [path.as_uri()]
    assert page.get_by_text("No harmful refusal").count() == 1  # the default's panel
    assert page.get_by_text(f"The first 20 of {per_turn['harmful']}").count() == 1
    # the bars: one scale for every policy, each as long as its tool's refusals
    bars = page.evaluate(
        """() => [...document.querySelectorAll('[data-section=tools] tr[data-row=tool]')].map((row) => [
             Number(row.querySelector('[data-field=refused]').textContent.replaceAll(',', '')),
             [...row.querySelectorAll('.bar-track span')].reduce((sum, s) => sum + s.getBoundingClientRect().width, 0),
             row.querySelector('.bar-track').getBoundingClientRect().width])"""
    )
    most = max(refused for refused, _, _ in bars)
    for refused, width, track in bars:
        assert width == pytest.approx(track * refused / most, abs=1.0)
    html = path.read_text()
    assert "james_lee_6136" not in html and "362 Spruce Street" not in html  # an argument, a result


def test_the_page_escapes_every_text_from_the_files() -> None:
    hostile_id = "<b>id</b>"
    turn = [[RecordedCall(HOSTILE, {"q": 1}, str(n))] for n in range(4)]
    tally = replay(Policy(count="per_turn", max_calls=1), [Trajectory(hostile_id, [turn])])
    html = render_html(["<i>policy</i>"], [tally], ["<u>file</u>.jsonl"])
    assert tally.harmful == 3 and tally.longest_loops == [] and len(tally.harmful_refusals) == 3
    for text in (HOSTILE, hostile_id, "<i>policy</i>", "<u>file</u>"):
        assert text not in html
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in html and "&lt;b&gt;id&lt;/b&gt;" in html


def test_refusals_are_counted_by_position_in_the_turn() -> None:
    # one turn of 60 calls to one tool, each with the result it had before: every call from the 3rd is refused
    turn = [[RecordedCall("poll", {}, "same")] for _ in range(60)]
    tally = replay(Policy(max_refusals=None), [Trajectory("t", [turn])])
    counts = [(p.first, p.last, p.calls, p.refused, p.harmful) for p in tally.refused_by_position]
    assert counts == [
        (1, 1, 1, 0, 0),
        (2, 2, 1, 0, 0),
        (3, 3, 1, 1, 0),
        (4, 5, 2, 2, 0),
        (6, 10, 5, 5, 0),
        (11, 20, 10, 10, 0),
        (21, 50, 30, 30, 0),
        (51, None, 10, 10, 0),
    ]
    assert [(p.first, p.last) for p in tally.refused_by_position] == list(POSITIONS)
    assert tally.longest_loops[0].length == 60 and tally.longest_loops[0].refused == 58


def test_the_longest_loops_are_kept_longest_first_and_bounded() -> None:
    lengths = (3, 9, 4, *range(5, 5 + MAX_LOOPS), 9)  # 5 to 14, and 9 three times
    trajectories = [
        Trajectory(f"t{index}", [[[RecordedCall("poll", {}, "same")] for _ in range(length)]])
        for index, length in enumerate(lengths)
    ]
    tally = replay(Policy(), trajectories)
    kept = [(loop.trajectory, loop.length) for loop in tally.longest_loops]
    assert tally.loops == len(lengths) and len(kept) == MAX_LOOPS
    assert [length for _, length in kept] == [14, 13, 12, 11, 10, 9, 9, 9, 8, 7]
    assert [name for name, length in kept if length == 9] == ["t1", "t7", "t13"]  # the first met first
    assert all(loop.refused == loop.length - 2 and loop.tool == "poll" for loop in tally.longest_loops)


def test_tools_past_the_limit_are_counted_together() -> None:
    turn = [[RecordedCall(f"tool_{n:03d}", {}, "same")] for n in range(MAX_TOOLS + 5) for _ in range(3)]
    tally = replay(Policy(max_refusals=None), [Trajectory("t", [turn])])
    assert len(tally.refused_by_tool) == MAX_TOOLS
    assert tally.refused_by_other_tools.refused == 5 and tally.refused == MAX_TOOLS + 5
    figures = tally.as_dict()
    assert figures["refused_by_tool"][0] == {"tool": "tool_000", "refused": 1, "harmful": 0}
    assert figures["refused_by_other_tools"] == {"refused": 5, "harmful": 0}
    json.dumps(figures)  # JSON-ready


def test_a_page_that_cannot_be_written_is_named_before_the_replay_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "runs.jsonl"
    corpus.write_text(json.dumps(RECORDS[0]) + "\n")
    for where, why in ((tmp_path / "missing" / "report.html", "no folder"), (tmp_path, "is a folder")):
        assert main(["replay", str(corpus), "--html", str(where)]) == 2
        captured = capsys.readouterr()
        assert captured.err == f"repeat-hooks replay: --html {where}: {why}" + (
            f" {where.parent}\n" if why == "no folder" else "\n"
        )
        assert captured.out == ""  # nothing replayed, nothing printed
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    assert "one self-contained HTML page" in " ".join(capsys.readouterr().out.split())


# The page read back without a browser: ``html.parser`` builds a small tree, the tests read what it says.

VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"})
CONTAINERS = frozenset({"#document", "html", "head", "body", "header", "main", "table", "thead", "tbody", "tr"})
"""Elements that hold only elements: text directly inside one is stray text on the page (or foster-parented
out of a table)."""
PANELS = frozenset({"policies", "policy", "cards", "card", "legend", "bar-track"})
"""Classes of ``div``/``p`` elements that hold only elements too."""


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list[Element | str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        """The text a reader sees, whitespace collapsed."""
        return " ".join("".join(self._strings()).split())

    def _strings(self) -> Iterator[str]:
        for child in self.children:
            yield from [child] if isinstance(child, str) else child._strings()

    def all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Element]:
        """Every descendant element (document order) with that tag, class and attributes (``data_x`` for
        ``data-x``)."""
        wanted = {name.replace("_", "-"): value for name, value in attrs.items()}
        found = []
        for child in self.children:
            if isinstance(child, str):
                continue
            if (
                (tag is None or child.tag == tag)
                and (cls is None or cls in child.classes)
                and all(child.attrs.get(name) == value for name, value in wanted.items())
            ):
                found.append(child)
            found.extend(child.all(tag, cls, **attrs))
        return found

    def one(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Element:
        (element,) = self.all(tag, cls, **attrs)
        return element

    def elements(self) -> list[Element]:
        return [child for child in self.children if not isinstance(child, str)]


class _Tree(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.document = Element("#document", {})
        self.open = [self.document]
        self.doctype: str | None = None

    def handle_decl(self, decl: str) -> None:
        assert self.doctype is None and self.document.children == [], "the doctype comes first"
        self.doctype = decl

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {name: value or "" for name, value in attrs})
        self.open[-1].children.append(element)
        if tag not in VOID:
            self.open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.open[-1].children.append(Element(tag, {name: value or "" for name, value in attrs}))

    def handle_endtag(self, tag: str) -> None:
        assert self.open[-1].tag == tag, f"</{tag}> closes <{self.open[-1].tag}>"
        self.open.pop()

    def handle_data(self, data: str) -> None:
        self.open[-1].children.append(data)


def parse(html: str) -> Element:
    """The page as a tree; every element closed in order, the doctype first."""
    tree = _Tree()
    tree.feed(html)
    tree.close()
    assert tree.open == [tree.document], f"<{tree.open[-1].tag}> never closed"
    assert tree.doctype is not None and tree.doctype.lower() == "doctype html"  # standards mode
    return tree.document


def stray_text(element: Element) -> list[str]:
    """Text sitting directly inside an element meant to hold only elements, anywhere in ``element``."""
    holds_elements = element.tag in CONTAINERS or (element.tag in {"div", "p"} and element.classes & PANELS)
    found = [child for child in element.children if isinstance(child, str) and child.strip() and holds_elements]
    for child in element.elements():
        found.extend(stray_text(child))
    return found


def panels(page: Element, section: str) -> list[Element]:
    return page.all("div", data_section=section)


def widths(row: Element) -> tuple[float, float]:
    """A bar's waste and harm parts, in % of the track."""

    def width(span: Element) -> float:
        name, value = span.attrs["style"].split(":")
        assert name == "width" and value.endswith("%")
        return float(value[:-1])

    track = row.one("div", "bar-track")
    return width(track.one("span", "waste")), width(track.one("span", "harm"))


def tool_rows(panel: Element) -> list[tuple[str, str, str, str, tuple[float, float]]]:
    """(kind, name, refused, harmful, bar) of each row of a "Refusals by tool" panel."""
    return [
        (
            row.attrs["data-row"],
            row.one("th").text(),
            row.one(data_field="refused").text(),
            row.one(data_field="harmful").text(),
            widths(row),
        )
        for row in panel.one("tbody").elements()
    ]


def legend(panel: Element) -> list[str]:
    return [span.text() for span in panel.one("p", "legend").elements()]


def header_cells(panel: Element) -> list[str]:
    return [cell.text() for cell in panel.one("thead").all("th")]


def poll_and_ping(success: bool = True) -> Trajectory:
    """Six identical polls (calls 3 to 6 repeat their result: waste), then three pings whose third, refused,
    would have returned something new (harmful)."""
    polls = [[RecordedCall("poll", {}, "same")] for _ in range(6)]
    pings = [[RecordedCall("ping", {}, "a")], [RecordedCall("ping", {}, "a")], [RecordedCall("ping", {}, "b")]]
    return Trajectory("t1", [polls, pings], success=success)


STRICT = Policy(max_refusals=None)
"""Refuses poll 4 times (waste) and ping once (harmful)."""
LENIENT = Policy(max_calls=None, max_cycle_period=None, max_opaque_runs=None)
"""Refuses nothing."""


@pytest.fixture  # built for each test (milliseconds): a test reads a page its own run rendered
def two_policies() -> tuple[Tally, Tally, Element]:
    strict, lenient = (replay(policy, [poll_and_ping()]) for policy in (STRICT, LENIENT))
    assert (strict.waste_prevented, strict.harmful, lenient.refused, lenient.loops) == (4, 1, 0, 1)
    html = render_html(["strict", "lenient"], [strict, lenient], ["a.jsonl", "b.jsonl.gz"])
    return strict, lenient, parse(html)


def test_the_page_is_one_document_with_no_stray_text(two_policies: tuple[Tally, Tally, Element]) -> None:
    *_, page = two_policies
    (root,) = page.elements()
    assert root.tag == "html" and root.attrs["lang"].lower() == "en"  # language tags ignore case
    assert [child.tag for child in root.elements()] == ["head", "body"]
    head, body = root.elements()
    assert head.one("title").text() == "repeat-hooks replay report"
    assert [child.tag for child in body.elements()] == ["header", "main", "footer"]
    assert stray_text(page) == []
    assert page.all("script") == [] and page.all("link") == [] and page.all("img") == []  # nothing to fetch


def test_the_page_says_what_was_replayed_from_which_files(two_policies: tuple[Tally, Tally, Element]) -> None:
    *_, page = two_policies
    assert page.one("h1").text() == "What the guard would have done"
    explained = (
        "A refused call is waste prevented when its recorded result repeated the last one the model had read "
        "for that same call, and harmful when it differed: the model would have learned something new."
    )
    lead = page.one("header").one("p", "lead")
    assert lead.text() == (
        f"1 recorded trajectory (2 turns, 9 tool calls) from a.jsonl, b.jsonl.gz, replayed through 2 policies. "
        f"{explained}"
    )
    assert [code.text() for code in lead.all("code")] == ["a.jsonl", "b.jsonl.gz"]
    assert page.one("footer").text() == (
        "Made by repeat-hooks replay --html. This page holds tool names, trajectory ids and digests only, never "
        "an argument or result value. Digests are the first 8 hex characters of unkeyed BLAKE2b digests: equal "
        "digests mean equal values, but a short, guessable value (a PIN, a date) could be recovered by trying "
        "every candidate."
    )
    # the first policy's trajectories, with thousands separators; one policy, no files named
    big = Tally(trajectories=1200, turns=3400, calls=56789)
    lead = parse(render_html(["default"], [big])).one("header").one("p", "lead")
    assert lead.text() == (
        f"1,200 recorded trajectories (3,400 turns, 56,789 tool calls) from no files, replayed through 1 policy. "
        f"{explained}"
    )


def test_each_section_has_its_heading_and_one_panel_per_policy_in_order(
    two_policies: tuple[Tally, Tally, Element],
) -> None:
    *_, page = two_policies
    sections = [(h2.attrs["id"], h2.text()) for h2 in page.all("h2")]
    assert sections == [
        ("cards", "Headline figures"),
        ("figures", "All figures"),
        ("tools", "Refusals by tool"),
        ("positions", "Refusals by position in the turn"),
        ("loops", "Longest loops"),
        ("harmful", "Harmful refusals"),
    ]
    for section, _ in sections:
        if section == "figures":
            continue
        found = panels(page, section)
        assert [(panel.attrs["data-policy"], panel.one("h3").text()) for panel in found] == [
            ("0", "Policy strict"),
            ("1", "Policy lenient"),
        ]
    # the figures follow the labels' order, whichever it is
    strict, lenient, _ = two_policies
    swapped = parse(render_html(["lenient", "strict"], [lenient, strict]))
    assert [panel.one(data_field="waste_prevented").text() for panel in panels(swapped, "cards")] == ["0", "4"]
    assert [panel.one("h3").text() for panel in panels(swapped, "cards")] == ["Policy lenient", "Policy strict"]


def test_the_cards_show_each_headline_figure_with_its_words(two_policies: tuple[Tally, Tally, Element]) -> None:
    *_, page = two_policies

    def cards(panel: Element) -> list[tuple[str, str, set[str]]]:
        # the tone colours the figure: green for what the guard saved, red for a refusal that hurt
        found = panel.one("div", "cards").elements()
        return [(card.one("div", "words").text(), card.one("div", "big").text(), card.classes) for card in found]

    strict, lenient = panels(page, "cards")
    assert cards(strict) == [
        ("wasted calls prevented", "4", {"card", "good"}),
        ("harmful refusals", "1", {"card", "bad"}),
        ("successful runs with a refusal or stop", "1 of 1", {"card", "bad"}),
        ("no-progress loops caught", "1 of 1", {"card", "good"}),
    ]
    assert cards(lenient) == [
        ("wasted calls prevented", "0", {"card", "good"}),
        ("harmful refusals", "0", {"card"}),  # nothing to alarm anyone
        ("successful runs with a refusal or stop", "0 of 1", {"card"}),
        ("no-progress loops caught", "0 of 1", {"card", "good"}),
    ]


def test_the_figures_table_has_every_figure_one_column_per_policy(
    two_policies: tuple[Tally, Tally, Element],
) -> None:
    *_, page = two_policies
    table = page.one("table", "figures")
    assert table.one("caption").text() == "Every figure, one column per policy (as replay --json)"
    assert header_cells(table) == ["figure", "strict", "lenient"]
    rows = [(row.one("th").text(), [cell.text() for cell in row.all("td")]) for row in table.one("tbody").elements()]
    expected = {
        "trajectories": ["1", "1"],
        "successful": ["1", "1"],
        "successful_with_refusal": ["1", "0"],
        "harmful_in_successful": ["1", "0"],
        "harmful": ["1", "0"],
        "waste_prevented": ["4", "0"],
        "unjudged": ["0", "0"],
        "refused": ["5", "0"],
        "warned": ["0", "0"],
        "turns_stopped": ["0", "0"],
        "loops_caught": ["1 of 1", "0 of 1"],
    }
    assert rows == [
        *((name, expected[figure]) for figure, name in ROWS),
        ("turns replayed", ["2", "2"]),
        ("calls replayed", ["9", "9"]),
    ]


def test_bars_are_as_long_as_the_refusals_on_one_scale_for_every_policy(
    two_policies: tuple[Tally, Tally, Element],
) -> None:
    *_, page = two_policies
    strict, lenient = panels(page, "tools")
    assert header_cells(strict) == ["tool", "refused", "harmful", "bar"]
    # poll's 4 refusals fill the track; ping's 1, harmful, is a quarter of it
    assert tool_rows(strict) == [("tool", "poll", "4", "0", (100.0, 0.0)), ("tool", "ping", "1", "1", (0.0, 25.0))]
    assert legend(strict) == ["waste prevented", "harmful", "one scale for every policy"]
    assert lenient.one("p", "none").text() == "No call refused."
    assert lenient.all("table") == [] and lenient.all("p", "legend") == []


def test_refusals_by_position_are_labelled_and_shared_of_calls(two_policies: tuple[Tally, Tally, Element]) -> None:
    *_, page = two_policies
    strict, lenient = panels(page, "positions")
    assert header_cells(strict) == ["position", "calls", "refused", "harmful", "refused of calls", "bar"]
    rows = [
        (row.one("th").text(), *(cell.text() for cell in row.all("td", "num")), widths(row))
        for row in strict.all("tr", data_row="position")
    ]
    assert rows == [
        ("1", "2", "0", "0", "0%", (0.0, 0.0)),
        ("2", "2", "0", "0", "0%", (0.0, 0.0)),
        ("3", "2", "2", "1", "100%", (50.0, 50.0)),  # poll's waste and ping's harm, on a scale of 2
        ("4–5", "2", "2", "0", "100%", (100.0, 0.0)),
        ("6–10", "1", "1", "0", "100%", (50.0, 0.0)),
        ("11–20", "0", "0", "0", "–", (0.0, 0.0)),  # no call that far into a turn
        ("21–50", "0", "0", "0", "–", (0.0, 0.0)),
        ("51+", "0", "0", "0", "–", (0.0, 0.0)),
    ]
    calls = [row.one(data_field="calls").text() for row in lenient.all("tr", data_row="position")]
    assert calls == ["2", "2", "2", "2", "1", "0", "0", "0"]
    assert all(widths(row) == (0.0, 0.0) for row in lenient.all("tr", data_row="position"))
    assert legend(lenient) == ["waste prevented", "harmful", "one scale for every policy"]


def test_one_refusal_fills_the_bar_when_it_is_the_most() -> None:
    tally = replay(Policy(), [Trajectory("t", [[[RecordedCall("poll", {}, "same")] for _ in range(3)]])])
    assert (tally.refused, tally.waste_prevented) == (1, 1)
    page = parse(render_html(["default"], [tally]))
    (tools,) = panels(page, "tools")
    assert tool_rows(tools) == [("tool", "poll", "1", "0", (100.0, 0.0))]
    assert legend(tools) == ["waste prevented", "harmful"]  # one policy: no scale to share
    (positions,) = panels(page, "positions")
    bars = [widths(row) for row in positions.all("tr", data_row="position")]
    assert bars == [(0.0, 0.0), (0.0, 0.0), (100.0, 0.0), *[(0.0, 0.0)] * 5]
    assert legend(positions) == ["waste prevented", "harmful"]


def test_tools_past_the_limit_show_as_one_other_tools_row() -> None:
    turn = [[RecordedCall(f"tool_{n:03d}", {}, "same")] for n in range(MAX_TOOLS + 5) for _ in range(3)]
    tally = replay(Policy(max_refusals=None), [Trajectory("t", [turn])])
    (tools,) = panels(parse(render_html(["default"], [tally])), "tools")
    rows = tool_rows(tools)
    assert len(rows) == MAX_TOOLS + 1
    assert rows[0] == ("tool", "tool_000", "1", "0", (20.0, 0.0))  # 1 of the 5 other tools' refusals
    assert rows[-1] == ("other", "other tools", "5", "0", (100.0, 0.0))


def test_every_text_from_the_files_is_text_on_the_page() -> None:
    hostile_id = '<b onclick="x()">id</b>'
    label = "<i>policy</i> & co"
    loop = [[RecordedCall(HOSTILE, {"q": 1}, "same")] for _ in range(4)]
    new = [[RecordedCall(HOSTILE, {"q": 2}, str(n))] for n in range(4)]
    tally = replay(Policy(count="per_turn", max_calls=1), [Trajectory(hostile_id, [loop, new])])
    assert tally.longest_loops and tally.harmful_refusals and tally.waste_prevented
    page = parse(render_html([label], [tally], ["<u>runs</u>.jsonl", 'a"b.jsonl']))
    assert [element.tag for element in page.all() if element.tag in {"script", "img", "b", "i", "u"}] == []
    assert all(not name.startswith("on") for element in page.all() for name in element.attrs)
    lead = page.one("header").one("p", "lead")
    assert [code.text() for code in lead.all("code")] == ["<u>runs</u>.jsonl", 'a"b.jsonl']
    assert {panel.one("h3").one("code").text() for panel in page.all("div", "policy")} == {label}
    assert page.one("table", "figures").one("thead").all("th")[1].text() == label
    (tools,) = panels(page, "tools")
    assert [row[1] for row in tool_rows(tools)] == [HOSTILE]
    (loops,) = panels(page, "loops")
    for row in loops.all("tr", data_row="loop"):
        assert (row.one(data_field="tool").text(), row.one(data_field="trajectory").text()) == (HOSTILE, hostile_id)
    (harmful,) = panels(page, "harmful")
    for item in harmful.all("details", data_row="harmful"):
        assert item.one("summary").one(data_field="tool").text() == HOSTILE
        assert item.one("summary").one(data_field="trajectory").text() == hostile_id
        assert {row.one(data_field="tool").text() for row in item.all("tr", data_row="context")} == {HOSTILE}


def test_a_page_with_no_trajectories_or_no_policy_still_says_so() -> None:
    empty = replay(Policy(), [])
    page = parse(render_html(["default"], [empty]))
    lead = page.one("header").one("p", "lead").text()
    assert lead.startswith("0 recorded trajectories (0 turns, 0 tool calls) from no files, replayed through 1 policy.")
    (cards,) = panels(page, "cards")
    assert [card.one("div", "big").text() for card in cards.one("div", "cards").elements()] == [
        "0",
        "0",
        "0 of 0",
        "0 of 0",
    ]
    assert panels(page, "tools")[0].one("p", "none").text() == "No call refused."
    (positions,) = panels(page, "positions")
    rows = positions.all("tr", data_row="position")
    assert [row.all("td", "num")[3].text() for row in rows] == ["–"] * len(POSITIONS)  # no share of no calls
    assert all(widths(row) == (0.0, 0.0) for row in rows)  # no NaN, no overflow
    assert panels(page, "loops")[0].one("p", "none").text().startswith("No no-progress loop")
    assert panels(page, "harmful")[0].one("p", "none").text().startswith("No harmful refusal")
    assert stray_text(page) == []
    # no policy at all: the page still opens, with every heading and no panel
    page = parse(render_html([], []))
    lead = page.one("header").one("p", "lead").text()
    assert lead.startswith(
        "0 recorded trajectories (0 turns, 0 tool calls) from no files, replayed through 0 policies."
    )
    assert len(page.all("h2")) == 6 and page.all("div", "policy") == []


def test_every_policy_needs_its_label() -> None:
    tally = replay(Policy(), [poll_and_ping()])
    for labels, tallies in ((["a"], [tally, tally]), (["a", "b"], [tally])):
        with pytest.raises(ValueError, match="zip"):
            render_html(labels, tallies)


def harmful_refusal(trajectory: str, seen: str | None) -> HarmfulRefusal:
    """A refusal of ``track`` at call 3 of turn 2, among a run, a failure and an earlier refusal."""
    return HarmfulRefusal(
        trajectory=trajectory,
        turn=2,
        position=3,
        tool="track",
        rule="repeat",
        seen=seen,
        context=(
            ContextCall(1, "track", "a1a1a1a1", "0e0e0e0e", ok=True, refused=False),
            ContextCall(2, "lookup", "b2b2b2b2", "f0f0f0f0", ok=False, refused=False),
            ContextCall(3, "track", "a1a1a1a1", "9n9n9n9n", ok=True, refused=True),
            ContextCall(4, "track", "a1a1a1a1", "9n9n9n9n", ok=True, refused=True),
        ),
    )


def harmful_panel(harmful: int, shown: int, seen: str | None = "0e0e0e0e") -> Element:
    tally = Tally(harmful=harmful)
    tally.harmful_refusals = [harmful_refusal(f"run-{n}", seen) for n in range(shown)]
    (panel,) = panels(parse(render_html(["p"], [tally], [])), "harmful")
    return panel


AROUND = "up to 3 calls of its turn before and after it"


def test_each_harmful_refusal_is_shown_with_what_it_would_have_returned_and_the_calls_around_it() -> None:
    panel = harmful_panel(1, 1)
    assert panel.one("p", "lead").text() == f"The one harmful refusal, shown with {AROUND}."
    (item,) = panel.all("details", data_row="harmful")
    assert "open" in item.attrs
    summary = item.one("summary")  # two lines: what it would have returned, then where
    assert summary.text().startswith(
        "track refused (repeat): it would have returned 9n9n9n9n; the model had read 0e0e0e0e"
    )
    assert summary.one("span", "where").text() == "run-0, turn 2, call 3"
    rows = [
        ([cell.text() for cell in row.all("td")], "this" in row.classes) for row in item.all("tr", data_row="context")
    ]
    assert rows == [
        (["1", "track", "a1a1a1a1", "0e0e0e0e", "ran"], False),
        (["2", "lookup", "b2b2b2b2", "f0f0f0f0", "ran, failed"], False),
        (["3", "track", "a1a1a1a1", "9n9n9n9n", "refused: new outcome"], True),
        (["4", "track", "a1a1a1a1", "9n9n9n9n", "refused"], False),
    ]
    assert [row.one(data_field="status").classes for row in item.all("tr", data_row="context")] == [
        {"status-ran"},
        {"status-failed"},
        {"status-refused"},
        {"status-refused"},
    ]
    never_ran = harmful_panel(1, 1, seen=None).one("summary").text()
    assert never_ran.startswith("track refused (repeat): it would have returned 9n9n9n9n; it had not run in the turn")


@pytest.mark.parametrize(
    ("harmful", "shown", "lead"),
    [
        (2, 2, f"All 2 harmful refusals, each shown with {AROUND}."),
        (5, 4, f"The first 4 of 5 harmful refusals, each shown with {AROUND}."),
        (1_234, 4, f"The first 4 of 1,234 harmful refusals, each shown with {AROUND}."),
    ],
)
def test_the_harmful_refusals_say_how_many_are_shown_and_open_the_first_three(
    harmful: int, shown: int, lead: str
) -> None:
    panel = harmful_panel(harmful, shown)
    assert panel.one("p", "lead").text() == lead
    items = panel.all("details", data_row="harmful")
    assert [item.one(data_field="trajectory").text() for item in items] == [f"run-{n}" for n in range(shown)]
    assert ["open" in item.attrs for item in items] == [n < 3 for n in range(shown)]
