"""Read-only log reading and the transcript / listing renderers."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.cli._transcript import (
    SessionSummary,
    find_log,
    list_sessions,
    read_log,
    render_listing,
    render_transcript,
)
from dsh_trio.errors import SessionCorruptError, SessionFormatError
from dsh_trio.testing import ScriptedModel, fail, gate, hang, reply, tool_calls

OPTIONS = dsh.AgentOptions(provider="scripted", model="m")


async def _record(
    tmp_path: Path, model: ScriptedModel, *texts: str, cancel_last: bool = False
) -> str:
    """Run one turn per text and return the path of the written log."""
    persistence = dsh.JsonlPersistence(tmp_path)
    async with dsh.open_runtime(
        models={"scripted": model}, persistence=persistence, system_prompt="Be brief."
    ) as rt:
        async with rt.agents.open(options=OPTIONS) as agent:
            for n, text in enumerate(texts):
                agent.followup(dsh.user_message(text))
                if cancel_last and n == len(texts) - 1:
                    await trio.testing.wait_all_tasks_blocked()
                    agent.cancel(dsh.UserCancel())
                await agent.when_idle()
            sid = agent.id
    path = await find_log(persistence, sid)
    assert path is not None
    return path


async def test_transcript_of_tool_calls_errors_and_cancellation(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel(
        tool_calls(("c1", "lookup", '{"q": "trio"}'), text="Let me look."),
        reply("Found it."),
        fail("SERVER", "overloaded"),
        fail("AUTH", "bad key"),
        hang("half a rep"),
    )
    path = await _record(tmp_path, model, "find trio", "next", "more", cancel_last=True)
    text = render_transcript(read_log(path))
    lines = text.splitlines()
    assert lines[0].startswith("session ")
    assert "system: Be brief." in lines
    assert "user: find trio" in lines
    assert "[model scripted/m]" in lines
    assert "assistant: Let me look." in lines
    assert '    -> tool call lookup({"q": "trio"}) [c1]' in lines
    assert any(line.startswith("<- tool result error [c1]:") for line in lines), text
    assert "assistant: Found it." in lines
    assert "=== turn 1 ended: completed ===" in lines
    assert "[model attempt failed: overloaded [SERVER]]" in lines
    assert "[retry 1/5 after SERVER: overloaded]" in lines
    assert "[model attempt failed: bad key [AUTH]]" in lines
    assert "=== turn 2 ended: error: bad key [AUTH] ===" in lines
    assert "assistant: half a rep" in lines
    assert "[reply interrupted]" in lines
    assert "=== turn 3 ended: aborted (user cancel) ===" in lines
    assert (
        text.index("=== turn 2 ===")
        < text.index("user: next")
        < text.index("=== turn 3 ===")
    )


async def test_steering_shows_the_second_step(tmp_path: Path) -> None:
    g = gate(reply("one"))
    persistence = dsh.JsonlPersistence(tmp_path)
    async with dsh.open_runtime(
        models={"scripted": ScriptedModel(g, reply("two"))}, persistence=persistence
    ) as rt:
        async with rt.agents.open(options=OPTIONS) as agent:
            agent.followup(dsh.user_message("start"))
            await g.wait_reached()
            agent.steer(dsh.user_message("also this"))
            g.release()
            await agent.when_idle()
            sid = agent.id
    path = await find_log(persistence, sid)
    assert path is not None
    lines = render_transcript(read_log(path)).splitlines()
    start = lines.index("=== turn 1 ===")
    assert lines[start:] == [
        "=== turn 1 ===",
        "user: start",
        "[model scripted/m]",
        "assistant: one",
        "--- step 2 ---",
        "user: also this",
        "assistant: two",
        "=== turn 1 ended: completed ===",
    ]


def _write_log(path: Path, *lines: str) -> Path:
    header = '{"type":"session","version":3,"id":"s1","createdAt":1800144000000,"isSeeded":false,"delegationDepth":0}'
    path.write_text("\n".join([header, *lines]) + "\n", encoding="utf-8")
    return path


def test_read_log_stops_at_a_damaged_line(tmp_path: Path) -> None:
    log = _write_log(
        tmp_path / "log.jsonl",
        '{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}',
        '{"type":"turn/start","seq":5,"time":1,"data":{"turn":2}}',
        '{"type":"turn/end","seq":2,"time":1,"data":{"turn":1,"reason":{"kind":"completed"}}}',
        '{"type":"my/own-event","seq":2,"time":1,"data":{"x":1}}',
    )
    before = log.read_bytes()
    stored = read_log(str(log))
    assert [ev.seq for ev in stored.events] == [0]
    assert stored.damage is not None
    assert stored.damage.startswith("line 3 cannot be read")
    assert log.read_bytes() == before
    text = render_transcript(stored)
    assert "[turn 1 has not ended" in text
    assert "[the log is damaged: line 3 cannot be read" in text


def test_unknown_event_types_are_named(tmp_path: Path) -> None:
    log = _write_log(
        tmp_path / "log.jsonl",
        '{"type":"my/own-event","seq":0,"time":1,"data":{"x":1}}',
    )
    stored = read_log(str(log))
    assert stored.damage is None
    assert render_transcript(stored).splitlines()[-1] == "[my/own-event]"


def test_read_log_refuses_a_bad_header(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n", encoding="utf-8")
    with pytest.raises(SessionCorruptError, match="not JSON"):
        read_log(str(bad))
    bad.write_text(
        '{"type":"session","version":4,"id":"x","createdAt":1}\n', encoding="utf-8"
    )
    with pytest.raises(SessionFormatError, match="version 4"):
        read_log(str(bad))
    bad.write_text('{"type":"session"', encoding="utf-8")
    with pytest.raises(SessionCorruptError, match="no complete header line"):
        read_log(str(bad))


def test_empty_log_renders() -> None:
    header = dsh.SessionHeader(id=dsh.SessionId("s"), created_at=0)
    from dsh_trio.cli._transcript import StoredLog

    text = render_transcript(StoredLog(path="/p", header=header, events=()))
    assert text.endswith("(no events)")


def test_listing_layout() -> None:
    rows = render_listing(
        [
            SessionSummary(
                id="abc", created_at=0, turns=12, last_prompt="x " * 100, path="/p"
            ),
            SessionSummary(
                id="broken-one",
                created_at=0,
                turns=0,
                last_prompt=None,
                path="/q",
                problem="boom",
            ),
            SessionSummary(
                id="quiet", created_at=0, turns=0, last_prompt=None, path="/r"
            ),
        ]
    ).splitlines()
    assert rows[0].startswith("ID          CREATED")
    assert rows[1].split()[3] == "12"
    assert rows[1].endswith("...")
    assert len(rows[1].split("  ")[-1]) <= 60
    assert rows[2].endswith("(unreadable: boom)")
    assert rows[3].endswith("-")


async def test_list_sessions_of_an_empty_root(tmp_path: Path) -> None:
    assert await list_sessions(dsh.JsonlPersistence(tmp_path / "missing")) == []
