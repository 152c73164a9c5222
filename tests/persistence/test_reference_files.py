"""Files as the reference writes them: read, forked and rewritten with nothing lost.

The reference's writer spells some things its own way: ``sourceEventSeqs`` with
ranges ``[first, last]`` for runs of 3 or more consecutive seqs, ``"ignorable":
true`` on events an older reader may skip, ``llm/retry`` with ``mode`` and
``policyKey``, and its own key order inside messages, ``assistant/message`` data
and ``tool-call-chunks`` records. It refuses obsolete ``tool/code-dispatch(-start)``
rows unless they are marked ignorable, and drops a last ``user/message`` without
its ``surfaceOp`` as a torn write.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.cli._config import resolve_model
from dsh_trio.errors import SessionCorruptError
from dsh_trio.persistence._jsonl import JsonlPersistence
from dsh_trio.persistence._persistence import load_session
from dsh_trio.values import (
    SessionEvent,
    SessionHeader,
    ToolCallChunksRecord,
    event_from_json,
    event_to_json,
    to_json,
)

HEADER = (
    '{"type":"session","version":3,"id":"ref","createdAt":1800144000000,'
    '"cwd":"/w/p","isSeeded":false,"delegationDepth":0}'
)

#: One plain turn as the reference's writer spells it, key order included.
T1 = [
    '{"type":"agent/inbox/spliced","seq":0,"time":1800144000010,"data":{"target":"next-turn","start":0,"inserted":[{"content":[{"type":"text","text":"hello"}],"source":{"kind":"user"},"role":"user","id":"a44b0d6e-5f0b-4b7e-9a53-0c2f0c1d2e3f"}]}}',
    '{"type":"turn/start","seq":1,"time":1800144000011,"data":{"turn":1}}',
    '{"type":"agent/inbox/spliced","seq":2,"time":1800144000012,"data":{"target":"next-turn","start":0,"removedCount":1,"inserted":[]}}',
    '{"type":"step/start","seq":3,"time":1800144000020,"data":{"turn":1,"step":1}}',
    '{"type":"system/message","seq":4,"time":1800144000030,"data":{"turn":1,"step":1,"message":{"role":"system","content":[{"type":"text","text":"You are an AI agent."}],"source":{"kind":"plugin","plugin":"@deepseek-ai/dsh-system-prompt"},"id":"5d1c2b3a-0000-4000-8000-000000000001"}},"surfaceOp":"append"}',
    '{"type":"user/message","seq":5,"time":1800144000031,"data":{"content":[{"type":"text","text":"hello"}],"source":{"kind":"user"},"role":"user","id":"a44b0d6e-5f0b-4b7e-9a53-0c2f0c1d2e3f"},"surfaceOp":"append"}',
    '{"type":"request/header","seq":6,"time":1800144000040,"data":{"header":{"config":{"provider":"mock","model":"mock"}},"reason":"initial"}}',
    '{"type":"request/context","seq":7,"time":1800144000041,"data":{"provider":"mock","model":"mock"}}',
    '{"type":"assistant/message","seq":8,"time":1800144000110,"data":{"turn":1,"step":1,"message":{"role":"assistant","content":[{"type":"text","text":"hi"},{"type":"tool-call","id":"c1","name":"read","arguments":"{}"}],"source":{"kind":"model","provider":"mock","model":"mock"},"id":"9e8f7a6b-1111-4222-8333-444455556666"},"usage":{"inputTokens":5,"outputTokens":2},"stream":[{"type":"chunk","time":1800144000060,"chunk":{"type":"block-start","index":0,"blockType":"text"}},{"type":"text-chunks","time0":1800144000070,"index":0,"dt":[10],"texts":["h","i"]},{"type":"tool-call-chunks","time0":1800144000080,"index":1,"dt":[1],"id":"c1","name":"read","args":["{","}"]},{"type":"chunk","time":1800144000105,"chunk":{"type":"finish","reason":{"kind":"stop"}}}]},"surfaceOp":"append"}',
    '{"type":"step/end","seq":9,"time":1800144000120,"data":{"turn":1,"step":1}}',
    '{"type":"turn/end","seq":10,"time":1800144000130,"data":{"turn":1,"reason":{"kind":"completed"}}}',
]

#: What the reference writes beyond the plain turn: an ``llm/retry`` with ``mode``
#: and ``policyKey``, an unknown event marked ignorable, ranges of source seqs.
EXTRAS = [
    '{"type":"llm/retry","seq":11,"time":1800144000140,"data":{"retryId":"r1","turn":1,"step":1,"provider":"mock","mode":"normal","policyKey":"mock","retry":1,"maxRetries":5,"delayMs":500,"failure":{"message":"busy","code":"RATE_LIMIT"}}}',
    '{"type":"future/thing","seq":12,"time":1800144000150,"data":{"x":1},"ignorable":true}',
    '{"type":"turn/start","seq":13,"time":1800144000160,"data":{"turn":2}}',
    '{"type":"user/message","seq":14,"time":1800144000170,"data":{"content":[{"type":"text","text":"summary"}],"source":{"kind":"user"},"role":"user","id":"b44b0d6e-5f0b-4b7e-9a53-0c2f0c1d2e3f"},"sourceEventSeqs":[1,[3,5],[7,10],12],"surfaceOp":{"op":"replace","startSeq":4,"endSeq":8}}',
    '{"type":"turn/end","seq":15,"time":1800144000180,"data":{"turn":2,"reason":{"kind":"completed"}}}',
]


def store(root: Path, lines: list[str], sid: str = "ref") -> Path:
    folder = root / "--w-p--" / sid
    folder.mkdir(parents=True)
    path = folder / "session.v3.jsonl"
    header = HEADER.replace('"id":"ref"', f'"id":"{sid}"')
    path.write_text("\n".join([header, *lines]) + "\n", encoding="utf-8")
    return path


async def rewrite(
    root: Path, header: SessionHeader, events: list[SessionEvent]
) -> list[str]:
    persistence = JsonlPersistence(root)
    writer = await persistence.create(header)
    await writer.append(events, sync=True)
    await writer.close()
    data = await trio.Path(persistence.path_for(header)).read_text(encoding="utf-8")
    return data.splitlines()


async def test_a_written_log_matches_the_reference_line_for_line(
    tmp_path: Path,
) -> None:
    path = store(tmp_path / "ref", T1)
    reference = path.read_bytes()
    session, writer = await load_session(JsonlPersistence(tmp_path / "ref"), "ref")
    await writer.close()
    assert path.read_bytes() == reference  # nothing to repair
    ours = await rewrite(tmp_path / "ours", session.header, list(session.events))
    assert ours == [HEADER, *T1]  # same bytes, key order included


def test_key_order_of_messages_chunks_and_assistant_data() -> None:
    user = dsh.user_message("hi", id="u")
    assert list(to_json(user)) == ["content", "source", "role", "id"]  # type: ignore[arg-type]
    record = ToolCallChunksRecord(1, 0, (1,), "c", ("{}",), "read")
    assert list(to_json(record)) == [  # type: ignore[arg-type]
        "type",
        "time0",
        "index",
        "dt",
        "id",
        "name",
        "args",
    ]
    event = event_from_json(json.loads(T1[8]), expected_seq=8)
    data = event_to_json(event)["data"]
    assert isinstance(data, dict)
    assert list(data) == ["turn", "step", "message", "usage", "stream"]
    message = data["message"]
    assert isinstance(message, dict)
    assert list(message) == ["role", "content", "source", "id"]


def test_source_event_seqs_ranges_read_and_write_as_the_reference() -> None:
    event = event_from_json(json.loads(EXTRAS[3]), expected_seq=14)
    assert event.source_event_seqs == (1, 3, 4, 5, 7, 8, 9, 10, 12)
    assert event_to_json(event)["sourceEventSeqs"] == [1, [3, 5], [7, 10], 12]
    # Runs of two stay plain seqs.
    two = SessionEvent(
        seq=9,
        time=1,
        type="user/message",
        data=event.data,
        surface_op="append",
        source_event_seqs=(1, 2, 5, 6, 7, 8),
    )
    assert event_to_json(two)["sourceEventSeqs"] == [1, 2, [5, 8]]
    # Seqs that do not strictly increase are written as they are, as the reference.
    unordered = SessionEvent(
        seq=9,
        time=1,
        type="user/message",
        data=event.data,
        surface_op="append",
        source_event_seqs=(7, 1, 2, 3),
    )
    assert event_to_json(unordered)["sourceEventSeqs"] == [7, 1, 2, 3]


@pytest.mark.parametrize(
    "bad", [[[5, 3]], [[3, 3]], [[1, 2, 3]], [[1]], [[-1, 2]], ["1"], 3, [[1.0, 3]]]
)
def test_malformed_source_ranges_are_refused(bad: object) -> None:
    obj = json.loads(EXTRAS[3])
    obj["sourceEventSeqs"] = bad
    with pytest.raises(SessionCorruptError, match="sourceEventSeqs"):
        event_from_json(obj, expected_seq=14)


async def test_reference_extras_load_fork_and_rewrite_intact(tmp_path: Path) -> None:
    path = store(tmp_path / "ref", [*T1, *EXTRAS])
    reference = path.read_bytes()
    session, writer = await load_session(JsonlPersistence(tmp_path / "ref"), "ref")
    await writer.close()
    assert path.read_bytes() == reference
    events = list(session.events)
    assert events[12].ignorable and not events[11].ignorable
    assert [m.id for m in session.derive_messages()] == [
        "b44b0d6e-5f0b-4b7e-9a53-0c2f0c1d2e3f",
        # the replaced system/user/assistant nodes are gone
    ]
    # The same session written again: every line as read.
    ours = await rewrite(tmp_path / "same", session.header, events)
    assert ours == [HEADER, *T1, *EXTRAS]
    # A fork carries them into the child's log, which reads back the same.
    child = session.fork(child_id="child")
    lines = await rewrite(tmp_path / "fork", child.header, list(child.events))
    assert lines[1 : 1 + len(T1) + len(EXTRAS)] == [*T1, *EXTRAS]
    assert json.loads(lines[-1])["type"] == "session/end-seed"
    again, writer = await load_session(JsonlPersistence(tmp_path / "fork"), "child")
    await writer.close()
    assert list(again.events) == list(child.events)


@pytest.mark.parametrize("type_", ["tool/code-dispatch", "tool/code-dispatch-start"])
async def test_obsolete_code_dispatch_rows_are_refused_unless_ignorable(
    tmp_path: Path, type_: str
) -> None:
    row = f'{{"type":"{type_}","seq":11,"time":1800144000140,"data":{{"id":"x"}}}}'
    path = store(
        tmp_path / "bad",
        [
            *T1,
            row,
            T1[1].replace('"seq":1,', '"seq":12,').replace('"turn":1', '"turn":2'),
        ],
    )
    before = path.read_bytes()
    with pytest.raises(SessionCorruptError, match=f'obsolete event type "{type_}"'):
        await load_session(JsonlPersistence(tmp_path / "bad"), "ref")
    assert path.read_bytes() == before  # refused, not cut
    ignorable = row[:-1] + ',"ignorable":true}'
    store(tmp_path / "ok", [*T1, ignorable])
    session, writer = await load_session(JsonlPersistence(tmp_path / "ok"), "ref")
    await writer.close()
    assert session.events[11].type == type_ and session.events[11].ignorable


async def test_a_last_user_message_without_surface_op_is_a_torn_tail(
    tmp_path: Path,
) -> None:
    torn = (
        '{"type":"user/message","seq":11,"time":1800144000170,"data":{"content":'
        '[{"type":"text","text":"late"}],"source":{"kind":"user"},"role":"user",'
        '"id":"c44b0d6e-5f0b-4b7e-9a53-0c2f0c1d2e3f"}}'
    )
    path = store(tmp_path / "ref", [*T1, torn])
    session, writer = await load_session(JsonlPersistence(tmp_path / "ref"), "ref")
    await writer.close()
    assert [e.seq for e in session.events][-1] >= 10
    assert all(e.seq != 11 or e.type != "user/message" for e in session.events)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert torn not in lines  # cut from the log ...
    side = [p for p in path.parent.iterdir() if p != path and p.is_file()]
    assert any(torn in p.read_text(encoding="utf-8") for p in side)  # ... kept aside
    # Not the last line: refused, the file left as it is.
    path = store(tmp_path / "mid", [*T1, torn, T1[1].replace('"seq":1,', '"seq":12,')])
    before = path.read_bytes()
    with pytest.raises(SessionCorruptError):
        await load_session(JsonlPersistence(tmp_path / "mid"), "ref")
    assert path.read_bytes() == before


async def test_resuming_twice_appends_one_end_seed(tmp_path: Path) -> None:
    store(tmp_path, T1)
    options = dsh.AgentOptions(provider="scripted", model="m")
    persistence = dsh.JsonlPersistence(tmp_path)
    async with dsh.open_runtime(persistence=persistence) as rt:
        for _ in range(2):
            handle = await rt.agents.resume("ref", options=options)
            await handle.agent.flush()
            await handle.dispose()
    writer, events = await dsh.JsonlPersistence(tmp_path).open("ref")
    await writer.close()
    types = [e.type for e in events]
    assert types[len(T1) :] == ["session/end-seed"]


def test_cli_openai_sends_max_completion_tokens() -> None:
    env = {"OPENAI_API_KEY": "sk-test-key-123456"}
    openai = resolve_model(
        provider="openai", model="gpt-5", base_url=None, api_key_env=None, environ=env
    )
    assert openai.adapter._endpoint.max_tokens_field == "max_completion_tokens"  # type: ignore[attr-defined]
    other = resolve_model(
        provider=None,
        model="m",
        base_url="http://localhost:1/v1",
        api_key_env=None,
        environ={},
    )
    assert other.adapter._endpoint.max_tokens_field == "max_tokens"  # type: ignore[attr-defined]
