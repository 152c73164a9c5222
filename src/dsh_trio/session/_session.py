"""The in-memory session log: append-only events, the surface, derived history.

A :class:`Session` is pure memory and synchronous: ``append`` validates, commits
and notifies listeners without blocking. Persistence listens through
:meth:`Session.subscribe`. The checks live beside it: event data and sources in
:mod:`._admission`, the surface rules in :mod:`._surface`. The derived history
(:mod:`._history`, folded when asked for) and the latest markers
(:mod:`._markers`, folded as events commit) are incremental folds; :mod:`._views`
has the live view of the events, and :mod:`._reads` the members that read the
session's state (its base class).

The events are a :class:`DecodedEvents`: a restored log keeps the events it read as
their JSON lines (compressed, decoded when read; see :mod:`._loaded`), and the events
appended since are kept as values. A live session's settled events become lines too
(:mod:`._settling`, which keeps where that stands).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from time import time_ns as _time_ns
from typing import Final

import attrs

from ..errors import SessionCorruptError, SessionReentrancyError
from ..values import (
    EVENT_DATA_TYPES,
    MAX_SAFE_INTEGER,
    SURFACE_TYPES,
    EndSeed,
    EventData,
    JsonValue,
    SessionEvent,
    SessionHeader,
    SurfaceOp,
    UserMessage,
    UserSource,
    is_known_event_type,
    now_ms,
)
from ._admission import (
    check_sources,
    invalid,
    new_event,
    typed_event_data,
    warn_undeclared,
)
from ._compact import DecodedEvents
from ._fork import fork_prefix
from ._headers import new_header, restored_header
from ._history import HistoryFold
from ._intake import intake
from ._loaded import LoadedLog
from ._markers import MARKER_TYPES, Markers
from ._reads import SessionReads
from ._settling import Settling
from ._subscription import Subscription, listener_failed
from ._surface import APPEND, Plan, Surface
from ._views import SessionEvents

__all__ = ["Session"]

_MAX: Final = MAX_SAFE_INTEGER


@attrs.define(eq=False, repr=False)
class Session(SessionReads):
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

    _header: SessionHeader  # ``_header.id`` is the session id
    _clock: Callable[[], int]
    _events: DecodedEvents = attrs.field(factory=DecodedEvents, init=False)
    _live: list[SessionEvent] = attrs.field(init=False)  # ``_events.values``
    _base: int = attrs.field(default=0, init=False)  # events kept as lines
    _view: SessionEvents = attrs.field(init=False)
    _surface: Surface = attrs.field(init=False)
    _history: HistoryFold = attrs.field(init=False)
    _markers: Markers = attrs.field(factory=Markers, init=False)
    _subs: tuple[Subscription, ...] = attrs.field(default=(), init=False)
    _publishing: bool = attrs.field(default=False, init=False)
    # Every system/message, and every user/message whose source is not a
    # ``UserSource``, has a seq at or below this one (-1: none yet): the prompt
    # projections read the surface nodes appended since their last look only when
    # this mark reaches them.
    _prompt_seq: int = attrs.field(default=-1, init=False)
    _settling: Settling = attrs.field(factory=Settling, init=False)

    def __attrs_post_init__(self) -> None:
        self._live = self._events.values
        self._view = SessionEvents(self._events)
        self._surface = Surface(self._events)
        self._history = self._surface  # a surface is its own fold

    def __repr__(self) -> str:
        return f"<Session {self._id!r}: {self._base + len(self._live)} events>"

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
        header = new_header(
            session_id,
            header,
            seeded=seed is not None,
            cwd=cwd,
            parent_session=parent_session,
            clock=clock_fn,
        )
        session = cls(header=header, clock=clock_fn)
        if seed is not None:
            session._load(seed, "seed")
            events = session.events
            last = events[-1] if events else None
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
        header = restored_header(header)
        session = cls(header=header, clock=clock if clock is not None else now_ms)
        session._load(events, "log")
        return session

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
        sub = Subscription(listener, self)
        self._subs = (*self._subs, sub)
        return sub

    def _subscribe_first(
        self, listener: Callable[[SessionEvent], None]
    ) -> Callable[[], None]:
        """``subscribe``, ahead of every earlier subscription (its owning agent's)."""
        sub = Subscription(listener, self)
        self._subs = (sub, *self._subs)
        return sub

    # ------------------------------------------------------------------ appending

    def append(
        self,
        type: str,
        data: object,
        *,
        surface_op: SurfaceOp | None = None,
        source_event_seqs: Sequence[int] | None = None,
        ignorable: bool = False,
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

        An application's own event types: loading a stored log refuses an event
        of a type the reader does not know unless the event is marked ignorable,
        as the reference does. Append informational events (a reader may skip
        them) with ``ignorable=True``; declare the others with
        :func:`~dsh_trio.session.register_event_type` in every process that loads
        the log. Appending an event of a type that is neither known, declared nor
        marked ignorable logs a warning once per type on the ``dsh_trio`` logger.

        Example::

            session.append("ui/theme", {"theme": "dark"}, ignorable=True)
            # the log line: {"type":"ui/theme",...,"data":{...},"ignorable":true}

        Args:
            type: the event type, e.g. ``"turn/start"``.
            data: the event data.
            surface_op: ``"append"`` or ``SurfaceReplace(start_seq, end_seq)``.
            source_event_seqs: earlier seqs this event cites (non-empty, unique,
                each below this event's seq; required to cover a replaced range;
                not allowed on ``assistant/message``).
            ignorable: write ``"ignorable": true`` on the event: a reader that does
                not know its type may skip it (the marker is kept on load, fork
                and rewrite).

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
        seq = self._base + len(self._live)
        if type.__class__ is not str or not type:
            raise invalid(seq, None, f"type must be a non-empty str, got {type!r:.60}")
        if ignorable.__class__ is not bool:
            raise invalid(seq, type, f"ignorable must be a bool, got {ignorable!r:.40}")
        typed = typed_event_data(type, data, seq)
        sources = (
            None
            if source_event_seqs is None
            else check_sources(type, source_event_seqs, seq)
        )
        if not (ignorable or type in EVENT_DATA_TYPES or is_known_event_type(type)):
            warn_undeclared(type)
        return self.append_trusted(
            type,
            typed,
            surface_op=surface_op,
            source_event_seqs=sources,
            ignorable=ignorable,
        )

    def append_trusted(
        self,
        type: str,
        typed: EventData | JsonValue,
        *,
        surface_op: SurfaceOp | None = None,
        source_event_seqs: tuple[int, ...] | None = None,
        ignorable: bool = False,
    ) -> SessionEvent:
        """:meth:`append`, for an event the runtime built itself from validated parts.

        Runtime use only (the agent loop and the tool scheduler write every event of a
        turn through it; not part of the public API). ``type`` is a non-empty str,
        ``typed`` the data :meth:`append` would log for it (the typed value of a known
        type, JSON of an unknown one), ``source_event_seqs`` a checked tuple and
        ``ignorable`` a bool: the data's shape is not checked again (validate outside
        data once, at the boundary). The surface rules, the clock and the reentrancy
        guard are checked, the event is admitted by the rule restored logs follow
        too (:meth:`_admit`) and the listeners are called as :meth:`append` calls them.

        Example::

            session.append_trusted("step/start", StepStart(turn=1, step=1))

        Raises:
            InvalidEventError: a surface-rule violation, or a clock that gave no
                epoch milliseconds.
            SessionReentrancyError: called while listeners of another append run.
        """
        if self._publishing:
            raise SessionReentrancyError(
                f'session "{self._id}": append cannot reenter while another '
                "append is being published"
            )
        seq = self._base + len(self._live)
        sources = source_event_seqs
        plan: Plan
        # Hot paths: an off-surface event without surface fields has no plan; an
        # uncited surface append is one (what ``Surface.plan`` returns for it).
        if surface_op is None and sources is None and type not in SURFACE_TYPES:
            plan = None
        elif surface_op == "append" and sources is None and type in SURFACE_TYPES:
            plan = APPEND
        else:
            plan = self._surface.plan(type, typed, surface_op, sources, seq)
        clock = self._clock
        if clock is now_ms:  # the wall clock gives epoch milliseconds
            now = _time_ns() // 1_000_000
        else:
            now = clock()
            if now.__class__ is not int or not 0 <= now <= _MAX:
                raise invalid(
                    seq, type, f"the clock returned {now!r:.40}, not epoch milliseconds"
                )
        event = new_event(seq, now, type, typed, surface_op, sources, ignorable)
        self._admit(event, plan)
        subs = self._subs
        if subs:  # ``_publish``, inline
            self._publishing = True
            try:
                for sub in subs:
                    try:
                        sub.listener(event)
                    except Exception:
                        listener_failed(self._id, sub, event)
            finally:
                self._publishing = False
        return event

    def _admit(self, event: SessionEvent, plan: Plan) -> None:
        """The admission rule: commit ``event`` (at ``next_seq``, its surface ``plan``
        checked) to the log, then to the surface or the markers.

        Every event enters a session here: appended (:meth:`append_trusted`) or taken
        from a seed or a log (:meth:`_load`). A surface event moves the prompt mark
        when it is a ``system/message`` or a ``user/message`` whose source is not a
        :class:`UserSource` (assistant messages, tool results and plain user input
        never do).
        """
        self._live.append(event)
        type_ = event.type
        if plan is None:
            if type_ in MARKER_TYPES:
                self._markers.fold(event)
                if type_ == "turn/start":
                    events = self._events
                    self._settling.turn_started(event.seq, events)
                    self._base = events.compact_count
        else:
            seq = event.seq
            self._surface.apply(plan, seq)
            if type_ == "system/message" or (
                type_ == "user/message"
                and not (
                    (data := event.data).__class__ is UserMessage
                    and data.source.__class__ is UserSource
                )
            ):
                self._prompt_seq = seq

    def _offer_lines(self, chunks: Sequence[tuple[int, int, bytes]]) -> None:
        """Chunks of the lines a log writer wrote for this session's events (see
        :meth:`Settling.offer`). Runtime use: a session recorder passes what its
        writer gathered.
        """
        events = self._events
        self._settling.offer(chunks, events)
        self._base = events.compact_count

    def _load(self, events: Sequence[SessionEvent], what: str) -> None:
        """Admit existing events (a seed or a persisted log) into this fresh session
        without publishing.

        Events a log decoder already checked (a :class:`DecodedEvents`, except its
        ``unchecked`` positions) skip the second check of their data; a
        :class:`LoadedLog` was admitted while it was read, so its surface and markers
        are adopted as they are.

        Raises:
            SessionCorruptError: the first malformed event (``seq`` names it).
        """
        if events.__class__ is LoadedLog and what == "log":
            self._adopt(events)
            return
        unchecked = events.unchecked if isinstance(events, DecodedEvents) else None
        surface = self._surface
        for index, event in enumerate(events):
            checked = unchecked is not None and index not in unchecked
            event, plan = intake(surface, event, index, what, checked)
            self._admit(event, plan)

    def _adopt(self, log: LoadedLog) -> None:
        """Take over a log admitted as it was read (its lines shared, not copied)."""
        error = log.error
        if error is not None:
            raise SessionCorruptError(str(error), seq=error.seq)
        markers = log.settled_markers()
        events = log.share()
        self._events = events
        self._live = events.values
        self._base = events.compact_count
        self._view = SessionEvents(events)
        self._surface = log.surface.copy(events)
        self._history = self._surface
        self._markers = attrs.evolve(markers)
        self._prompt_seq = self.next_seq - 1  # any adopted event may be one
        self._settling = Settling(
            turn_mark=markers.open_turn_seq or self._base, settled_below=self._base
        )

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
        prefix = fork_prefix(self._id, self._events, boundary)
        return Session.create(
            child_id,
            seed=prefix,
            cwd=self._header.cwd,
            parent_session=self._id,
            inherited=True,
            clock=self._clock,
        )
