"""The inbox's common mutations (one message appended, the turn-boundary claim) take
a direct path; it must behave exactly as the general splice (``Inbox._mutate``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

import dsh_trio as dsh
from dsh_trio.loop._inbox import Inbox
from dsh_trio.session import Session
from dsh_trio.values import InboxTarget, TextBlock, UserMessage, UserSource

TARGETS = (InboxTarget.NEXT_TURN, InboxTarget.NEXT_STEP)


def _bad_text_message(message_id: str) -> UserMessage:
    """A UserMessage whose text block carries an int (it bypasses the constructor)."""
    block = object.__new__(TextBlock)
    object.__setattr__(block, "text", 7)
    message = object.__new__(UserMessage)
    object.__setattr__(message, "id", message_id)
    object.__setattr__(message, "content", (block,))
    object.__setattr__(message, "source", UserSource())
    return message


def _pool() -> list[Any]:
    return [
        dsh.user_message("a", id="m1"),
        dsh.user_message("b", id="m2"),
        dsh.user_message("c", id="m3"),
        dsh.user_message("again", id="m1"),  # the id of another message
        _bad_text_message("m4"),
        "not a message",
        dsh.AssistantMessage(
            id=dsh.MessageId("m5"), content=(), source=dsh.ModelSource("p", "m")
        ),
    ]


def _general_insert(inbox: Inbox, target: InboxTarget, message: Any) -> None:
    inbox._mutate(target, len(inbox._list(target)), 0, (message,), discard=True)


def _general_claim(inbox: Inbox, target: InboxTarget, turn: int) -> list[UserMessage]:
    batch: list[UserMessage] = []
    n = len(inbox._next_step)
    if n:
        batch += inbox._mutate(InboxTarget.NEXT_STEP, 0, n, (), discard=False)
    if target is InboxTarget.NEXT_TURN and inbox._next_turn:
        batch += inbox._mutate(InboxTarget.NEXT_TURN, 0, 1, (), discard=False)
    for message in batch:
        inbox._notify.claimed(message, turn)
    return batch


class _Notes:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int | None]] = []

    def inserted(self, message: UserMessage) -> None:
        self.seen.append(("inserted", message.id, None))

    def discarded(self, message: UserMessage) -> None:
        self.seen.append(("discarded", message.id, None))

    def claimed(self, message: UserMessage, turn: int) -> None:
        self.seen.append(("claimed", message.id, turn))


def _outcome(call: Any, *args: Any) -> Any:
    try:
        return ("ok", call(*args))
    except Exception as exc:
        return ("raised", type(exc), str(exc))


operations = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.sampled_from(TARGETS), st.integers(0, 6)),
        st.tuples(st.just("claim"), st.sampled_from(TARGETS), st.integers(1, 3)),
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_direct_insert_and_claim_match_the_general_splice(ops: list[Any]) -> None:
    pool = _pool()
    fast_notes, general_notes = _Notes(), _Notes()
    fast = Inbox(Session.create("fast"), notify=fast_notes)
    general = Inbox(Session.create("general"), notify=general_notes)
    for kind, target, arg in ops:
        if kind == "insert":
            got = _outcome(fast.insert, target, pool[arg])
            want = _outcome(_general_insert, general, target, pool[arg])
        else:
            got = _outcome(fast.claim, target, arg)
            want = _outcome(_general_claim, general, target, arg)
        assert got == want
        assert fast.next_turn == general.next_turn
        assert fast.next_step == general.next_step
    assert fast_notes.seen == general_notes.seen
    fast_log = [(e.type, e.data) for e in fast._session.events]
    general_log = [(e.type, e.data) for e in general._session.events]
    assert fast_log == general_log


@pytest.mark.parametrize("target", TARGETS)
def test_a_refused_insert_appends_nothing(target: InboxTarget) -> None:
    inbox = Inbox(Session.create("s"))
    inbox.insert(target, dsh.user_message("a", id="m1"))
    before = len(inbox._session.events)
    bad_messages: list[Any] = [
        dsh.user_message("b", id="m1"),
        _bad_text_message("m2"),
        "text",
    ]
    for bad in bad_messages:
        with pytest.raises((dsh.DuplicateMessageError, dsh.InvalidSpliceError)):
            inbox.insert(target, bad)
    assert len(inbox._session.events) == before
    assert [m.id for m in inbox._list(target)] == ["m1"]
