"""What an event must be to enter a session log, surface rules aside.

``Session.append`` checks the data of a new event (:func:`typed_event_data`) and its
``source_event_seqs`` (:func:`check_sources`), and warns once about an event type a
reader would refuse (:func:`warn_undeclared`); ``Session.restore`` and seeds also check
the envelope of an existing event (:func:`admitted`). Every refusal is an
:class:`InvalidEventError` naming the seq and type (:func:`invalid`); the surface
rules of :mod:`dsh_trio.session._surface` use the same error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

from ..errors import InvalidEventError, SessionCorruptError
from ..values import (
    EVENT_DATA_TYPES,
    MAX_SAFE_INTEGER,
    AssistantAttemptData,
    AssistantMessageData,
    DataShapeError,
    EventData,
    JsonValue,
    SessionEvent,
    builder,
    check_json,
    check_json_value,
    checker,
    typed_data,
)
from ._stream import expand_stream

__all__ = [
    "admitted",
    "check_sources",
    "invalid",
    "new_event",
    "typed_event_data",
    "warn_undeclared",
]

_logger = logging.getLogger("dsh_trio")

_MAX: Final = MAX_SAFE_INTEGER


def _event_builder() -> Callable[..., SessionEvent]:
    names = tuple(f.name for f in attrs.fields(SessionEvent))
    assert names == (
        "seq",
        "time",
        "type",
        "data",
        "surface_op",
        "source_event_seqs",
        "ignorable",
    ), names
    return builder(SessionEvent)


#: ``SessionEvent(seq, time, type, data, surface_op, source_event_seqs, ignorable)``
#: for an event whose parts the append checked (see ``values.builder``): every append
#: builds its event with it.
new_event: Final = _event_builder()


_CHECKERS: dict[str, Callable[[Any], None]] = {
    name: checker(cls) for name, cls in EVENT_DATA_TYPES.items()
}


def invalid(seq: int, type_: str | None, what: str) -> InvalidEventError:
    """The error refusing event ``seq`` of type ``type_`` because of ``what``."""
    where = f'session event "{type_}"' if type_ is not None else "session event"
    return InvalidEventError(f"{where} at seq {seq}: {what}", seq=seq, type=type_)


def typed_event_data(type_: str, data: object, seq: int) -> EventData | JsonValue:
    """The data an event of ``type_`` logs for ``data``, checked.

    A known type takes its typed value as it is (shared, checked in place) or its
    JSON shape (structured); an unknown type takes lossless JSON, copied.

    Raises:
        InvalidEventError: the data does not fit the type.
    """
    check = _CHECKERS.get(type_)
    if check is None:
        try:
            return check_json(data, "data")
        except TypeError as exc:
            raise invalid(seq, type_, f"carries non-JSON data: {exc}") from None
    if data.__class__ is not EVENT_DATA_TYPES[type_]:
        data = typed_data(type_, data, seq=seq)
    try:
        check(data)
    except DataShapeError as exc:
        raise invalid(
            seq, type_, f"carries invalid data: {exc.describe('data')}"
        ) from None
    return data


#: The undeclared event types an append has warned about (once each).
_warned: set[str] = set()


def warn_undeclared(type_: str) -> None:
    """Log, once per type, that an appended event of ``type_`` (neither known,
    declared nor ignorable) makes a stored log holding it refused on load."""
    if type_ in _warned:
        return
    _warned.add(type_)
    _logger.warning(
        'session event type "%s" is not known, not declared and not marked '
        "ignorable: a stored log holding it will be refused on load; append it with "
        "ignorable=True, or declare it with "
        'dsh_trio.session.register_event_type("%s")',
        type_,
        type_,
    )


def check_sources(type_: str, sources: Sequence[int], seq: int) -> tuple[int, ...]:
    """``sources`` as a tuple, checked: non-empty, unique, each an earlier seq.

    Raises:
        InvalidEventError: naming the first bad entry.
    """
    if not isinstance(sources, (tuple, list)):
        raise invalid(
            seq,
            type_,
            f"source_event_seqs must be a tuple or list of ints, got "
            f"{sources.__class__.__name__}",
        )
    out = tuple(sources)
    if not out:
        raise invalid(seq, type_, "source_event_seqs must be non-empty when present")
    for k, s in enumerate(out):
        if s.__class__ is not int or not 0 <= s < seq:
            raise invalid(
                seq,
                type_,
                f"source_event_seqs[{k}] must be an earlier seq (0 <= s < {seq}), "
                f"got {s!r:.40}",
            )
    if len(set(out)) != len(out):
        raise invalid(seq, type_, f"source_event_seqs has duplicates: {list(out)}")
    return out


def admitted(
    event: SessionEvent, index: int, *, data_checked: bool = False
) -> SessionEvent:
    """An existing event (of a seed or a persisted log) checked for position ``index``.

    Checks the class, the type, ``seq == index``, a safe-integer ``time``, the data
    (structured into its typed value when given as JSON) and, for
    ``assistant/message`` and ``assistant/attempt``, that the stream expands.
    ``source_event_seqs`` and the surface rules are the caller's to check. With
    ``data_checked`` the data is known to be of its type's class and to have passed
    its checker already (it came from the validating decoder of a log), so only the
    envelope is checked (the data's checker also covers its stream).

    Returns:
        The event, or a copy holding the typed data.

    Raises:
        InvalidEventError: the first problem found.
    """
    if event.__class__ is not SessionEvent:
        raise invalid(
            index, None, f"must be a SessionEvent, got {type(event).__name__}"
        )
    type_ = event.type
    if type_.__class__ is not str or not type_:
        raise invalid(index, None, f"type must be a non-empty str, got {type_!r:.60}")
    if event.seq != index or event.seq.__class__ is not int:
        raise invalid(
            index,
            type_,
            f"events must be contiguous from seq 0; found seq {event.seq!r:.40} "
            f"at position {index}",
        )
    if event.time.__class__ is not int or not -_MAX <= event.time <= _MAX:
        raise invalid(
            index, type_, f"time must be a safe integer, got {event.time!r:.40}"
        )
    data = event.data
    cls = EVENT_DATA_TYPES.get(type_)
    if cls is None:
        try:
            check_json_value(data)
        except DataShapeError as exc:
            raise invalid(
                index, type_, f"carries non-JSON data: {exc.describe('data')}"
            ) from None
        return event
    if data_checked and data.__class__ is cls:
        # The checker of its class passed, which covers every stream record: the
        # stream expands.
        return event
    typed = typed_event_data(type_, data, index)
    if typed is not data:
        event = attrs.evolve(event, data=typed)
    if cls is AssistantMessageData or cls is AssistantAttemptData:
        try:
            expand_stream(event.data_as(cls).stream)
        except SessionCorruptError as exc:
            raise invalid(index, type_, f"data.stream: {exc}") from None
    return event
