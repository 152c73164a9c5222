"""An independent fold of a session log that checks its structure as it goes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

import attrs

from ...values import (
    Aborted,
    AssistantAttemptData,
    AssistantMessageData,
    Blocked,
    Errored,
    InboxSplice,
    InboxTarget,
    Interrupted,
    Message,
    SessionEvent,
    StepEnd,
    StepStart,
    SystemMessageData,
    ToolCallData,
    ToolResultData,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
)
from ._report import note, violation_at

__all__ = ["LogChecker", "Occurrence", "fold_messages"]

_NEXT_TURN: Final = InboxTarget.NEXT_TURN
_NEXT_STEP: Final = InboxTarget.NEXT_STEP


@attrs.define(eq=False)
class Occurrence:
    """One insertion of a message into the inbox, and what became of it."""

    message: UserMessage
    inserted_at: int
    state: str = "pending"  # pending | claimed | written | dropped | discarded
    turn: int | None = None
    claimed_at: int | None = None
    ended_at: int | None = None


_STEP_DATA: Final = (
    SystemMessageData,
    AssistantMessageData,
    AssistantAttemptData,
    ToolCallData,
    ToolResultData,
)


class LogChecker:
    """An independent fold of a session log that checks its structure as it goes.

    It rebuilds the inbox from the durable splices, follows every inserted message
    through claim, ``user/message`` and turn end, and checks turn and step
    bracketing. :meth:`feed` consumes new events incrementally and raises
    :class:`~dsh_trio.testing.InvariantViolation` at the first broken rule.

    Args:
        allow_interrupted: accept ``turn/end`` with :class:`Interrupted` (written by
            crash repair only).
        on_turn_end: called with ``(turn, reason, event)`` for every ``turn/end``.
    """

    def __init__(
        self,
        *,
        allow_interrupted: bool = False,
        on_turn_end: Callable[[int, TurnEndReason, SessionEvent], None] | None = None,
    ) -> None:
        self.lists: dict[InboxTarget, list[Occurrence]] = {
            _NEXT_TURN: [],
            _NEXT_STEP: [],
        }
        self.occurrences: list[Occurrence] = []
        self.ever_inserted: set[str] = set()
        self.pending: dict[str, Occurrence] = {}
        self.open_turn: int | None = None
        self.open_step: int | None = None
        self.last_turn = 0
        self.last_step = 0
        self.turn_claims: list[Occurrence] = []
        self.turn_ends: dict[int, TurnEndReason] = {}
        self.turn_starts: list[int] = []
        #: ``llm/retry`` events per (turn, step).
        self.retries: dict[tuple[int, int], int] = {}
        #: Every claim splice, as (turn, target, ids).
        self.claims: list[tuple[int, InboxTarget, tuple[str, ...]]] = []
        # The open claim boundary: "turn" after turn/start, "step" after step/end,
        # None inside a step; what it must claim (target, count) once it claims.
        self._boundary: str | None = None
        self._boundary_expect: list[tuple[InboxTarget, int]] | None = None
        self._boundary_claimed: list[tuple[InboxTarget, int]] = []
        #: The live notifications the log implies: (kind, message id, turn).
        self.notices: list[tuple[str, str, int | None]] = []
        self.count = 0
        self._allow_interrupted = allow_interrupted
        self._on_turn_end = on_turn_end

    def pending_messages(self, target: InboxTarget) -> tuple[UserMessage, ...]:
        """The fold's pending messages on ``target``."""
        return tuple(o.message for o in self.lists[target])

    def feed(self, events: Sequence[SessionEvent]) -> None:
        """Consume ``events[self.count:]``."""
        while self.count < len(events):
            event = events[self.count]
            if event.seq != self.count:
                raise violation_at(event, f"expected seq {self.count}")
            self._event(event)
            self.count += 1

    def _expected_claims(self, boundary: str) -> list[tuple[InboxTarget, int]]:
        """What a claim at ``boundary`` takes from the fold now: all of next-step,
        then one next-turn message at a turn start."""
        expect = []
        if self.lists[_NEXT_STEP]:
            expect.append((_NEXT_STEP, len(self.lists[_NEXT_STEP])))
        if boundary == "turn" and self.lists[_NEXT_TURN]:
            expect.append((_NEXT_TURN, 1))
        return expect

    def _close_boundary(self, event: SessionEvent) -> None:
        """The boundary's claims are over: they must be exactly the predicted splices."""
        boundary = self._boundary
        if boundary is None:
            return
        self._boundary = None
        claimed = self._boundary_claimed
        expect = self._boundary_expect
        if expect is None:  # nothing was claimed: predict from the fold now
            expect = self._expected_claims(boundary)
        self._boundary_expect = None
        self._boundary_claimed = []
        repaired = isinstance(event.data, TurnEnd) and isinstance(
            event.data.reason, Interrupted
        )
        # A crash may cut the log inside a boundary's claims: repair closes the turn.
        prefix = claimed == expect[: len(claimed)]
        if (
            claimed == expect
            or (not claimed and boundary == "step")
            or (repaired and prefix)
        ):
            if claimed:
                note(f"claim at a {boundary} boundary")
            return
        raise violation_at(
            event,
            f"the {boundary} boundary before this event should claim {_splices(expect)} "
            f"(all of next-step{', then one next-turn message' if boundary == 'turn' else ' only'}); "
            f"it claimed {_splices(claimed)}",
        )

    def _event(self, event: SessionEvent) -> None:
        kind = event.type
        data = event.data
        if self._boundary is not None and not (
            kind == "agent/inbox/spliced"
            and isinstance(data, InboxSplice)
            and data.outcome is None
            and data.removed_count
        ):
            self._close_boundary(event)
        if kind == "turn/start":
            assert isinstance(data, TurnStart)
            turn = data.turn
            if self.open_turn is not None:
                raise violation_at(
                    event,
                    f"turn {turn} starts while turn {self.open_turn} is still open",
                )
            if turn != self.last_turn + 1:
                raise violation_at(
                    event,
                    f"turn numbers must strictly increase by one: turn {turn} follows turn {self.last_turn}",
                )
            self.open_turn = self.last_turn = turn
            self.turn_starts.append(turn)
            self._boundary = "turn"
            self.open_step = None
            self.last_step = 0
            self.turn_claims = []
        elif kind == "turn/end":
            self._turn_end(event)
        elif kind == "step/start":
            assert isinstance(data, StepStart)
            turn, step = data.turn, data.step
            if self.open_turn != turn:
                raise violation_at(
                    event,
                    f"step {turn}/{step} starts outside its turn (open turn: {self.open_turn})",
                )
            if self.open_step is not None:
                raise violation_at(
                    event,
                    f"step {turn}/{step} starts while step {self.open_step} is open",
                )
            if step != self.last_step + 1:
                raise violation_at(
                    event,
                    f"step numbers must increase by one: step {step} follows {self.last_step}",
                )
            self.open_step = self.last_step = step
        elif kind == "step/end":
            assert isinstance(data, StepEnd)
            turn, step = data.turn, data.step
            if self.open_turn != turn or self.open_step != step:
                raise violation_at(
                    event,
                    f"step/end {turn}/{step} does not close the open step ({self.open_turn}/{self.open_step})",
                )
            self.open_step = None
            self._boundary = "step"
        elif kind == "llm/retry":
            if isinstance(data, dict):
                turn_of, step_of = data.get("turn"), data.get("step")
                if isinstance(turn_of, int) and isinstance(step_of, int):
                    key = (turn_of, step_of)
                    self.retries[key] = self.retries.get(key, 0) + 1
        elif kind == "user/message":
            self._user_message(event)
        elif kind == "agent/inbox/spliced":
            self._splice(event)
        elif isinstance(data, _STEP_DATA) and (data.turn, data.step) != (
            self.open_turn,
            self.open_step,
        ):
            raise violation_at(
                event,
                f"belongs to step {data.turn}/{data.step} but the open step is {self.open_turn}/{self.open_step}",
            )

    def _turn_end(self, event: SessionEvent) -> None:
        data = event.data
        assert isinstance(data, TurnEnd)
        turn, reason = data.turn, data.reason
        if self.open_turn != turn:
            raise violation_at(
                event,
                f"turn/end {turn} does not close the open turn ({self.open_turn})",
            )
        if self.open_step is not None:
            raise violation_at(
                event, f"turn {turn} ends while step {self.open_step} is still open"
            )
        if isinstance(reason, Interrupted) and not self._allow_interrupted:
            raise violation_at(event, "only crash repair may end a turn Interrupted()")
        dropping = isinstance(reason, (Aborted, Errored, Blocked, Interrupted))
        for occ in self.turn_claims:
            if occ.state != "claimed":
                continue
            if not dropping:
                raise violation_at(
                    event,
                    f"message {occ.message.id!r} was lost: claimed at #{occ.claimed_at} into turn {turn}, "
                    f"never written as a user/message, and the turn ended {reason!r}",
                )
            occ.state = "dropped"
            occ.ended_at = event.seq
        self.turn_ends[turn] = reason
        note(f"turn ended {type(reason).__name__}")
        self.open_turn = None
        self.turn_claims = []
        if self._on_turn_end is not None:
            self._on_turn_end(turn, reason, event)

    def _user_message(self, event: SessionEvent) -> None:
        message = event.data
        assert isinstance(message, UserMessage)
        if self.open_turn is None or self.open_step is None:
            raise violation_at(
                event, f"user/message {message.id!r} written outside a step"
            )
        for occ in self.turn_claims:
            if occ.state == "claimed" and occ.message.id == message.id:
                occ.state = "written"
                occ.ended_at = event.seq
                return
        if message.id in self.ever_inserted:
            raise violation_at(
                event,
                f"message {message.id!r} was duplicated: this user/message has no claimed, unwritten "
                f"occurrence in turn {self.open_turn}",
            )

    def _splice(self, event: SessionEvent) -> None:
        data = event.data
        if not isinstance(data, InboxSplice):
            raise violation_at(event, "data is not an inbox splice")
        lst = self.lists[data.target]
        n = len(lst)
        count = data.removed_count or 0
        if data.removed_count is not None and data.removed_count < 1:
            raise violation_at(event, "removedCount is written only when positive")
        if not 0 <= data.start <= n or data.start + count > n:
            raise violation_at(
                event,
                f"coordinates start={data.start} removed={count} do not fit {data.target} of length {n}",
            )
        if not count and not data.inserted:
            raise violation_at(
                event, "a splice that changes nothing must not be written"
            )
        if data.outcome is not None and not count:
            raise violation_at(event, f"outcome {data.outcome!r} without removals")
        removed = lst[data.start : data.start + count]
        for occ in removed:
            del self.pending[occ.message.id]
        if count and data.outcome is None:
            self._claim(event, data, removed, n)
        else:
            for occ in removed:
                occ.state = "discarded"
                occ.ended_at = event.seq
                self.notices.append(("discarded", occ.message.id, None))
        fresh: list[Occurrence] = []
        for m in data.inserted:
            if m.id in self.pending or any(o.message.id == m.id for o in fresh):
                raise violation_at(
                    event, f"inserts message {m.id!r}, which is already pending"
                )
            occ = Occurrence(m, event.seq)
            fresh.append(occ)
            self.occurrences.append(occ)
            self.ever_inserted.add(m.id)
            self.notices.append(("inserted", m.id, None))
        for occ in fresh:
            self.pending[occ.message.id] = occ
        lst[data.start : data.start + count] = fresh

    def _claim(
        self, event: SessionEvent, data: InboxSplice, removed: list[Occurrence], n: int
    ) -> None:
        if data.inserted or data.start != 0:
            raise violation_at(
                event, "a claim takes messages from the front and inserts nothing"
            )
        if data.target is _NEXT_STEP and len(removed) != n:
            raise violation_at(
                event, f"a claim takes all of next-step ({n}), not {len(removed)}"
            )
        if data.target is _NEXT_TURN and len(removed) != 1:
            raise violation_at(
                event, f"a claim takes one next-turn message, not {len(removed)}"
            )
        if self.open_turn is None:
            raise violation_at(event, "messages were claimed outside a turn")
        boundary = self._boundary
        if boundary is None:
            raise violation_at(
                event,
                f"messages were claimed inside step {self.open_turn}/{self.open_step}, "
                "not at a turn start or a step boundary",
            )
        if self._boundary_expect is None:
            self._boundary_expect = self._expected_claims(boundary)
        self._boundary_claimed.append((data.target, len(removed)))
        if boundary == "step" and data.target is _NEXT_TURN:
            raise violation_at(
                event,
                f"a step boundary claims only next-step, but turn {self.open_turn} "
                f"took next-turn message {removed[0].message.id!r} after step {self.last_step}",
            )
        self.claims.append(
            (self.open_turn, data.target, tuple(o.message.id for o in removed))
        )
        for occ in removed:
            occ.state = "claimed"
            occ.turn = self.open_turn
            occ.claimed_at = event.seq
            self.turn_claims.append(occ)
            self.notices.append(("claimed", occ.message.id, self.open_turn))


def _splices(claims: Sequence[tuple[InboxTarget, int]]) -> str:
    if not claims:
        return "nothing"
    return ", then ".join(f"{n} of {target}" for target, n in claims)


def fold_messages(events: Sequence[SessionEvent]) -> list[Message] | None:
    """The model-visible history of ``events``, folded independently of the session.

    ``user/message`` gives its message, ``tool/result`` its result message,
    ``system/message`` and ``assistant/message`` theirs unless empty. ``None`` if
    the log replaces surface nodes (this fold only follows appends).
    """
    messages: list[Message] = []
    for event in events:
        data = event.data
        if event.surface_op is None:
            continue
        if event.surface_op != "append":
            return None
        if isinstance(data, UserMessage):
            messages.append(data)
        elif isinstance(data, ToolResultData) or (
            isinstance(data, (AssistantMessageData, SystemMessageData))
            and data.message.content
        ):
            messages.append(data.message)
    return messages
