# mypy: disable-error-code="comparison-overlap, unreachable, union-attr, unused-ignore"
"""The surface rules, replace ops and the incremental derive_messages fold."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest
from hypothesis import given, settings, strategies as st

from dsh_trio import user_message
from dsh_trio.errors import InvalidEventError
from dsh_trio.session import Session
from dsh_trio.values import (
    AssistantMessage,
    AssistantMessageData,
    Message,
    MessageId,
    ModelSource,
    SessionEvent,
    StepStart,
    SurfaceReplace,
    SystemMessage,
    SystemMessageData,
    TextBlock,
    ToolErrorInfo,
    ToolResultBlock,
    ToolResultData,
    ToolSource,
    TurnStart,
    UserMessage,
)


def system(text: str, id: str = "sys") -> SystemMessageData:
    return SystemMessageData(
        turn=1,
        step=1,
        message=SystemMessage(
            id=MessageId(id), content=(TextBlock(text),) if text else ()
        ),
    )


def assistant(text: str, id: str = "a") -> AssistantMessageData:
    return AssistantMessageData(
        turn=1,
        step=1,
        message=AssistantMessage(
            id=MessageId(id),
            content=(TextBlock(text),) if text else (),
            source=ModelSource("p", "m"),
        ),
        stream=(),
    )


def tool_result(
    call_id: str, text: str, id: str = "r", **changes: Any
) -> ToolResultData:
    data = ToolResultData(
        turn=1,
        step=1,
        message=UserMessage(
            id=MessageId(id),
            content=(ToolResultBlock(call_id, (TextBlock(text),)),),
            source=ToolSource(call_id),
        ),
    )
    return attrs.evolve(data, **changes)


def snapshot(s: Session) -> tuple[Any, ...]:
    return (
        tuple(s.events),
        s.surface,
        s.derive_messages(),
        s.next_seq,
        s.replace_generation,
    )


@pytest.fixture
def session() -> Session:
    """seq 0 turn/start, 1 system, 2 user, 3 assistant, 4 tool/result c1, 5 user."""
    s = Session.create("s", clock=lambda: 7)
    s.append("turn/start", TurnStart(1))
    s.append("system/message", system("persona"), surface_op="append")
    s.append("user/message", user_message("q", id="u1"), surface_op="append")
    s.append("assistant/message", assistant("a"), surface_op="append")
    s.append(
        "tool/result",
        tool_result("c1", "out"),
        surface_op="append",
        source_event_seqs=[3],
    )
    s.append("user/message", user_message("more", id="u2"), surface_op="append")
    return s


# --------------------------------------------------------------------------- violations

VIOLATIONS: list[tuple[str, str, object, dict[str, Any], str]] = [
    ("user without op", "user/message", user_message("x"), {}, "must carry surface_op"),
    ("system without op", "system/message", system("x"), {}, "must carry surface_op"),
    (
        "assistant without op",
        "assistant/message",
        assistant("x"),
        {},
        "must carry surface_op",
    ),
    (
        "tool without op",
        "tool/result",
        tool_result("c", "x"),
        {},
        "must carry surface_op",
    ),
    (
        "op on log-only type",
        "step/start",
        StepStart(1, 1),
        {"surface_op": "append"},
        "only surface events",
    ),
    (
        "sources on log-only type",
        "plugin/x",
        {},
        {"source_event_seqs": [1]},
        "only surface events",
    ),
    (
        "assistant with sources",
        "assistant/message",
        assistant("x"),
        {"surface_op": "append", "source_event_seqs": [1]},
        "assistant/message may not carry source_event_seqs",
    ),
    (
        "empty sources",
        "user/message",
        user_message("x"),
        {"surface_op": "append", "source_event_seqs": []},
        "non-empty",
    ),
    (
        "negative source",
        "user/message",
        user_message("x"),
        {"surface_op": "append", "source_event_seqs": [-1]},
        "source_event_seqs[0] must be an earlier seq",
    ),
    (
        "future source",
        "user/message",
        user_message("x"),
        {"surface_op": "append", "source_event_seqs": [1, 6]},
        "source_event_seqs[1] must be an earlier seq (0 <= s < 6)",
    ),
    (
        "bool source",
        "user/message",
        user_message("x"),
        {"surface_op": "append", "source_event_seqs": [True]},
        "source_event_seqs[0]",
    ),
    (
        "duplicate sources",
        "user/message",
        user_message("x"),
        {"surface_op": "append", "source_event_seqs": [2, 2]},
        "duplicates",
    ),
    (
        "sources not a sequence of ints",
        "user/message",
        user_message("x"),
        {"surface_op": "append", "source_event_seqs": {1, 2}},
        "tuple or list",
    ),
    (
        "unknown op",
        "user/message",
        user_message("x"),
        {"surface_op": "prepend"},
        'surface_op must be "append" or SurfaceReplace',
    ),
    (
        "dict op",
        "user/message",
        user_message("x"),
        {"surface_op": {"op": "replace", "startSeq": 2, "endSeq": 2}},
        'surface_op must be "append" or SurfaceReplace',
    ),
    (
        "start not on surface",
        "user/message",
        user_message("x"),
        {"surface_op": SurfaceReplace(0, 2), "source_event_seqs": [0, 1, 2]},
        "start_seq 0 is not a current surface node",
    ),
    (
        "end not on surface",
        "user/message",
        user_message("x"),
        {"surface_op": SurfaceReplace(2, 9), "source_event_seqs": [2]},
        "end_seq 9 is not a current surface node",
    ),
    (
        "start after end",
        "user/message",
        user_message("x"),
        {"surface_op": SurfaceReplace(3, 2), "source_event_seqs": [2, 3]},
        "comes after end_seq",
    ),
    (
        "non-int replace seqs",
        "user/message",
        user_message("x"),
        {"surface_op": SurfaceReplace("2", 2), "source_event_seqs": [2]},  # type: ignore[arg-type]
        "is not a current surface node",
    ),
    (
        "replace without sources",
        "user/message",
        user_message("x"),
        {"surface_op": SurfaceReplace(2, 3)},
        "missing [2, 3]",
    ),
    (
        "replace sources miss a node",
        "user/message",
        user_message("x"),
        {"surface_op": SurfaceReplace(2, 4), "source_event_seqs": [2, 4]},
        "missing [3]",
    ),
    (
        "assistant replace (never allowed: no sources)",
        "assistant/message",
        assistant("x"),
        {"surface_op": SurfaceReplace(3, 3)},
        "missing [3]",
    ),
    (
        "tool result replacing two nodes",
        "tool/result",
        tool_result("c1", "short"),
        {"surface_op": SurfaceReplace(4, 5), "source_event_seqs": [4, 5]},
        "exactly one tool/result",
    ),
    (
        "tool result replacing a user message",
        "tool/result",
        tool_result("c1", "short"),
        {"surface_op": SurfaceReplace(2, 2), "source_event_seqs": [2]},
        "exactly one tool/result",
    ),
    (
        "tool result replacement changing the call",
        "tool/result",
        tool_result("c2", "short"),
        {"surface_op": SurfaceReplace(4, 4), "source_event_seqs": [4]},
        "changes message.source, tool_call_ids",
    ),
    (
        "tool result replacement changing the error",
        "tool/result",
        tool_result("c1", "short", error=ToolErrorInfo("E", "X")),
        {"surface_op": SurfaceReplace(4, 4), "source_event_seqs": [4]},
        "changes error",
    ),
    (
        "tool result replacement changing the message id",
        "tool/result",
        tool_result("c1", "short", id="r2"),
        {"surface_op": SurfaceReplace(4, 4), "source_event_seqs": [4]},
        "changes message.id",
    ),
]


@pytest.mark.parametrize(
    ("type_", "data", "kwargs", "expected"),
    [v[1:] for v in VIOLATIONS],
    ids=[v[0] for v in VIOLATIONS],
)
def test_surface_violation_is_refused_and_changes_nothing(
    session: Session, type_: str, data: object, kwargs: dict[str, Any], expected: str
) -> None:
    before = snapshot(session)
    with pytest.raises(InvalidEventError) as info:
        session.append(type_, data, **kwargs)
    assert expected in str(info.value)
    assert info.value.seq == 6
    assert "at seq 6" in str(info.value)
    assert snapshot(session) == before


def test_replaced_nodes_cannot_be_replaced_again(session: Session) -> None:
    session.append(
        "user/message",
        user_message("summary", id="sum"),
        surface_op=SurfaceReplace(2, 4),
        source_event_seqs=[2, 3, 4],
    )
    before = snapshot(session)
    with pytest.raises(
        InvalidEventError, match="start_seq 3 is not a current surface node"
    ):
        session.append(
            "user/message",
            user_message("again"),
            surface_op=SurfaceReplace(3, 3),
            source_event_seqs=[3],
        )
    assert snapshot(session) == before


# --------------------------------------------------------------------------- semantics


def texts(messages: Sequence[Message]) -> list[str]:
    out = []
    for m in messages:
        block = m.content[0]
        if isinstance(block, ToolResultBlock):
            block = block.content[0]
        assert isinstance(block, TextBlock)
        out.append(block.text)
    return out


def test_derive_projects_the_surface(session: Session) -> None:
    assert session.surface == (1, 2, 3, 4, 5)
    assert texts(session.derive_messages()) == ["persona", "q", "a", "out", "more"]


def test_replace_range_shadows_nodes_and_bumps_generation(session: Session) -> None:
    assert session.replace_generation == 0
    event = session.append(
        "user/message",
        user_message("summary", id="sum"),
        surface_op=SurfaceReplace(2, 4),
        source_event_seqs=[1, 2, 3, 4],  # citing more than the range is fine
    )
    assert event.seq == 6
    assert session.surface == (1, 6, 5)
    assert session.replace_generation == 1
    assert texts(session.derive_messages()) == ["persona", "summary", "more"]
    session.append("user/message", user_message("next", id="u3"), surface_op="append")
    assert session.surface == (1, 6, 5, 7)
    assert texts(session.derive_messages()) == ["persona", "summary", "more", "next"]


def test_tool_result_replacement_may_change_content(session: Session) -> None:
    session.append(
        "tool/result",
        tool_result("c1", "[truncated]", meta={"compacted": True}),
        surface_op=SurfaceReplace(4, 4),
        source_event_seqs=[4],
    )
    assert session.surface == (1, 2, 3, 6, 5)
    assert texts(session.derive_messages()) == [
        "persona",
        "q",
        "a",
        "[truncated]",
        "more",
    ]


def test_empty_system_message_is_skipped_but_keeps_its_node(session: Session) -> None:
    session.append(
        "system/message",
        system("", id="dormant"),
        surface_op=SurfaceReplace(1, 1),
        source_event_seqs=[1],
    )
    assert session.surface == (6, 2, 3, 4, 5)
    assert texts(session.derive_messages()) == ["q", "a", "out", "more"]
    # The dormant node can itself be replaced again.
    session.append(
        "system/message",
        system("new persona", id="sys2"),
        surface_op=SurfaceReplace(6, 6),
        source_event_seqs=[6],
    )
    assert texts(session.derive_messages())[0] == "new persona"


def test_empty_assistant_message_is_skipped(session: Session) -> None:
    session.append("assistant/message", assistant("", id="empty"), surface_op="append")
    assert session.surface[-1] == 6
    assert texts(session.derive_messages()) == ["persona", "q", "a", "out", "more"]


def test_derive_returns_an_immutable_snapshot_of_shared_messages(
    session: Session,
) -> None:
    first = session.derive_messages()
    assert not hasattr(first, "append")
    session.append("user/message", user_message("later"), surface_op="append")
    second = session.derive_messages()
    assert len(first) == 5  # later appends never show through an earlier snapshot
    assert len(second) == 6
    assert second[1] is session.events[2].data
    assert list(first) == list(second[:5])
    assert first == tuple(first) and first[-1] is first[4]
    with pytest.raises(IndexError):
        first[5]


# --------------------------------------------------------------------------- incremental fold


def project(event: SessionEvent) -> Message | None:
    data = event.data
    if isinstance(data, UserMessage):
        return data
    if isinstance(data, ToolResultData):
        return data.message
    if isinstance(data, (AssistantMessageData, SystemMessageData)):
        return data.message if data.message.content else None
    return None


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_incremental_derive_matches_a_fold_from_scratch(data: st.DataObject) -> None:
    session = Session.create("h", clock=lambda: 1)
    model: list[int] = []  # the surface, kept independently
    calls = 0
    for step in range(data.draw(st.integers(1, 40), label="ops")):
        seq = session.next_seq
        op = data.draw(
            st.sampled_from(
                [
                    "user",
                    "system",
                    "assistant",
                    "tool",
                    "log",
                    "replace",
                    "replace-tool",
                ]
            ),
            label=f"op{step}",
        )
        text = data.draw(st.sampled_from(["", "x", "y"]), label="text")
        if op == "user":
            session.append(
                "user/message", user_message(text or "u"), surface_op="append"
            )
            model.append(seq)
        elif op == "system":
            session.append(
                "system/message", system(text, id=f"s{seq}"), surface_op="append"
            )
            model.append(seq)
        elif op == "assistant":
            session.append(
                "assistant/message", assistant(text, id=f"a{seq}"), surface_op="append"
            )
            model.append(seq)
        elif op == "tool":
            session.append(
                "tool/result",
                tool_result(f"c{seq}", text, id=f"r{seq}"),
                surface_op="append",
            )
            model.append(seq)
        elif op == "log":
            session.append("plugin/log", {"n": seq})
        elif op == "replace" and model:
            i = data.draw(st.integers(0, len(model) - 1), label="i")
            j = data.draw(st.integers(i, len(model) - 1), label="j")
            kind = data.draw(
                st.sampled_from(["user/message", "system/message"]), label="kind"
            )
            payload: object = (
                user_message("r")
                if kind == "user/message"
                else system(text, id=f"s{seq}")
            )
            session.append(
                kind,
                payload,
                surface_op=SurfaceReplace(model[i], model[j]),
                source_event_seqs=model[i : j + 1],
            )
            model[i : j + 1] = [seq]
        elif op == "replace-tool":
            tools = [s for s in model if session.events[s].type == "tool/result"]
            if tools:
                target = data.draw(st.sampled_from(tools), label="target")
                old = session.events[target].data
                assert isinstance(old, ToolResultData)
                new = attrs.evolve(
                    old,
                    message=attrs.evolve(
                        old.message,
                        content=(
                            ToolResultBlock(
                                old.message.source.call_id, (TextBlock("z"),)
                            ),
                        ),
                    ),
                )
                session.append(
                    "tool/result",
                    new,
                    surface_op=SurfaceReplace(target, target),
                    source_event_seqs=[target],
                )
                model[model.index(target)] = seq
        if data.draw(st.booleans(), label="derive"):
            calls += 1
            assert session.surface == tuple(model)
            expected = [
                m for m in (project(session.events[s]) for s in model) if m is not None
            ]
            got = session.derive_messages()
            assert got == expected
            assert all(a is b for a, b in zip(got, expected, strict=True))
    assert session.surface == tuple(model)
    expected = [m for m in (project(session.events[s]) for s in model) if m is not None]
    assert session.derive_messages() == expected


def test_derive_only_visits_new_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    from dsh_trio.session import _history

    session = Session.create("v", clock=lambda: 1)
    for k in range(50):
        session.append("user/message", user_message(f"m{k}"), surface_op="append")
    session.derive_messages()
    visited: list[SessionEvent] = []
    original = _history._project

    def spy(event: SessionEvent) -> Message | None:
        visited.append(event)
        return original(event)

    monkeypatch.setattr(_history, "_project", spy)
    session.append("user/message", user_message("new"), surface_op="append")
    assert len(session.derive_messages()) == 51
    assert [e.seq for e in visited] == [50]
    visited.clear()
    assert len(session.derive_messages()) == 51
    assert visited == []
    # A replace rebuilds once.
    session.append(
        "user/message",
        user_message("sum"),
        surface_op=SurfaceReplace(0, 1),
        source_event_seqs=[0, 1],
    )
    session.derive_messages()
    assert len(visited) == 50
