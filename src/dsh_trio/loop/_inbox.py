"""The agent's inbox: two ordered pending lists, a projection of durable splices."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from ..errors import DuplicateMessageError, InvalidSpliceError, SessionCorruptError
from ..values import (
    DataShapeError,
    InboxSplice,
    InboxTarget,
    SessionEvent,
    TextBlock,
    UserMessage,
    UserSource,
    builder,
    checker,
)

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["Inbox", "InboxObserver", "coerce_target"]


_check_user_message = checker(UserMessage)
_NEXT_TURN = InboxTarget.NEXT_TURN


def _plain_text(message: UserMessage) -> bool:
    """Whether ``message`` (a :class:`UserMessage`) is one ASCII text block from the
    user under a non-empty ASCII id: a shape its checker always accepts."""
    content: Any = message.content  # constructed directly, it may hold anything
    message_id: Any = message.id
    return (
        message_id.__class__ is str
        and message_id != ""
        and message_id.isascii()
        and message.source.__class__ is UserSource
        and content.__class__ is tuple
        and len(content) == 1
        and (block := content[0]).__class__ is TextBlock
        and (text := block.text).__class__ is str
        and text.isascii()
    )


def coerce_target(target: InboxTarget | str) -> InboxTarget:
    """Accept an :class:`InboxTarget` or its plain string; raise InvalidSpliceError otherwise."""
    if target.__class__ is InboxTarget:
        return target
    try:
        return InboxTarget(target)
    except ValueError:
        raise InvalidSpliceError(
            f"unknown inbox target {target!r} (expected 'next-turn' or 'next-step')"
        ) from None


class InboxObserver(Protocol):
    """What the inbox tells its owner after a mutation is durable."""

    def inserted(self, message: UserMessage) -> None:
        """``message`` was inserted."""
        ...

    def discarded(self, message: UserMessage) -> None:
        """``message`` was removed by a public mutation (or a cancel)."""
        ...

    def claimed(self, message: UserMessage, turn: int) -> None:
        """Turn ``turn`` claimed ``message``."""
        ...


class LiveObserver(InboxObserver, Protocol):
    """An observer that also says whether the inbox still takes input (an agent's)."""

    def check_alive(self) -> None:
        """Raise to refuse a public mutation."""
        ...


class _Silent:
    def inserted(self, message: UserMessage) -> None:
        return None

    def discarded(self, message: UserMessage) -> None:
        return None

    def claimed(self, message: UserMessage, turn: int) -> None:
        return None


def _noop() -> None:
    return None


_SILENT = _Silent()


def _normalise(value: float, length: int, *, what: str) -> int:
    """Array.prototype.splice-style coordinate normalisation (Python slice semantics)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidSpliceError(f"inbox splice {what} must be a number, got {value!r}")
    if isinstance(value, float):
        if math.isnan(value):
            return 0
        if math.isinf(value):
            return length if value > 0 else 0
        value = int(value)
    return value


#: ``InboxSplice(target, start, inserted, removed_count, outcome)`` of checked parts
#: (see ``values.builder``): a splice is appended on every input and claim.
_splice = builder(InboxSplice)


def _fold_error(seq: int, problem: str) -> SessionCorruptError:
    return SessionCorruptError(
        f"invalid persisted inbox splice at session seq {seq}: {problem}", seq=seq
    )


class Inbox:
    """The agent's two durable pending lists: ``next_turn`` and ``next_step``.

    Every mutation is one ``agent/inbox/spliced`` event appended to the session
    first; the lists change only once it is durable, then the live notifications
    fire (``discarded`` for public removals, then ``inserted``). The lists are
    tuples replaced on every change, so a reader holding one never sees it move.

    All methods are synchronous and never block. A mutation that would leave a
    message id pending twice raises :class:`DuplicateMessageError` and changes
    nothing. Created by the runtime; there is no public constructor.
    """

    __slots__ = ("_alive", "_next_step", "_next_turn", "_notify", "_session")

    def __init__(
        self,
        session: Session,
        *,
        notify: InboxObserver = _SILENT,
        check_alive: Callable[[], None] | None = _noop,
    ) -> None:
        """``check_alive`` runs before every public mutation and raises to refuse it;
        ``None`` asks ``notify`` (a :class:`LiveObserver`, e.g. the agent's work)
        through its own ``check_alive``, so the inbox keeps no bound method of its
        owner."""
        self._session = session
        self._notify = notify
        self._alive = check_alive
        self._next_turn: tuple[UserMessage, ...] = ()
        self._next_step: tuple[UserMessage, ...] = ()
        for event in session.events.of_types("agent/inbox/spliced"):
            self._replay(event)

    def _check_alive(self) -> None:
        """Refuse a public mutation of an inbox that takes no more input."""
        alive = self._alive
        if alive is None:
            cast("LiveObserver", self._notify).check_alive()
        else:
            alive()

    # ------------------------------------------------------------------ reads

    @property
    def next_turn(self) -> tuple[UserMessage, ...]:
        """Prompts waiting for their own turn, oldest first."""
        return self._next_turn

    @property
    def next_step(self) -> tuple[UserMessage, ...]:
        """Input waiting for the next step boundary, oldest first."""
        return self._next_step

    @property
    def has_pending(self) -> bool:
        """Whether either list holds a message."""
        return bool(self._next_turn or self._next_step)

    def __repr__(self) -> str:
        return (
            f"<Inbox next_turn={len(self.next_turn)} next_step={len(self.next_step)}>"
        )

    # ------------------------------------------------------------------ public mutations

    def append(self, target: InboxTarget | str, message: UserMessage) -> None:
        """Append ``message`` to ``target``'s list (durable; fires ``inserted``)."""
        self._check_alive()
        t = coerce_target(target)
        self._mutate(t, len(self._list(t)), 0, (message,), discard=True)

    def prepend(self, target: InboxTarget | str, message: UserMessage) -> None:
        """Insert ``message`` at the front of ``target``'s list."""
        self._check_alive()
        self._mutate(coerce_target(target), 0, 0, (message,), discard=True)

    def splice(
        self,
        target: InboxTarget | str,
        start: int,
        delete_count: int,
        inserted: Iterable[UserMessage] = (),
    ) -> list[UserMessage]:
        """Remove ``delete_count`` messages at ``start`` and insert ``inserted`` there.

        Coordinates are normalised like a Python slice / JS splice: a negative
        ``start`` counts from the end, out-of-range values are clamped, a negative
        count removes nothing. Removed messages are discarded (a ``canceled`` splice).

        Returns:
            The removed messages.
        """
        self._check_alive()
        t = coerce_target(target)
        length = len(self._list(t))
        s = _normalise(start, length, what="start")
        s = max(length + s, 0) if s < 0 else min(s, length)
        d = _normalise(delete_count, length, what="delete_count")
        d = min(max(d, 0), length - s)
        return self._mutate(t, s, d, tuple(inserted), discard=True)

    def replace(self, message_id: str, new: UserMessage) -> bool:
        """Replace the pending message ``message_id`` in place (next-turn searched first).

        Returns:
            ``False`` (and nothing is written) if no such message is pending.
        """
        self._check_alive()
        found = self._locate(message_id)
        if found is None:
            return False
        target, index = found
        self._mutate(target, index, 1, (new,), discard=True)
        return True

    def remove(self, message_id: str) -> bool:
        """Discard the pending message ``message_id``; ``False`` if it is not pending."""
        self._check_alive()
        found = self._locate(message_id)
        if found is None:
            return False
        target, index = found
        self._mutate(target, index, 1, (), discard=True)
        return True

    def clear(self) -> None:
        """Discard everything pending: next-step first, then next-turn (at most two events)."""
        self._check_alive()
        self.discard_all()

    # ------------------------------------------------------------------ runtime use only
    # The agent's own operations: it checks first whether it takes input.

    def discard_all(self) -> None:
        """:meth:`clear` without the check: the agent's cancel. Runtime use only."""
        if not (self._next_turn or self._next_step):
            return  # nothing pending: the common cancel
        for target in (InboxTarget.NEXT_STEP, InboxTarget.NEXT_TURN):
            n = len(self._list(target))
            if n:
                self._mutate(target, 0, n, (), discard=True)

    def claim(self, target: InboxTarget, turn: int) -> list[UserMessage]:
        """Take the batch of a boundary: all of next-step, plus one next-turn at a turn
        boundary (fires ``claimed``). Runtime use only: the agent's turn driver."""
        batch: list[UserMessage] = []
        n = len(self._next_step)
        if n:
            batch.extend(self._mutate(InboxTarget.NEXT_STEP, 0, n, (), discard=False))
        if target is _NEXT_TURN and self._next_turn:
            batch.extend(self._mutate(_NEXT_TURN, 0, 1, (), discard=False))
        claimed = self._notify.claimed
        for message in batch:
            claimed(message, turn)
        return batch

    def insert(self, target: InboxTarget, message: UserMessage) -> None:
        """:meth:`append` without the check, for the agent's ``send``. Runtime use only.

        ``_mutate(target, len(list), 0, (message,), discard=True)``, the common
        mutation (one message appended to one list), without the general path."""
        if message.__class__ is not UserMessage:
            self._validate_inserted((message,), ())  # names the problem
        message_id = message.id
        if (self._next_turn or self._next_step) and self.holds(message_id):
            raise DuplicateMessageError(message_id)
        if not _plain_text(message):
            try:
                _check_user_message(message)
            except DataShapeError as exc:
                raise InvalidSpliceError(
                    f"message {message_id!r} is not a valid UserMessage: "
                    f"{exc.describe('message')}"
                ) from None
        inserted = (message,)
        if target is _NEXT_TURN:
            current = self._next_turn
            self._session.append_trusted(
                "agent/inbox/spliced",
                _splice(target, len(current), inserted, None, None),
            )
            self._next_turn = current + inserted
        else:
            current = self._next_step
            self._session.append_trusted(
                "agent/inbox/spliced",
                _splice(target, len(current), inserted, None, None),
            )
            self._next_step = current + inserted
        self._notify.inserted(message)

    # ------------------------------------------------------------------ internals

    def _list(self, target: InboxTarget) -> tuple[UserMessage, ...]:
        return self._next_turn if target is _NEXT_TURN else self._next_step

    def _set(self, target: InboxTarget, items: tuple[UserMessage, ...]) -> None:
        if target is _NEXT_TURN:
            self._next_turn = items
        else:
            self._next_step = items

    def holds(self, message_id: str) -> bool:
        """Whether a message with this id is pending (on either list)."""
        for m in self._next_turn:
            if m.id == message_id:
                return True
        for m in self._next_step:  # noqa: SIM110  # loops: no generator frame
            if m.id == message_id:
                return True
        return False

    def _locate(self, message_id: str) -> tuple[InboxTarget, int] | None:
        for target in (InboxTarget.NEXT_TURN, InboxTarget.NEXT_STEP):
            for i, m in enumerate(self._list(target)):
                if m.id == message_id:
                    return target, i
        return None

    def _validate_inserted(
        self, inserted: Sequence[UserMessage], removed: Sequence[UserMessage]
    ) -> None:
        removed_ids = {m.id for m in removed} if removed else ()
        seen: set[str] = set()
        for m in inserted:
            if type(m) is not UserMessage:
                raise InvalidSpliceError(
                    f"inbox messages must be UserMessage values, got {type(m).__name__}"
                )
            if m.id in seen or (m.id not in removed_ids and self.holds(m.id)):
                raise DuplicateMessageError(m.id)
            seen.add(m.id)
            try:
                _check_user_message(m)
            except DataShapeError as exc:
                raise InvalidSpliceError(
                    f"message {m.id!r} is not a valid UserMessage: {exc.describe('message')}"
                ) from None

    def _mutate(
        self,
        target: InboxTarget,
        start: int,
        delete_count: int,
        inserted: tuple[UserMessage, ...],
        *,
        discard: bool,
    ) -> list[UserMessage]:
        if not delete_count and not inserted:
            return []
        current = self._list(target)
        removed = current[start : start + delete_count]
        if inserted:
            self._validate_inserted(inserted, removed)
        outcome: Literal["canceled"] | None = (
            "canceled" if discard and delete_count else None
        )
        self._session.append_trusted(
            "agent/inbox/spliced",
            _splice(target, start, inserted, delete_count or None, outcome),
        )
        self._set(target, current[:start] + inserted + current[start + delete_count :])
        if discard:
            discarded = self._notify.discarded
            for m in removed:
                discarded(m)
        if inserted:
            notify_inserted = self._notify.inserted
            for m in inserted:
                notify_inserted(m)
        return list(removed)

    def _replay(self, event: SessionEvent) -> None:
        data = event.data
        if not isinstance(data, InboxSplice):
            raise _fold_error(event.seq, "data is not an inbox splice")
        current = self._list(data.target)
        start, count = data.start, data.removed_count or 0
        if (
            start < 0
            or start > len(current)
            or count < 0
            or start + count > len(current)
        ):
            raise _fold_error(
                event.seq,
                f"coordinates start={start} removedCount={count} outside a list of {len(current)}",
            )
        removed = current[start : start + count]
        removed_ids = {m.id for m in removed}
        for m in data.inserted:
            if m.id not in removed_ids and self.holds(m.id):
                raise _fold_error(event.seq, f'message "{m.id}" is already pending')
        self._set(
            data.target, current[:start] + data.inserted + current[start + count :]
        )
