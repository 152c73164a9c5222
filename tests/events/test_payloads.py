from __future__ import annotations

import attrs
import pytest

import dsh_trio.events as events
from dsh_trio import user_message
from dsh_trio.values import (
    AgentStatus,
    LlmFailure,
    SessionEvent,
    TextDelta,
)

EXPECTED_FIELDS = {
    "AgentCreated": ("agent", "source", "signal"),
    "AgentDisposed": ("agent",),
    "AgentActivated": ("agent",),
    "AgentPassivated": ("agent",),
    "AgentStatusChanged": ("agent", "status"),
    "AgentErrorEvent": ("agent", "turn", "step", "error", "phase"),
    "InboxInserted": ("agent", "message"),
    "InboxClaimed": ("agent", "message", "turn"),
    "InboxDiscarded": ("agent", "message"),
    "AssistantStream": ("agent", "frame"),
    "StreamStartFrame": ("attempt_id", "revision", "turn", "step"),
    "StreamChunkFrame": ("attempt_id", "revision", "index", "time", "chunk"),
    "StreamEndFrame": ("attempt_id", "revision", "index", "outcome"),
    "Committed": ("event_type", "seq"),
    "Abandoned": (),
    "PreStep": ("agent", "messages", "turn", "step", "signal"),
    "RequestProposal": ("agent", "turn", "step", "signal"),
    "RequestFailed": (
        "agent",
        "turn",
        "step",
        "provider",
        "failure",
        "retry_policy",
        "signal",
    ),
    "TurnStopping": ("agent", "turn", "signal"),
    "SessionEventAppended": ("session", "event"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED_FIELDS))
def test_payload_fields_are_exactly_the_contract(name: str) -> None:
    cls = getattr(events, name)
    assert name in events.__all__
    assert tuple(f.name for f in attrs.fields(cls)) == EXPECTED_FIELDS[name]


class FakeAgent:
    pass


def test_agent_payloads_compare_by_identity_and_are_frozen() -> None:
    agent = FakeAgent()
    a = events.AgentStatusChanged(agent, AgentStatus.RUNNING)  # type: ignore[arg-type]
    b = events.AgentStatusChanged(agent, AgentStatus.RUNNING)  # type: ignore[arg-type]
    assert a != b
    assert a == a
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        a.status = AgentStatus.IDLE  # type: ignore[misc]


def test_frames_are_values() -> None:
    chunk = TextDelta(0, "hi")
    assert events.StreamChunkFrame("s:1", 2, 0, 5, chunk) == events.StreamChunkFrame(
        "s:1", 2, 0, 5, chunk
    )
    assert events.StreamEndFrame(
        "s:1", 3, 1, events.Committed("assistant/message", 7)
    ) == events.StreamEndFrame("s:1", 3, 1, events.Committed("assistant/message", 7))
    assert events.Abandoned() == events.Abandoned()
    assert hash(events.Committed("assistant/attempt", 1)) == hash(
        events.Committed("assistant/attempt", 1)
    )


def test_event_names() -> None:
    assert len(set(events.EVENT_NAMES)) == len(events.EVENT_NAMES) == 15
    assert "agent/assistant-stream" in events.EVENT_NAMES
    assert "session/event" in events.EVENT_NAMES


def test_payloads_construct_with_runtime_values() -> None:
    agent = FakeAgent()
    message = user_message("hi")
    claimed = events.InboxClaimed(agent, message, 1)  # type: ignore[arg-type]
    assert claimed.message is message
    failed = events.RequestFailed(
        agent,  # type: ignore[arg-type]
        1,
        2,
        "deepseek",
        LlmFailure("busy", "RATE_LIMIT"),
        None,
        object(),  # type: ignore[arg-type]
    )
    assert failed.failure.code == "RATE_LIMIT"
    appended = events.SessionEventAppended(
        object(),  # type: ignore[arg-type]
        SessionEvent(seq=0, time=0, type="x", data=None),
    )
    assert appended.event.seq == 0
    assert not hasattr(appended, "agent")  # a session event is unscoped by default
