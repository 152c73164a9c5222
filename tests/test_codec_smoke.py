from __future__ import annotations

import json

from dsh_trio import user_message
from dsh_trio.values import (
    Aborted,
    HookCancel,
    SessionEvent,
    SessionHeader,
    SessionId,
    TurnEnd,
    UserMessage,
    event_from_json,
    event_to_json,
    header_from_json,
    header_to_json,
    structure,
    to_json,
)


def test_user_message_shape() -> None:
    m = user_message("hi", id="m1")
    assert to_json(m) == {
        "role": "user",
        "id": "m1",
        "content": [{"type": "text", "text": "hi"}],
        "source": {"kind": "user"},
    }
    assert structure(to_json(m), UserMessage) == m


def test_turn_end_round_trip() -> None:
    ev = SessionEvent(
        seq=0, time=5, type="turn/end", data=TurnEnd(1, Aborted(HookCancel("x")))
    )
    line = json.dumps(event_to_json(ev))
    assert json.loads(line)["data"]["reason"] == {
        "kind": "aborted",
        "reason": {"kind": "hook", "reason": "x"},
    }
    assert event_from_json(json.loads(line)) == ev


def test_header_keys() -> None:
    h = SessionHeader(id=SessionId("s"), created_at=1)
    assert list(header_to_json(h)) == [
        "type",
        "version",
        "id",
        "createdAt",
        "isSeeded",
        "delegationDepth",
    ]
    assert header_from_json(header_to_json(h)) == h
