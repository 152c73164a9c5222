"""The inbox's own mutations: the agent's ``insert`` and the turn-boundary ``claim``.

``insert`` (what ``send`` does) must accept and refuse exactly what the public
``append`` does, with the same splice event and notifications; ``claim`` takes all of
next-step and, at a turn boundary, the first next-turn message, each list as one
splice that discards nothing. Either way a fresh inbox replaying the log holds what
the live one holds.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

import dsh_trio as dsh
from dsh_trio.loop import Inbox
from dsh_trio.session import Session
from dsh_trio.values import InboxSplice, InboxTarget, TextBlock, UserMessage, UserSource

from ..support import outcome_of

TARGETS = (InboxTarget.NEXT_TURN, InboxTarget.NEXT_STEP)


def _raw(cls: type, **fields: Any) -> Any:
    """An instance built field by field, past the constructor (as a careless caller can)."""
    value: Any = object.__new__(cls)
    for name, field in fields.items():
        object.__setattr__(value, name, field)
    return value


def _message(message_id: Any, content: Any, source: Any = None) -> Any:
    return _raw(
        UserMessage,
        id=message_id,
        content=content,
        source=UserSource() if source is None else source,
    )


def _bad_text_message(message_id: str) -> UserMessage:
    """A UserMessage whose text block carries an int."""
    return _message(message_id, (_raw(TextBlock, text=7),))  # type: ignore[no-any-return]


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


class _Notes:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int | None]] = []

    def inserted(self, message: UserMessage) -> None:
        self.seen.append(("inserted", message.id, None))

    def discarded(self, message: UserMessage) -> None:
        self.seen.append(("discarded", message.id, None))

    def claimed(self, message: UserMessage, turn: int) -> None:
        self.seen.append(("claimed", message.id, turn))


def _pending(inbox: Inbox, target: InboxTarget) -> tuple[UserMessage, ...]:
    return inbox.next_turn if target is InboxTarget.NEXT_TURN else inbox.next_step


def _log(session: Session) -> list[tuple[str, object]]:
    return [(e.type, e.data) for e in session.events]


def _expected_claim(
    inbox: Inbox, notes: _Notes, session: Session, target: InboxTarget, turn: int
) -> list[UserMessage]:
    """What a claim must do, written out: one splice per list it takes from (nothing
    discarded), the ``claimed`` notes in batch order. Applied to ``session`` and
    ``notes``; returns the batch and the lists left."""
    step, next_turn = inbox.next_step, inbox.next_turn
    batch = list(step)
    if step:
        session.append(
            "agent/inbox/spliced",
            InboxSplice(target=InboxTarget.NEXT_STEP, start=0, removed_count=len(step)),
        )
    if target is InboxTarget.NEXT_TURN and next_turn:
        session.append(
            "agent/inbox/spliced",
            InboxSplice(target=InboxTarget.NEXT_TURN, start=0, removed_count=1),
        )
        batch.append(next_turn[0])
    for message in batch:
        notes.claimed(message, turn)
    return batch


operations = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.sampled_from(TARGETS), st.integers(0, 6)),
        st.tuples(st.just("claim"), st.sampled_from(TARGETS), st.integers(1, 3)),
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_insert_and_claim_do_what_append_and_a_written_claim_do(
    ops: list[Any],
) -> None:
    pool = _pool()
    notes, expected_notes = _Notes(), _Notes()
    session, expected_session = Session.create("s"), Session.create("s")
    inbox = Inbox(session, notify=notes)
    general = Inbox(expected_session, notify=expected_notes)
    for kind, target, arg in ops:
        if kind == "insert":
            got = outcome_of(inbox.insert, target, pool[arg])
            want = outcome_of(general.append, target, pool[arg])
        else:
            got = outcome_of(inbox.claim, target, arg)
            want = (
                "ok",
                _expected_claim(general, expected_notes, expected_session, target, arg),
            )
            general = Inbox(expected_session, notify=expected_notes)  # replays it
        assert got == want
        assert inbox.next_turn == general.next_turn
        assert inbox.next_step == general.next_step
    assert notes.seen == expected_notes.seen
    assert _log(session) == _log(expected_session)
    replayed = Inbox(session)
    assert (replayed.next_turn, replayed.next_step) == (
        inbox.next_turn,
        inbox.next_step,
    )


@pytest.mark.parametrize("target", TARGETS)
def test_a_refused_insert_appends_nothing(target: InboxTarget) -> None:
    session = Session.create("s")
    inbox = Inbox(session)
    inbox.insert(target, dsh.user_message("a", id="m1"))
    before = len(session.events)
    bad_messages: list[Any] = [
        dsh.user_message("b", id="m1"),
        _bad_text_message("m2"),
        "text",
    ]
    for bad in bad_messages:
        with pytest.raises((dsh.DuplicateMessageError, dsh.InvalidSpliceError)):
            inbox.insert(target, bad)
    assert len(session.events) == before
    assert [m.id for m in _pending(inbox, target)] == ["m1"]


# Messages a careless caller can build: odd ids, blocks and sources, str subclasses.


class _Str(str):
    __slots__ = ()


class _Block(dsh.TextBlock):
    pass


class _Source(dsh.UserSource):
    pass


_TEXTS = st.one_of(
    st.sampled_from(["", "hi", "h\u00e9", "\ud800", "\U0001f600"]).map(
        lambda t: dsh.TextBlock(t)
    ),
    st.builds(lambda: _raw(dsh.TextBlock, text=7)),
    st.builds(lambda: _raw(dsh.TextBlock, text=_Str("x"))),
    st.builds(lambda: _Block("x")),
    st.just(dsh.ReasoningBlock("r")),
    st.just("not a block"),
)
_IDS = st.sampled_from(["m", "", "m\u00e9", "\ud800", 5, None, _Str("m")])
_SOURCES = st.sampled_from(
    [None, _Source(), dsh.PluginSource("p"), dsh.ModelSource("p", "m"), "user"]
)
_CONTENTS = st.one_of(
    st.lists(_TEXTS, max_size=2).map(tuple),
    st.lists(_TEXTS, min_size=1, max_size=1),
)


@settings(max_examples=400, deadline=None)
@given(_IDS, _CONTENTS, _SOURCES, st.sampled_from(TARGETS))
def test_insert_refuses_and_accepts_what_append_does(
    message_id: Any, content: Any, source: Any, target: InboxTarget
) -> None:
    """Whatever shortcut ``insert`` takes for a plain text message, it accepts no
    message ``append`` refuses, and refuses with the same error."""
    message = _message(message_id, content, source)
    fast_session, general_session = Session.create("s"), Session.create("s")
    fast, general = Inbox(fast_session), Inbox(general_session)
    got = outcome_of(fast.insert, target, message)
    want = outcome_of(general.append, target, message)
    assert got == want
    assert _pending(fast, target) == _pending(general, target)
    assert _log(fast_session) == _log(general_session)
