"""``repeat-hooks replay --html``: the page opens in a real browser (Debian's chromium, driven by Playwright) and
shows the figures ``--json`` prints, tool names as text, and no argument or result value.

Chromium comes from Debian (``apt-get install chromium``), never from ``playwright install``. A missing
``/usr/bin/chromium`` skips the browser tests, or fails them under ``REPEAT_HOOKS_REQUIRE_SERVICES=1`` (as in CI).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from repeat_hooks import Policy
from repeat_hooks.cli import main
from repeat_hooks.replay import MAX_LOOPS, MAX_TOOLS, POSITIONS, RecordedCall, Trajectory, replay
from repeat_hooks.report import render_html

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
