"""The in-memory session log: append-only events, the surface, derived history.

A :class:`Session` is pure memory and synchronous: ``append`` validates, commits
and notifies listeners without blocking. Persistence listens through
:meth:`Session.subscribe`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, overload

import attrs

from ..errors import (
    ForkBoundaryError,
    InvalidEventError,
    InvalidSessionIdError,
    SessionCorruptError,
    SessionFormatError,
    SessionReentrancyError,
)
from ..values import (
    EVENT_DATA_TYPES,
    FORMAT_VERSION,
    SURFACE_TYPES,
    AssistantAttemptData,
    AssistantMessageData,
    DataShapeError,
    EndSeed,
    EpochHeader,
    EventData,
    JsonValue,
    Message,
    RequestContextData,
    SessionEvent,
    SessionHeader,
    SessionId,
    SurfaceOp,
    SurfaceReplace,
    SystemMessageData,
    ToolResultBlock,
    ToolResultData,
    UserMessage,
    check_json,
    check_json_value,
    checker,
    now_ms,
    typed_data,
)
from ._stream import expand_stream

__all__ = ["Session", "SessionEvents"]

_logger = logging.getLogger("dsh_trio")

_MAX: Final = 2**53 - 1
_APPEND: Final[tuple[int, int]] = (-1, -1)

_CHECKERS: dict[str, Callable[[Any], None]] = {
    name: checker(cls) for name, cls in EVENT_DATA_TYPES.items()
}


class SessionEvents(Sequence[SessionEvent]):
    """A read-only, live view of a session's events (``session.events``).

    Indexing, ``len`` and iteration read the log directly (no copy); a slice
    returns a tuple. The view follows later appends.
    """

    __slots__ = ("_items",)

    def __init__(self, items: list[SessionEvent]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> SessionEvent: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[SessionEvent, ...]: ...
    def __getitem__(
        self, index: int | slice
    ) -> SessionEvent | tuple[SessionEvent, ...]:
        if isinstance(index, slice):
            return tuple(self._items[index])
        return self._items[index]

    def __iter__(self) -> Iterator[SessionEvent]:
        return iter(self._items)

    def __reversed__(self) -> Iterator[SessionEvent]:
        return reversed(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SessionEvents):
            return self._items == other._items
        if isinstance(other, (list, tuple)):
            return len(self._items) == len(other) and all(
                a == b for a, b in zip(self._items, other, strict=True)
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<SessionEvents: {len(self._items)} events>"


class DerivedMessages(Sequence[Message]):
    """An immutable snapshot of the derived history (what ``derive_messages()`` returns).

    Taking one is O(1): it shares the session's append-only fold and remembers its
    length, so later appends never show through and a replace op starts a new fold
    instead of editing this one. Indexing, slicing (a tuple), iteration and ``==``
    against lists and tuples work as for a tuple; ``list(snapshot)`` gives a mutable
    copy.
    """

    __slots__ = ("_items", "_len")

    def __init__(self, items: list[Message], length: int) -> None:
        self._items = items
        self._len = length

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...
    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        if isinstance(index, slice):
            return tuple(self._items[: self._len][index])
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("derived message index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[Message]:
        items = self._items
        for i in range(self._len):
            yield items[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (DerivedMessages, list, tuple)):
            return len(self) == len(other) and all(
                a == b for a, b in zip(self, other, strict=True)
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"DerivedMessages({list(self)!r})"


class _Subscription:
    """One listener of a session; calling it unsubscribes (the idempotent disposer)."""

    __slots__ = ("listener", "session")

    def __init__(
        self, listener: Callable[[SessionEvent], None], session: Session
    ) -> None:
        self.listener = listener
        self.session = session

    def __call__(self) -> None:
        session = self.session
        session._subs = tuple(s for s in session._subs if s is not self)


def _invalid(seq: int, type_: str | None, what: str) -> InvalidEventError:
    where = f'session event "{type_}"' if type_ is not None else "session event"
    return InvalidEventError(f"{where} at seq {seq}: {what}", seq=seq, type=type_)


def _project(event: SessionEvent) -> Message | None:
    """The message a surface event contributes to the derived history, if any."""
    data = event.data
    cls = data.__class__
    if cls is UserMessage:
        return data  # type: ignore[return-value]
    if cls is ToolResultData:
        return data.message  # type: ignore[union-attr]
    if cls is AssistantMessageData or cls is SystemMessageData:
        message = data.message  # type: ignore[union-attr]
        return message if message.content else None
    return None


@attrs.define(eq=False, repr=False)
class Session:
    """An append-only session log with its surface and derived message history.

    Create one with :meth:`create` (fresh or seeded) or :meth:`restore` (persisted
    events). Every method is synchronous and never blocks; nothing here knows about
    tasks. Not thread-safe.

    Example::

        session = Session.create()
        session.append("turn/start", TurnStart(1))
        session.append("user/message", user_message("hi"), surface_op="append")
        session.derive_messages()  # [UserMessage(...)]
    """

    _id: SessionId
    _header: SessionHeader
    _clock: Callable[[], int]
    _events: list[SessionEvent] = attrs.field(factory=list, init=False)
    _view: SessionEvents = attrs.field(init=False)
    _surface: list[int] = attrs.field(factory=list, init=False)
    _surface_pos: dict[int, int] = attrs.field(factory=dict, init=False)
    _replace_generation: int = attrs.field(default=0, init=False)
    _derived: list[Message] = attrs.field(factory=list, init=False)
    _derived_nodes: int = attrs.field(default=0, init=False)
    _derived_generation: int = attrs.field(default=0, init=False)
    _request_header: EpochHeader | None = attrs.field(default=None, init=False)
    _request_context: RequestContextData | None = attrs.field(default=None, init=False)
    _last_turn: int = attrs.field(default=0, init=False)
    _open_turn: int | None = attrs.field(default=None, init=False)
    _subs: tuple[_Subscription, ...] = attrs.field(default=(), init=False)
    _publishing: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        self._view = SessionEvents(self._events)

    def __repr__(self) -> str:
        return f"<Session {self._id!r}: {len(self._events)} events>"

    # ------------------------------------------------------------------ construction

    @classmethod
    def create(
        cls,
        session_id: str | None = None,
        *,
        header: SessionHeader | None = None,
        seed: Sequence[SessionEvent] | None = None,
        cwd: str | None = None,
        parent_session: str | None = None,
        inherited: bool = False,
        clock: Callable[[], int] | None = None,
    ) -> Session:
        """Create a fresh session, optionally seeded with a prefix of events.

        Never blocks. A non-``None`` seed (even an empty one) is validated like a
        loaded log and then closed with a ``session/end-seed`` marker unless it
        already ends with one: ``EndSeed(inherited=True)`` when ``inherited`` (a
        fork's cut; appended also after an untagged marker), else ``EndSeed()``.
        Nothing is published to listeners (there are none yet).

        Args:
            session_id: the id; a uuid4 text when ``None``.
            header: a complete header to use. Its ``id`` is the session's id
                (``session_id``, if given, must match); ``cwd`` and
                ``parent_session``, if given, override its fields; ``is_seeded``
                becomes true when a seed is given.
            seed: events to start from, contiguous from seq 0.
            cwd: the working directory recorded in the header.
            parent_session: the session this one was forked from.
            inherited: tag the closing end-seed marker as a fork's cut.
            clock: epoch-milliseconds clock for event times and ``created_at``.

        Raises:
            InvalidSessionIdError: the id is not a non-empty string, or does not
                match ``header.id``.
            SessionCorruptError: the seed is malformed (``seq`` names the event).
        """
        clock_fn = clock if clock is not None else now_ms
        if header is None:
            sid = _check_id(session_id if session_id is not None else str(uuid.uuid4()))
            header = SessionHeader(
                version=FORMAT_VERSION,
                id=sid,
                created_at=clock_fn(),
                cwd=cwd,
                parent_session=parent_session,
                is_seeded=seed is not None,
            )
        else:
            if header.__class__ is not SessionHeader:
                raise InvalidSessionIdError(
                    f"header must be a SessionHeader, got {type(header).__name__}"
                )
            sid = _check_id(header.id)
            if session_id is not None and session_id != sid:
                raise InvalidSessionIdError(
                    f"session id {session_id!r} does not match header id {sid!r}"
                )
            header = attrs.evolve(
                header,
                cwd=cwd if cwd is not None else header.cwd,
                parent_session=(
                    parent_session
                    if parent_session is not None
                    else header.parent_session
                ),
                is_seeded=header.is_seeded or seed is not None,
            )
        session = cls(id=sid, header=header, clock=clock_fn)
        if seed is not None:
            session._load(seed, "seed")
            last = session._events[-1] if session._events else None
            if inherited:
                if last is None or not (
                    last.type == "session/end-seed"
                    and isinstance(last.data, EndSeed)
                    and last.data.inherited
                ):
                    session.append("session/end-seed", EndSeed(inherited=True))
            elif last is None or last.type != "session/end-seed":
                session.append("session/end-seed", EndSeed())
        return session

    @classmethod
    def restore(
        cls,
        header: SessionHeader,
        events: Sequence[SessionEvent],
        *,
        clock: Callable[[], int] | None = None,
    ) -> Session:
        """Rebuild a session from persisted events.

        Never blocks; no listener is called. Every event is checked: contiguous
        ``seq`` from 0, safe-integer ``time``, data of the declared shape, the
        surface rules, and every ``stream`` of ``assistant/message`` and
        ``assistant/attempt`` expands cleanly.

        Raises:
            SessionFormatError: ``header.version`` is not 3.
            InvalidSessionIdError: ``header.id`` is not a non-empty string.
            SessionCorruptError: the first malformed event (``seq`` names it).
        """
        if header.__class__ is not SessionHeader:
            raise SessionCorruptError(
                f"header must be a SessionHeader, got {type(header).__name__}"
            )
        if header.version != FORMAT_VERSION:
            raise SessionFormatError(
                f"session format version {header.version!r} is not supported "
                f"(this library reads version {FORMAT_VERSION})",
                version=header.version,
            )
        sid = _check_id(header.id)
        session = cls(
            id=sid,
            header=header,
            clock=clock if clock is not None else now_ms,
        )
        session._load(events, "log")
        return session

    # ------------------------------------------------------------------ reading

    @property
    def id(self) -> SessionId:
        """The session id."""
        return self._id

    @property
    def header(self) -> SessionHeader:
        """The session header (identity and lineage)."""
        return self._header

    @property
    def events(self) -> SessionEvents:
        """A read-only live view of the log (O(1), no copy)."""
        return self._view

    @property
    def next_seq(self) -> int:
        """The seq the next appended event gets."""
        return len(self._events)

    @property
    def surface(self) -> tuple[int, ...]:
        """The seqs of the current surface nodes, in order."""
        return tuple(self._surface)

    @property
    def replace_generation(self) -> int:
        """How many replace ops the surface has seen."""
        return self._replace_generation

    @property
    def last_turn(self) -> int:
        """The turn number of the last ``turn/start`` in the log (0 if none)."""
        return self._last_turn

    @property
    def open_turn(self) -> int | None:
        """The turn of a ``turn/start`` not yet closed by ``turn/end``, if any."""
        return self._open_turn

    def request_header(self) -> EpochHeader | None:
        """The header of the latest ``request/header`` event, if any (O(1))."""
        return self._request_header

    def request_context(self) -> RequestContextData | None:
        """The data of the latest ``request/context`` event, if any (O(1))."""
        return self._request_context

    def derive_messages(self) -> DerivedMessages:
        """The model-visible history: the surface folded into messages.

        ``user/message`` gives its message; ``system/message`` and
        ``assistant/message`` give theirs unless the content is empty;
        ``tool/result`` gives its result message. The fold is incremental (only
        surface nodes added since the last call are visited) and rebuilt only after
        a replace op. Returns an immutable O(1) snapshot (:class:`DerivedMessages`),
        so a call costs O(new events) however long the log is; ``list(...)`` of it
        gives a mutable copy. The messages themselves are shared immutable values.
        """
        if self._derived_generation != self._replace_generation:
            self._derived = []
            self._derived_nodes = 0
            self._derived_generation = self._replace_generation
        surface = self._surface
        folded = self._derived_nodes
        if folded < len(surface):
            events = self._events
            derived = self._derived
            for k in range(folded, len(surface)):
                message = _project(events[surface[k]])
                if message is not None:
                    derived.append(message)
            self._derived_nodes = len(surface)
        return DerivedMessages(self._derived, len(self._derived))

    # ------------------------------------------------------------------ listeners

    def subscribe(self, listener: Callable[[SessionEvent], None]) -> Callable[[], None]:
        """Call ``listener(event)`` after each committed append.

        Listeners run in subscription order, synchronously inside ``append``; an
        exception a listener raises is logged on the ``dsh_trio`` logger and never
        reaches the appender. A listener must not append to this session (that
        append raises :class:`SessionReentrancyError`).

        Returns:
            An idempotent disposer that unsubscribes this subscription.
        """
        sub = _Subscription(listener, self)
        self._subs = (*self._subs, sub)
        return sub

    # ------------------------------------------------------------------ appending

    def append(
        self,
        type: str,
        data: object,
        *,
        surface_op: SurfaceOp | None = None,
        source_event_seqs: Sequence[int] | None = None,
    ) -> SessionEvent:
        """Append one event; return the logged event.

        Synchronous, never blocks. The event gets ``seq = next_seq`` and ``time`` =
        the clock's epoch milliseconds. Everything is validated before anything
        changes; on error nothing is appended.

        Known types (``turn/start`` ... ``agent/inbox/spliced``) take their typed
        value, or its JSON shape (structured); unknown types take lossless JSON,
        which is copied. Surface types (``system/message``, ``user/message``,
        ``assistant/message``, ``tool/result``) must carry ``surface_op``; other
        types carry neither it nor ``source_event_seqs``.

        Args:
            type: the event type, e.g. ``"turn/start"``.
            data: the event data.
            surface_op: ``"append"`` or ``SurfaceReplace(start_seq, end_seq)``.
            source_event_seqs: earlier seqs this event cites (non-empty, unique,
                each below this event's seq; required to cover a replaced range;
                not allowed on ``assistant/message``).

        Raises:
            InvalidEventError: bad data or a surface-rule violation (the message
                says what and where; ``seq`` is the seq the event would have had).
            SessionReentrancyError: called while listeners of another append run.
        """
        if self._publishing:
            raise SessionReentrancyError(
                f'session "{self._id}": append cannot reenter while another '
                "append is being published"
            )
        seq = len(self._events)
        if type.__class__ is not str or not type:
            raise _invalid(seq, None, f"type must be a non-empty str, got {type!r:.60}")
        typed = self._typed(type, data, seq)
        sources = (
            None
            if source_event_seqs is None
            else self._check_sources(type, source_event_seqs, seq)
        )
        return self._append_checked(type, typed, surface_op, sources, seq)

    def _append_trusted(
        self,
        type: str,
        data: EventData,
        *,
        surface_op: SurfaceOp | None = None,
        source_event_seqs: tuple[int, ...] | None = None,
    ) -> SessionEvent:
        """``append`` for events the runtime built itself from validated parts.

        The data's shape is not re-checked (DESIGN: validate outside data once, at
        the boundary); the surface rules, the clock and the reentrancy guard are.
        """
        if self._publishing:
            raise SessionReentrancyError(
                f'session "{self._id}": append cannot reenter while another '
                "append is being published"
            )
        return self._append_checked(
            type, data, surface_op, source_event_seqs, len(self._events)
        )

    def _append_checked(
        self,
        type: str,
        typed: EventData | JsonValue,
        surface_op: SurfaceOp | None,
        sources: tuple[int, ...] | None,
        seq: int,
    ) -> SessionEvent:
        plan = self._check_surface(type, typed, surface_op, sources, seq)
        now = self._clock()
        if now.__class__ is not int or not 0 <= now <= _MAX:
            raise _invalid(
                seq, type, f"the clock returned {now!r:.40}, not epoch milliseconds"
            )
        event = SessionEvent(
            seq=seq,
            time=now,
            type=type,
            data=typed,
            surface_op=surface_op,
            source_event_seqs=sources,
        )
        self._commit(event, plan)
        subs = self._subs
        if subs:
            self._publish(event, subs)
        return event

    def _typed(self, type_: str, data: object, seq: int) -> EventData | JsonValue:
        check = _CHECKERS.get(type_)
        if check is None:
            try:
                return check_json(data, "data")
            except TypeError as exc:
                raise _invalid(seq, type_, f"carries non-JSON data: {exc}") from None
        if data.__class__ is not EVENT_DATA_TYPES[type_]:
            data = typed_data(type_, data, seq=seq)
        try:
            check(data)
        except DataShapeError as exc:
            raise _invalid(
                seq, type_, f"carries invalid data: {exc.describe('data')}"
            ) from None
        return data

    def _check_sources(
        self, type_: str, sources: Sequence[int], seq: int
    ) -> tuple[int, ...]:
        if not isinstance(sources, (tuple, list)):
            raise _invalid(
                seq,
                type_,
                f"source_event_seqs must be a tuple or list of ints, got "
                f"{sources.__class__.__name__}",
            )
        out = tuple(sources)
        if not out:
            raise _invalid(
                seq, type_, "source_event_seqs must be non-empty when present"
            )
        for k, s in enumerate(out):
            if s.__class__ is not int or not 0 <= s < seq:
                raise _invalid(
                    seq,
                    type_,
                    f"source_event_seqs[{k}] must be an earlier seq (0 <= s < {seq}), "
                    f"got {s!r:.40}",
                )
        if len(set(out)) != len(out):
            raise _invalid(seq, type_, f"source_event_seqs has duplicates: {list(out)}")
        return out

    def _check_surface(
        self,
        type_: str,
        data: object,
        op: object,
        sources: tuple[int, ...] | None,
        seq: int,
    ) -> tuple[int, int] | None:
        """Validate the surface transition; return the plan ``_commit`` applies.

        ``None``: not a surface event; ``_APPEND``; or the replaced index range.
        """
        if type_ not in SURFACE_TYPES:
            if op is not None or sources is not None:
                raise _invalid(
                    seq,
                    type_,
                    "only surface events (system/message, user/message, "
                    "assistant/message, tool/result) may carry surface_op or "
                    "source_event_seqs",
                )
            return None
        if op is None:
            raise _invalid(seq, type_, "a surface event must carry surface_op")
        if sources is not None and type_ == "assistant/message":
            raise _invalid(
                seq, type_, "assistant/message may not carry source_event_seqs"
            )
        if op.__class__ is str and op == "append":
            return _APPEND
        if op.__class__ is not SurfaceReplace:
            raise _invalid(
                seq,
                type_,
                f'surface_op must be "append" or SurfaceReplace, got {op!r:.60}',
            )
        start = op.start_seq
        end = op.end_seq
        pos = self._surface_pos
        i = pos.get(start) if start.__class__ is int else None
        j = pos.get(end) if end.__class__ is int else None
        if i is None:
            raise _invalid(
                seq,
                type_,
                f"replace start_seq {start!r:.40} is not a current surface node",
            )
        if j is None:
            raise _invalid(
                seq, type_, f"replace end_seq {end!r:.40} is not a current surface node"
            )
        if i > j:
            raise _invalid(
                seq,
                type_,
                f"replace start_seq {start} comes after end_seq {end} on the surface",
            )
        shadowed = self._surface[i : j + 1]
        cited = set(sources) if sources is not None else set()
        missing = [s for s in shadowed if s not in cited]
        if missing:
            raise _invalid(
                seq,
                type_,
                f"source_event_seqs must include every replaced surface node; "
                f"missing {missing}",
            )
        if type_ == "tool/result":
            self._check_tool_result_replacement(
                data,  # type: ignore[arg-type]
                shadowed,
                seq,
            )
        return (i, j)

    def _check_tool_result_replacement(
        self, data: ToolResultData, shadowed: list[int], seq: int
    ) -> None:
        old_event = self._events[shadowed[0]]
        if len(shadowed) != 1 or old_event.type != "tool/result":
            raise _invalid(
                seq,
                "tool/result",
                f"a tool/result replacement must replace exactly one tool/result "
                f"node, not seqs {shadowed}",
            )
        old: ToolResultData = old_event.data  # type: ignore[assignment]
        differences = [
            name
            for name, a, b in (
                ("turn", old.turn, data.turn),
                ("step", old.step, data.step),
                ("message.id", old.message.id, data.message.id),
                ("message.source", old.message.source, data.message.source),
                ("error", old.error, data.error),
                ("tool_call_ids", _call_ids(old), _call_ids(data)),
            )
            if a != b
        ]
        if differences:
            raise _invalid(
                seq,
                "tool/result",
                f"a tool/result replacement may change only the content of the "
                f"result at seq {shadowed[0]}; it changes {', '.join(differences)}",
            )

    def _commit(self, event: SessionEvent, plan: tuple[int, int] | None) -> None:
        seq = event.seq
        self._events.append(event)
        if plan is not None:
            surface = self._surface
            if plan is _APPEND:
                self._surface_pos[seq] = len(surface)
                surface.append(seq)
            else:
                i, j = plan
                pos = self._surface_pos
                for s in surface[i : j + 1]:
                    del pos[s]
                surface[i : j + 1] = [seq]
                for k in range(i, len(surface)):
                    pos[surface[k]] = k
                self._replace_generation += 1
            return
        type_ = event.type
        if type_ == "turn/start":
            self._last_turn = event.data.turn  # type: ignore[union-attr]
            self._open_turn = self._last_turn
        elif type_ == "turn/end":
            self._open_turn = None
        elif type_ == "request/header":
            self._request_header = event.data.header  # type: ignore[union-attr]
        elif type_ == "request/context":
            self._request_context = event.data  # type: ignore[assignment]

    def _publish(self, event: SessionEvent, subs: tuple[_Subscription, ...]) -> None:
        self._publishing = True
        try:
            for sub in subs:
                try:
                    sub.listener(event)
                except Exception:
                    _logger.exception(
                        'session "%s": listener %r failed on event %d (%s)',
                        self._id,
                        sub.listener,
                        event.seq,
                        event.type,
                    )
        finally:
            self._publishing = False

    # ------------------------------------------------------------------ loading

    def _load(self, events: Sequence[SessionEvent], what: str) -> None:
        """Admit existing events (a seed or a persisted log) without publishing."""
        for index, event in enumerate(events):
            try:
                self._admit(event, index)
            except InvalidEventError as exc:
                raise SessionCorruptError(
                    f"malformed session {what}: {exc}", seq=index
                ) from None

    def _admit(self, event: SessionEvent, index: int) -> None:
        if event.__class__ is not SessionEvent:
            raise _invalid(
                index, None, f"must be a SessionEvent, got {type(event).__name__}"
            )
        type_ = event.type
        if type_.__class__ is not str or not type_:
            raise _invalid(
                index, None, f"type must be a non-empty str, got {type_!r:.60}"
            )
        if event.seq != index or event.seq.__class__ is not int:
            raise _invalid(
                index,
                type_,
                f"events must be contiguous from seq 0; found seq {event.seq!r:.40} "
                f"at position {index}",
            )
        if event.time.__class__ is not int or not -_MAX <= event.time <= _MAX:
            raise _invalid(
                index, type_, f"time must be a safe integer, got {event.time!r:.40}"
            )
        data = event.data
        cls = EVENT_DATA_TYPES.get(type_)
        if cls is None:
            try:
                check_json_value(data)
            except DataShapeError as exc:
                raise _invalid(
                    index, type_, f"carries non-JSON data: {exc.describe('data')}"
                ) from None
        else:
            typed = self._typed(type_, data, index)
            if typed is not data:
                event = attrs.evolve(event, data=typed)
            if cls is AssistantMessageData or cls is AssistantAttemptData:
                try:
                    expand_stream(typed.stream)  # type: ignore[union-attr]
                except SessionCorruptError as exc:
                    raise _invalid(index, type_, f"data.stream: {exc}") from None
        sources = event.source_event_seqs
        if sources is not None:
            sources = self._check_sources(type_, sources, index)
        plan = self._check_surface(type_, event.data, event.surface_op, sources, index)
        self._commit(event, plan)

    # ------------------------------------------------------------------ fork

    def fork(self, boundary: int | None = None, child_id: str | None = None) -> Session:
        """Create a child session seeded with this log up to ``boundary`` (inclusive).

        Never blocks; this session is unchanged. The child's header has
        ``parent_session = self.id``, this session's ``cwd`` and ``is_seeded``; its
        seed ends with ``session/end-seed {inherited: true}``. An empty session
        forked without a boundary gives a child holding only that marker.

        Args:
            boundary: the last seq to inherit; the last event by default.
            child_id: the child's id; a uuid4 text when ``None``.

        Raises:
            ForkBoundaryError: ``boundary`` is not an existing seq, or the prefix
                it ends stops inside an open turn.
            InvalidSessionIdError: ``child_id`` is not a non-empty string.
        """
        n = len(self._events)
        if boundary is None:
            boundary = n - 1
        elif boundary.__class__ is not int or not 0 <= boundary < n:
            raise ForkBoundaryError(
                f'session "{self._id}": fork boundary {boundary!r:.40} is not an '
                f"existing seq (the log has {n} events)",
                boundary=boundary,
            )
        prefix = self._events[: boundary + 1]
        open_turn: int | None = None
        for event in prefix:
            if event.type == "turn/start":
                open_turn = event.data.turn  # type: ignore[union-attr]
            elif event.type == "turn/end":
                open_turn = None
        if open_turn is not None:
            raise ForkBoundaryError(
                f'session "{self._id}": fork boundary {boundary} ends inside open '
                f"turn {open_turn}",
                boundary=boundary,
            )
        return Session.create(
            child_id,
            seed=prefix,
            cwd=self._header.cwd,
            parent_session=self._id,
            inherited=True,
            clock=self._clock,
        )


def _check_id(value: object) -> SessionId:
    if value.__class__ is not str or not value:
        raise InvalidSessionIdError(
            f"a session id must be a non-empty str, got {value!r:.60}"
        )
    return SessionId(value)


def _call_ids(data: ToolResultData) -> tuple[str, ...]:
    return tuple(
        b.tool_call_id for b in data.message.content if isinstance(b, ToolResultBlock)
    )
