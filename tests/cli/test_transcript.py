"""Read-only log reading and the transcript / listing renderers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.cli._listing import (
    SessionSummary,
    list_sessions,
    render_listing,
    summarize,
    summarize_tail,
)
from dsh_trio.cli._transcript import find_log, read_log, render_transcript
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


def _turn(n: int, seq: int, prompt: str, filler: int = 0) -> list[str]:
    """The lines of one turn: a prompt from the user, a plugin prompt, padding."""
    user: dict[str, Any] = {
        "type": "user/message",
        "seq": seq + 2,
        "time": 1,
        "data": {
            "id": f"u{n}",
            "role": "user",
            "content": [{"type": "text", "text": prompt}],
            "source": {"kind": "user"},
        },
        "surfaceOp": "append",
    }
    other = dict(user, seq=seq + 3)
    other["data"] = dict(
        user["data"], id=f"p{n}", source={"kind": "plugin", "plugin": "x"}
    )
    return [
        json.dumps({"type": "turn/start", "seq": seq, "time": 1, "data": {"turn": n}}),
        json.dumps(
            {
                "type": "step/start",
                "seq": seq + 1,
                "time": 1,
                "data": {"turn": n, "step": 1},
            }
        ),
        json.dumps(user),
        json.dumps(other),
        *(
            json.dumps(
                {"type": "my/pad", "seq": seq + 4 + k, "time": 1, "data": "x" * 1000}
            )
            for k in range(filler)
        ),
        json.dumps(
            {
                "type": "turn/end",
                "seq": seq + 4 + filler,
                "time": 1,
                "data": {"turn": n, "reason": {"kind": "completed"}},
            }
        ),
    ]


@pytest.mark.parametrize(
    ("turns", "filler"), [(0, 0), (1, 0), (3, 0), (40, 2), (2, 40), (2, 300)]
)
def test_the_listing_reads_only_the_end_and_agrees_with_a_full_read(
    tmp_path: Path, turns: int, filler: int
) -> None:
    lines: list[str] = []
    for n in range(1, turns + 1):
        lines += _turn(n, len(lines), f"prompt {n}", filler)
    log = _write_log(tmp_path / "log.jsonl", *lines)
    header = read_log(str(log)).header
    tail = summarize_tail(str(log), header)
    full = summarize(read_log(str(log)))
    if filler * 1000 > 256 * 1024:
        # The last turn is bigger than the window: the prompt and count are unknown.
        assert (tail.turns, tail.last_prompt) == (None, None)
        assert render_listing([tail]).splitlines()[1].split()[3] == "?"
    else:
        assert tail == full
    assert tail.problem is None


def test_the_listing_reports_a_torn_last_line(tmp_path: Path) -> None:
    log = _write_log(tmp_path / "log.jsonl", *_turn(1, 0, "hello"))
    with log.open("ab") as f:
        f.write(b'{"type":"turn/st')
    tail = summarize_tail(str(log), read_log(str(log)).header)
    assert (tail.turns, tail.last_prompt) == (1, "hello")
    assert tail.problem == "the last line is incomplete"


def test_the_listing_never_reads_whole_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines: list[str] = []
    for n in range(1, 400):
        lines += _turn(n, len(lines), f"prompt {n}", 1)
    log = _write_log(tmp_path / "log.jsonl", *lines)
    size = log.stat().st_size
    assert size > 400_000
    read: list[int] = []
    real_open = open

    def counting_open(*args: Any, **kwargs: Any) -> Any:
        f = real_open(*args, **kwargs)
        real_read = f.read

        def read_counted(n: int = -1) -> bytes:
            data: bytes = real_read(n)
            read.append(len(data))
            return data

        f.read = read_counted
        return f

    monkeypatch.setattr("builtins.open", counting_open)
    tail = summarize_tail(
        str(log), dsh.SessionHeader(id=dsh.SessionId("s1"), created_at=1800144000000)
    )
    monkeypatch.undo()
    assert (tail.turns, tail.last_prompt) == (399, "prompt 399")
    assert sum(read) <= 16 * 1024 + 1
