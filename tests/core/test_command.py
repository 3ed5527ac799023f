"""The kit's hook command (``repeat_hooks.kit.command``) and its settings-file editing (``repeat_hooks.kit.install``),
on a CLI protocol of the test's own: what each event does to the state, the settings files, and every way it fails
(one line on stderr, then open or closed). The Claude Code adapter's tests run the same on the real CLI."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from repeat_hooks import Policy, Refusal, Stop, ToolCall
from repeat_hooks.errors import GuardSetupError
from repeat_hooks.kit.command import (
    MAX_EVENT_BYTES,
    Asked,
    CommandHook,
    Event,
    Problem,
    Ran,
    Responded,
    SettingsError,
    Turn,
    run,
    settings,
)
from repeat_hooks.kit.install import Entry, edit, installed, is_ours, removed
from repeat_hooks.messages import STORE_DOWN_REFUSAL, STORE_DOWN_STOP
from repeat_hooks.stop_rules import Feed


class Echo(CommandHook):
    """A CLI of the test's own: ``{"e": "turn" | "ask" | "ran" | "failed" | "done", "s": session, "id", "x"}``;
    its answers say what the kit decided."""

    cli = "echo"
    failed_open = 7
    asks = "ask"
    feeds = (Feed.OUTCOMES, Feed.MODEL_CALLS, Feed.WARNINGS)

    def read(self, event: Mapping[str, Any], policy: Policy) -> Event:
        if "s" not in event:
            raise Problem("the event has no session")
        call = ToolCall("shell", {"cmd": event.get("x", "make")}, call_id=event.get("id"))
        step = {
            "turn": Turn(),
            "ask": Asked(call),
            "ran": Ran(call, True, event.get("out", "ok")),
            "failed": Ran(call, False, "boom"),
            "done": Responded(),
            "model": Responded(before=True),
        }.get(event["e"])
        return Event(event["s"], event.get("t"), step)

    def project(self, event: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
        return event.get("cwd") or environ.get("PROJECT")

    def allowed(self, event_name: str, warning: str | None) -> dict[str, Any] | None:
        return {"warning": warning} if warning else None

    def denied(self, refusal: Refusal, stop: Stop | None) -> dict[str, Any]:
        said = {"said": stop.message} if stop is not None else {}
        return {"deny": refusal.message, "reason": refusal.reason.value, "stop": stop and stop.reason.value, **said}

    def ended(self, stop: Stop) -> dict[str, Any]:
        return {"end": stop.message, "reason": stop.reason.value}


def send(home: Path, event: Mapping[str, Any] | bytes, **env: str) -> tuple[int, Any, str]:
    raw = event if isinstance(event, bytes) else json.dumps(event).encode()
    out, err = io.StringIO(), io.StringIO()
    code = run(Echo(), stdin=io.BytesIO(raw), stdout=out, stderr=err, environ={"HOME": str(home), **env})
    return code, json.loads(out.getvalue()) if out.getvalue() else None, err.getvalue()


def user_settings(home: Path, text: str) -> Path:
    path = home / ".config" / "repeat-hooks" / "settings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def one_call(home: Path, number: int, out: str = "ok", **env: str) -> Any:
    """One response with one call: ask (its answer returned), and if it ran, its outcome and the response's end."""
    _, asked, _ = send(home, {"e": "ask", "s": "s1", "t": "t1", "id": f"c{number}"}, **env)
    if asked is None:
        send(home, {"e": "ran", "s": "s1", "t": "t1", "id": f"c{number}", "out": out}, **env)
    _, done, _ = send(home, {"e": "done", "s": "s1", "t": "t1"}, **env)
    return asked or done


def test_the_third_same_call_is_denied_and_the_ignored_refusals_end_the_turn(tmp_path: Path) -> None:
    assert send(tmp_path, {"e": "turn", "s": "s1", "t": "t1"}) == (0, None, "")
    answers = [one_call(tmp_path, number) for number in range(5)]
    assert answers[:2] == [None, None]
    assert [a["reason"] for a in answers[2:]] == ["repeat", "repeat", "repeat"]
    assert [a["stop"] for a in answers[2:]] == [None, None, "ignored_refusals"]
    _, done, _ = send(tmp_path, {"e": "done", "s": "s1", "t": "t1"})
    assert done["reason"] == "ignored_refusals"  # the turn stays stopped
    _, asked, _ = send(tmp_path, {"e": "ask", "s": "s1", "t": "t1", "id": "c9"})
    assert (asked["reason"], asked["stop"]) == ("turn_ended", "ignored_refusals")
    assert send(tmp_path, {"e": "ask", "s": "s1", "t": "t2", "id": "c10"})[1] is None  # a new turn's calls run
    assert send(tmp_path, {"e": "ask", "s": "s2", "t": "t1", "id": "c1"})[1] is None  # another session's too


def test_a_new_result_restarts_the_count_and_a_warning_is_answered(tmp_path: Path) -> None:
    assert [one_call(tmp_path, number, out=f"v{number}") for number in range(5)] == [None] * 5
    user_settings(tmp_path, '{"warn": true}')
    send(tmp_path, {"e": "ask", "s": "w", "id": "a"})
    first = send(tmp_path, {"e": "ran", "s": "w", "id": "a"})[1]
    send(tmp_path, {"e": "done", "s": "w"})
    send(tmp_path, {"e": "ask", "s": "w", "id": "b"})
    second = send(tmp_path, {"e": "ran", "s": "w", "id": "b"})[1]
    assert first is None and second["warning"].startswith("Note: shell has now run 2 times like this")


def test_errors_in_a_row_end_the_turn_at_a_responses_end(tmp_path: Path) -> None:
    user_settings(tmp_path, '{"max_errors_in_a_row": 2}')
    ends = []
    for number in range(2):
        send(tmp_path, {"e": "ask", "s": "s1", "id": f"c{number}", "x": f"make {number}"})
        send(tmp_path, {"e": "failed", "s": "s1", "id": f"c{number}"})
        ends.append(send(tmp_path, {"e": "done", "s": "s1"})[1])
    assert ends[0] is None and ends[1]["reason"] == "too_many_errors"


@pytest.mark.parametrize(
    ("stdin", "said"),
    [
        (b"nope", "the event on stdin is not JSON (Expecting value at char 0)"),
        (b'"text"', "the event on stdin is a JSON string, not an object"),
        (b"{}", "the event has no session"),
        (b"[" * 100_000, "the event on stdin is not JSON"),
        (b"{" + b" " * MAX_EVENT_BYTES + b"}", f"the event on stdin is over {MAX_EVENT_BYTES} bytes"),
    ],
)
def test_an_unusable_event_is_one_line_then_open_or_closed(tmp_path: Path, stdin: bytes, said: str) -> None:
    code, out, err = send(tmp_path, stdin)
    assert (code, out) == (7, None) and err.startswith(f"repeat-hooks hook echo: {said}") and err.count("\n") == 1
    assert err.endswith("; failing open\n")
    user_settings(tmp_path, '{"fail": "closed"}')
    code, out, err = send(tmp_path, stdin)
    told = f"repeat-hooks hook echo cannot guard this session ({said}"  # the user reads what is wrong
    assert code == 0 and out is not None and out["deny"] == STORE_DOWN_REFUSAL  # no event read: it may be a call
    assert out["stop"] == "store_unavailable" and out["said"].startswith(told)
    assert out["said"].endswith('and fails closed: fix it, or set "fail": "open"')
    assert err.endswith("; failing closed\n")


def test_a_store_it_cannot_reach_denies_only_what_it_must_when_closed(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    state = str(tmp_path / "file" / "state.sqlite3")
    code, out, err = send(tmp_path, {"e": "ask", "s": "s1", "id": "c1", "x": "echo SECRET"}, REPEAT_HOOKS_STATE=state)
    assert (code, out) == (7, None) and f"the state at {state} cannot be reached" in err and "SECRET" not in err
    user_settings(tmp_path, '{"fail": "closed"}')
    asked = send(tmp_path, {"e": "ask", "s": "s1", "id": "c1"}, REPEAT_HOOKS_STATE=state)
    assert asked[:2] == (0, {"deny": STORE_DOWN_REFUSAL, "reason": "store_unavailable", "stop": None})
    assert send(tmp_path, {"e": "ran", "s": "s1", "id": "c1"}, REPEAT_HOOKS_STATE=state)[:2] == (0, None)
    assert send(tmp_path, {"e": "turn", "s": "s1"}, REPEAT_HOOKS_STATE=state)[:2] == (0, None)
    done = send(tmp_path, {"e": "done", "s": "s1"}, REPEAT_HOOKS_STATE=state)
    assert done[:2] == (0, {"end": STORE_DOWN_STOP, "reason": "store_unavailable"})


def test_the_settings_files_merge_and_name_a_misspelling(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    user_settings(tmp_path, '{"max_calls": 4, "exempt": ["shell"], "fail": "closed"}')
    (project / ".repeat-hooks.json").write_text('{"exempt": []}')
    chosen = settings(str(project), {"HOME": str(tmp_path)}, owner="echo")
    assert (chosen.policy.max_calls, chosen.policy.exempt, chosen.fail) == (4, frozenset(), "closed")
    assert chosen.state == tmp_path / ".local" / "state" / "repeat-hooks" / "hooks.sqlite3"
    xdg = settings(None, {"HOME": str(tmp_path), "XDG_STATE_HOME": "/srv/state"}, owner="echo")
    assert xdg.state == Path("/srv/state/repeat-hooks/hooks.sqlite3")
    assert settings(None, {"HOME": "/h", "REPEAT_HOOKS_STATE": "/x/s.db"}, owner="echo").state == Path("/x/s.db")
    (project / ".repeat-hooks.json").write_text('{"max_cals": 2}')
    with pytest.raises(SettingsError, match=r"unknown setting 'max_cals' \(did you mean max_calls\?\)") as raised:
        settings(str(project), {"HOME": str(tmp_path)}, owner="echo")
    assert raised.value.fail == "closed"  # the outage policy they give still holds
    (project / ".repeat-hooks.json").write_text('{"fial": "open"}')
    with pytest.raises(SettingsError, match=r"did you mean fail\?"):
        settings(str(project), {"HOME": str(tmp_path)}, owner="echo")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"fail": "maybe"}', "fail is 'open' or 'closed', not 'maybe'"),
        ('{"state": 3}', "state is the path of the state's SQLite file, not 3"),
        ("[]", "holds a JSON array, not an object of settings"),
        ("{", "not JSON"),
        ('{"max_calls": -1}', "max_calls"),
    ],
)
def test_settings_that_cannot_work_are_refused(tmp_path: Path, text: str, said: str) -> None:
    path = user_settings(tmp_path, text)
    with pytest.raises(SettingsError) as raised:
        settings(None, {"HOME": str(tmp_path)}, owner="echo")
    assert str(raised.value).startswith(str(path)) and said in str(raised.value)
    code, out, err = send(tmp_path, {"e": "turn", "s": "s1"})
    assert (code, out) == (7, None) and said in err and err.count("\n") == 1


def test_settings_a_clis_events_cannot_feed_are_left_out_of_its_guard_and_said(tmp_path: Path) -> None:
    # One settings file serves every CLI: warn works where a result takes a note, and a budget on model seconds,
    # cost or repeated answers works for none; what cannot work is left out (the guard goes on), each with why.
    user_settings(tmp_path, '{"warn": true, "max_model_seconds": 30, "max_calls": 1}')
    chosen = settings(None, {"HOME": str(tmp_path)}, owner="echo", feeds=(Feed.OUTCOMES, Feed.MODEL_CALLS))
    assert chosen.policy.warn is False and chosen.policy.max_model_seconds is None and chosen.policy.max_calls == 1
    assert chosen.unused == (
        "max_model_seconds (a hook command sees no model call's time)",
        "warn (it hands the model no note after a result)",
    )
    all_feeds = (Feed.OUTCOMES, Feed.MODEL_CALLS, Feed.WARNINGS)
    noted = settings(None, {"HOME": str(tmp_path)}, owner="echo", feeds=all_feeds)
    assert noted.policy.warn is True
    assert noted.unused == ("max_model_seconds (a hook command sees no model call's time)",)
    assert one_call(tmp_path, 1) is None and one_call(tmp_path, 2) is not None  # the guard is on: max_calls=1


@pytest.mark.parametrize("name", ["state", "record", "record_key_file"])
def test_a_project_cannot_move_the_users_files(tmp_path: Path, name: str) -> None:
    (tmp_path / ".repeat-hooks.json").write_text(json.dumps({name: "/etc/passwd"}))
    with pytest.raises(SettingsError, match=f"'{name}' is a user setting"):
        settings(str(tmp_path), {"HOME": str(tmp_path)}, owner="echo")


def test_the_recording_settings_are_checked_with_what_is_wrong(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    user_settings(tmp_path, '{"record": "recordings"}')
    chosen = settings(None, env, owner="echo")
    assert (chosen.record, chosen.record_key) == (tmp_path / ".config" / "repeat-hooks" / "recordings", b"")
    (tmp_path / "short.key").write_bytes(b"too short")
    (good := tmp_path / "good.key").write_bytes(b"k" * 32)
    missing = tmp_path / "none.key"
    for given, said in (
        ({"record": 5}, "record is the path of the folder to record in, not 5"),
        ({"record": ""}, "record is the path of the folder to record in, not ''"),
        ({"record_key_file": str(good)}, "record_key_file keys a recording: set record (a folder) too"),
        ({"record": "r", "record_key_file": str(tmp_path / "short.key")}, "holds 9 bytes; a digest key needs 16 or"),
        ({"record": "r", "record_key_file": str(missing)}, f"record_key_file {missing}: No such file"),
        ({"record": "r", "recod_key_file": "k"}, "recod_key_file"),
    ):
        user_settings(tmp_path, json.dumps(given))
        with pytest.raises(SettingsError) as raised:
            settings(None, env, owner="echo")
        assert said in str(raised.value), (given, str(raised.value))
    user_settings(tmp_path, json.dumps({"record": "r", "record_key_file": str(good)}))
    assert settings(None, env, owner="echo").record_key == b"k" * 32


ENTRIES = (Entry("Before", None, {"timeout": 5}), Entry("Tool", "*"))
OURS = "/v/bin/repeat-hooks hook echo"
"""The command install writes: this environment's console script by its absolute path."""


def test_install_merges_after_the_users_hooks_and_uninstall_removes_exactly_ours() -> None:
    users = {"hooks": {"Tool": [{"matcher": "x", "hooks": [{"type": "command", "command": "mine"}]}]}, "a": 1}
    merged = installed(users, ENTRIES, "/v/bin/repeat-hooks hook echo", "echo")
    assert merged["hooks"]["Tool"][0] == users["hooks"]["Tool"][0] and merged["a"] == 1
    assert merged["hooks"]["Before"] == [  # the list install made noted in our first hook, for uninstall
        {"hooks": [{"type": "command", "command": "/v/bin/repeat-hooks hook echo", "timeout": 5}]}
    ]
    assert merged["hooks"]["Tool"][1]["hooks"][0]["repeatHooksSet"] == [["hooks.Before"]]
    merged["hooks"]["Tool"][1]["hooks"][0].pop("repeatHooksSet")
    assert merged["hooks"]["Tool"][1] == {
        "matcher": "*",
        "hooks": [{"type": "command", "command": "/v/bin/repeat-hooks hook echo"}],
    }
    merged = installed(users, ENTRIES, "/v/bin/repeat-hooks hook echo", "echo")
    assert installed(merged, ENTRIES, "/v/bin/repeat-hooks hook echo", "echo") == merged
    moved = installed(merged, ENTRIES, "/w/bin/repeat-hooks hook echo", "echo")  # a new path, updated in place
    assert moved["hooks"]["Tool"][1]["hooks"][0]["command"] == "/w/bin/repeat-hooks hook echo"
    assert removed(moved, "echo") == users and removed(users, "echo") == users
    assert removed(merged, "other") == merged
    with pytest.raises(GuardSetupError, match="'hooks' is a JSON array"):
        installed({"hooks": []}, ENTRIES, "c", "echo")


def test_edit_keeps_the_files_form(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    before = '{\n\t"a": [\n\t\t1\n\t]\n}'
    path.write_text(before)
    out = io.StringIO()
    assert edit(path, lambda d: installed(d, ENTRIES, OURS, "echo"), out=out)
    assert path.read_text().startswith('{\n\t"a": [') and not path.read_text().endswith("\n")
    assert not edit(path, lambda d: installed(d, ENTRIES, OURS, "echo"), out=out)
    assert edit(path, lambda d: removed(d, "echo"), dry_run=True, out=out) and '"hooks"' in path.read_text()
    assert edit(path, lambda d: removed(d, "echo"), out=out) and path.read_text() == before
    assert out.getvalue().count("updated") == 2 and "nothing to change" in out.getvalue()
    assert is_ours(OURS, "echo") and not is_ours(["repeat-hooks"], "echo")


def test_a_bug_is_one_line_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Echo, event: Mapping[str, Any], policy: Policy) -> Event:
        raise KeyError("SECRET-VALUE")

    monkeypatch.setattr(Echo, "read", broken)
    code, out, err = send(tmp_path, {"e": "ask", "s": "s1"})
    assert (code, out) == (
        7,
        None,
    ) and err == "repeat-hooks hook echo: unexpected KeyError (a bug: please report it); failing open\n"


def test_only_the_command_install_writes_is_ours() -> None:
    assert is_ours("/v/bin/repeat-hooks hook echo", "echo") and is_ours(
        "'/a b/python3.12' -m repeat_hooks hook echo", "echo"
    )
    for users in (
        "repeat-hooks hook echo",  # on the user's PATH, as a team's shared settings spell it
        "python3 -m repeat_hooks hook echo",
        "echo repeat-hooks hook echo finished >> ~/log",  # a log line naming it
        "REPEAT_HOOKS_STATE=/srv/x nice repeat-hooks hook echo",  # a wrapper of the user's own
        "repeat-hooks hook echo --verbose",
        "repeat-hooks hook other",
        "sh -m repeat_hooks hook echo",
        "repeat-hooks hook 'echo",  # not shell words
        None,
    ):
        assert not is_ours(users, "echo"), users


def test_an_entry_of_the_users_that_runs_the_hook_is_theirs_install_adds_none_beside_it() -> None:
    own = {"type": "command", "command": "REPEAT_HOOKS_STATE=/srv/x nice repeat-hooks hook echo", "timeout": 5}
    logs = {"type": "command", "command": "echo repeat-hooks hook echo finished >> ~/log"}
    users = {"hooks": {"Tool": [{"matcher": "*", "hooks": [own]}], "Stop": [{"hooks": [logs]}]}}
    merged = installed(users, ENTRIES, OURS, "echo")
    assert merged["hooks"]["Tool"] == [{"matcher": "*", "hooks": [own]}]  # untouched, and none of ours beside it
    assert merged["hooks"]["Before"][0]["hooks"][0]["command"] == OURS  # where none of theirs runs it, ours
    assert removed(merged, "echo") == users
    team = {
        "hooks": {
            entry.event: [{"hooks": [{"type": "command", "command": "repeat-hooks hook echo"}]}] for entry in ENTRIES
        }
    }
    assert installed(team, ENTRIES, OURS, "echo") == team and removed(team, "echo") == team  # a team's shared entries


@pytest.mark.parametrize(
    "before",
    [
        '{\n  "hooks": {\n    "Tool": []\n  }\n}\n',  # an empty list of the user's stays
        '{\n  "model": "x",\n  "hooks": {}\n}\n',  # and an empty object
        '{"model":"x","hooks":{"Tool":[]}}',  # one line, compact
        '{"model": "x", "hooks": {"Tool": []}}\n',  # one line, spaced
        '{\n  "name": "K\\u00fcbra"\n}\n',  # non-ASCII written as escapes
        '{\n  "name": "Kübra"\n}\n',  # and as it is
    ],
)
def test_install_then_uninstall_gives_back_the_same_bytes(tmp_path: Path, before: str) -> None:
    path = tmp_path / "settings.json"
    path.write_text(before, encoding="utf-8")
    out = io.StringIO()
    assert edit(path, lambda d: installed(d, ENTRIES, OURS, "echo"), out=out)
    assert is_ours(json.loads(path.read_text())["hooks"]["Tool"][-1]["hooks"][0]["command"], "echo")
    assert edit(path, lambda d: removed(d, "echo"), out=out)
    assert path.read_text(encoding="utf-8") == before


def test_install_writes_through_a_link_and_refuses_a_read_only_or_undecodable_file(tmp_path: Path) -> None:
    target = tmp_path / "dotfiles" / "settings.json"
    target.parent.mkdir()
    target.write_text("{}\n")
    link = tmp_path / "settings.json"
    link.symlink_to(target)
    assert edit(link, lambda d: installed(d, ENTRIES, OURS, "echo"), out=io.StringIO())
    assert link.is_symlink() and "repeat-hooks hook echo" in target.read_text()
    target.chmod(0o444)
    try:
        with pytest.raises(GuardSetupError, match="is read-only"):
            edit(link, lambda d: removed(d, "echo"), out=io.StringIO())
    finally:
        target.chmod(0o644)
    target.write_bytes(b"\xff\xfe{}")
    with pytest.raises(GuardSetupError, match="not UTF-8 text"):
        edit(link, lambda d: removed(d, "echo"), out=io.StringIO())
    private = tmp_path / "private.json"
    private.write_text("{}\n")
    private.chmod(0o600)
    assert edit(private, lambda d: installed(d, ENTRIES, OURS, "echo"), out=io.StringIO())
    assert private.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dotfiles", "private.json", "settings.json"]  # no temp left


def test_a_model_call_event_before_every_call_counts_as_a_response_end_after_each(tmp_path: Path) -> None:
    """Gemini CLI's ``BeforeModel`` and Codex's ``PreModelRequest`` come before every model call, the turn's first
    too (``Responded(before=True)``): the same turn stops at the same model call as with an event after each
    response (Claude Code's ``PostToolBatch``), for a budget on model calls and for ignored refusals."""

    def turn(home: Path, before: bool) -> tuple[int, int, str]:
        """The turn's calls that ran and were refused before its stop, and the stop's reason."""
        send(home, {"e": "turn", "s": "s1"})
        ran = refused = 0
        for number in range(20):
            if before and (said := send(home, {"e": "model", "s": "s1"})[1]) is not None:
                return ran, refused, said["reason"]
            _, asked, _ = send(home, {"e": "ask", "s": "s1", "id": f"c{number}", "x": "make"})
            if asked is not None and asked["stop"]:
                return ran, refused, asked["stop"]
            if asked is None:
                ran += 1
                send(home, {"e": "ran", "s": "s1", "id": f"c{number}"})
            else:
                refused += 1
            if not before and (said := send(home, {"e": "done", "s": "s1"})[1]) is not None:
                return ran, refused, said["reason"]
        raise AssertionError("the turn never stopped")

    for settings_text, stops in (('{"max_model_calls": 2}', (2, 0, "max_steps")), ("{}", (2, 2, "ignored_refusals"))):
        for before in (False, True):
            home = tmp_path / f"{stops[2]}-{before}"
            user_settings(home, settings_text)
            assert turn(home, before) == stops, (settings_text, before)


@pytest.mark.parametrize("there", [None, True, False])
def test_install_sets_what_the_cli_needs_and_uninstall_puts_back_what_was_there(there: bool | None) -> None:
    document: dict[str, Any] = {"model": "m"} if there is None else {"model": "m", "hooksConfig": {"enabled": there}}
    entries = [Entry("BeforeTool", "*")]
    done = installed(
        document, entries, "/v/bin/repeat-hooks hook gemini-cli", "gemini-cli", {"hooksConfig.enabled": True}
    )
    assert done["hooksConfig"] == {"enabled": True}
    assert (
        installed(done, entries, "/v/bin/repeat-hooks hook gemini-cli", "gemini-cli", {"hooksConfig.enabled": True})
        == done
    )
    assert removed(done, "gemini-cli") == document
