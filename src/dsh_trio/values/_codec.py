"""Session events and headers to and from their JSON lines (the reference's v3 shapes).

An event line is ``{"type", "seq", "time", "data", "sourceEventSeqs"?, "surfaceOp"?}``
(``sourceEventSeqs`` writes a run of 3 or more consecutive seqs as a range
``[first, last]``, as the reference does, and reads both forms; ``"ignorable": true``
is kept on the event and written back; a row of a type that is not known
(:mod:`._event_types`: the core types, the reference's catalogue, the types an
application declared) is refused unless marked ignorable, as the reference refuses
it, and so are the obsolete ``tool/code-dispatch`` and ``tool/code-dispatch-start``
rows);
``data`` of a known type goes through the converter of
:mod:`dsh_trio.values._converter`, data of an unknown type is kept as lossless JSON.
The header line is ``{"type": "session", ...}``. Outside data enters through
:func:`event_from_json` / :func:`header_from_json` (files) or :func:`typed_data`
(``Session.append``) only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, cast

import attrs
import cattrs

from ..errors import InvalidEventError, SessionCorruptError, UnknownEventTypeError
from ._converter import converter, structure
from ._event_data import (
    EVENT_DATA_TYPES,
    SURFACE_TYPES,
    EventData,
    SessionEvent,
    SessionHeader,
    SurfaceOp,
    SurfaceReplace,
)
from ._event_types import is_known_event_type
from ._fast import Slow, direct_setters, fast_data
from ._ids import JsonValue
from ._json import check_json
from ._slots import builder
from ._wire import ENVELOPE

__all__ = [
    "event_to_json",
    "event_from_json",
    "decode_event",
    "header_to_json",
    "header_from_json",
    "data_from_json",
    "typed_data",
]


# --------------------------------------------------------------------------- surface ops


def _unstructure_surface_op(value: SurfaceOp) -> JsonValue:
    if value == "append":
        return "append"
    assert isinstance(value, SurfaceReplace)
    return {"op": "replace", "startSeq": value.start_seq, "endSeq": value.end_seq}


def _structure_surface_op(value: Any) -> SurfaceOp:
    if value == "append":
        return "append"
    if (
        isinstance(value, dict)
        and set(value) == {"op", "startSeq", "endSeq"}
        and value["op"] == "replace"
    ):
        s, e = value["startSeq"], value["endSeq"]
        if type(s) is int and type(e) is int:
            return SurfaceReplace(s, e)
    raise ValueError(
        f'surfaceOp must be "append" or {{"op": "replace", "startSeq", "endSeq"}}, got {value!r}'
    )


# --------------------------------------------------------------------------- events and headers


def data_from_json(type_: str, data: object) -> EventData | JsonValue:
    """Turn the ``data`` of an event of ``type_`` into its typed value.

    Unknown types keep (a private copy of) their JSON verbatim.
    """
    cls = EVENT_DATA_TYPES.get(type_)
    if cls is None:
        return check_json(data, "data")
    return structure(data, cls)


def event_to_json(event: SessionEvent) -> dict[str, JsonValue]:
    """The JSON object of one log line.

    Its keys in the order the reference's ``Session.append`` builds an event
    (:data:`~._wire.ENVELOPE`): ``type, seq, time, data, sourceEventSeqs?, surfaceOp?,
    ignorable?``.
    """
    data = event.data
    out: dict[str, JsonValue] = {
        "type": event.type,
        "seq": event.seq,
        "time": event.time,
        "data": cast(JsonValue, converter.unstructure(data))
        if attrs.has(type(data))
        else cast(JsonValue, data),
    }
    if event.source_event_seqs is not None:
        out["sourceEventSeqs"] = _compress_sources(event.source_event_seqs)
    if event.surface_op is not None:
        out["surfaceOp"] = _unstructure_surface_op(event.surface_op)
    if event.ignorable:
        out["ignorable"] = True
    return out


def _compress_sources(seqs: tuple[int, ...]) -> JsonValue:
    """``seqs`` as the reference writes them: a run of 3 or more consecutive
    ascending seqs as ``[first, last]``, any other seq as itself; seqs that do not
    strictly increase are all written as themselves."""
    out: list[JsonValue] = []
    i, n = 0, len(seqs)
    if any(seqs[k] >= seqs[k + 1] for k in range(n - 1)):
        return list(seqs)
    while i < n:
        j = i
        while j + 1 < n and seqs[j + 1] == seqs[j] + 1:
            j += 1
        if j - i >= 2:
            out.append([seqs[i], seqs[j]])
            i = j + 1
        else:
            out.append(seqs[i])
            i += 1
    return out


def _expand_sources(raw: object) -> tuple[int, ...]:
    """The seqs of a ``sourceEventSeqs`` that holds ranges ``[first, last]``
    (inclusive, ``first < last``) besides plain seqs."""
    if not isinstance(raw, list):
        raise ValueError("sourceEventSeqs must be a list")
    out: list[int] = []
    for k, item in enumerate(raw):
        if type(item) is int:
            out.append(item)
        elif (
            isinstance(item, list)
            and len(item) == 2
            and type(item[0]) is int
            and type(item[1]) is int
            and 0 <= item[0] < item[1]
        ):
            out.extend(range(item[0], item[1] + 1))
        else:
            raise ValueError(
                f"sourceEventSeqs[{k}] must be an integer or a range [first, last] "
                f"with first < last, got {item!r}"
            )
    return tuple(out)


_EVENT_KEYS = frozenset(ENVELOPE)

#: Obsolete event types the reference refuses unless marked ``"ignorable": true``.
_OBSOLETE_TYPES = frozenset({"tool/code-dispatch", "tool/code-dispatch-start"})


def event_from_json(obj: object, *, expected_seq: int | None = None) -> SessionEvent:
    """Structure one log line's object into a :class:`SessionEvent`.

    For reading a line on its own (a viewer): an event of a type that is not known
    is taken, marked ignorable or not; restoring a session from a log refuses it
    (:func:`decode_event`).

    Raises:
        SessionCorruptError: the object is not a valid event (``seq`` names it when known).
    """
    return decode_event(obj, expected_seq, known_types=False)[0]


def _event_builder() -> Callable[..., SessionEvent]:
    """``SessionEvent(...)`` from its seven fields in order, without the
    ``__init__`` call when it only stores them (a log holds many events): the
    event's :func:`builder`."""
    names: tuple[str, ...] = ("seq", "time", "type", "data", "surface_op")
    names += ("source_event_seqs", "ignorable")
    setters = direct_setters(SessionEvent)
    if setters is None or tuple(setters) != names:  # pragma: no cover
        return lambda *values: SessionEvent(**dict(zip(names, values, strict=True)))
    return builder(SessionEvent)


_new_event: Final = _event_builder()


def decode_event(
    obj: object, expected_seq: int | None = None, *, known_types: bool = True
) -> tuple[SessionEvent, bool]:
    """:func:`event_from_json`, and whether the event's data passed its checkers too.

    The data of the common event types goes through the generated decoders of
    :mod:`._fast`, which also apply the checks ``Session.restore`` makes of typed
    data; what they do not take goes through the general converter (same values,
    same errors), and is then reported as not checked (``False``).

    With ``known_types`` (the log readers' way), an event of a type that is not
    known (:func:`~._event_types.is_known_event_type`) and not marked
    ``"ignorable": true`` is refused, as the reference refuses it: a reader must
    not skip an event that may change the meaning of the log.

    Raises:
        SessionCorruptError: as :func:`event_from_json`.
        UnknownEventTypeError: with ``known_types``, an unknown type not marked
            ``"ignorable": true`` (absent or ``false``; the message names the type).
    """
    if obj.__class__ is dict:
        # The common line, checked in one pass: the four keys (and an appending
        # surfaceOp on a surface event), data the fast decoder takes. Anything else
        # takes the full path below, which gives the same event or the error.
        n = len(obj)
        get = obj.get
        seq, type_, time_ = get("seq"), get("type"), get("time")
        op = get("surfaceOp") if n == 5 else None
        if (
            (n == 4 or (op == "append" and op.__class__ is str))
            and seq.__class__ is int
            and seq >= 0
            and (expected_seq is None or seq == expected_seq)
            and time_.__class__ is int
            and type_.__class__ is str
            and "data" in obj
            and (op is None or type_ in SURFACE_TYPES)
        ):
            try:
                fast = fast_data(type_, get("data"))
            except Slow:
                pass
            else:
                # ``fast_data`` takes known, non-empty types only (obsolete ones
                # included are unknown to it).
                return _new_event(
                    seq,
                    time_,
                    type_,
                    fast,
                    None if op is None else "append",
                    None,
                    False,
                ), True
    seq = obj.get("seq") if isinstance(obj, dict) else None
    where_seq = seq if type(seq) is int else expected_seq
    try:
        if not isinstance(obj, dict):
            raise TypeError(f"an event must be an object, got {type(obj).__name__}")
        if not _EVENT_KEYS.issuperset(obj):
            extra = set(obj) - _EVENT_KEYS
            raise ValueError(f"unknown envelope keys {sorted(extra)}")
        type_, time_ = obj.get("type"), obj.get("time")
        if type(type_) is not str or not type_:
            raise ValueError("type must be a non-empty string")
        if type(seq) is not int or seq < 0:
            raise ValueError("seq must be a non-negative integer")
        if expected_seq is not None and seq != expected_seq:
            raise ValueError(
                f"seq {seq} breaks the contiguous order (expected {expected_seq})"
            )
        if type(time_) is not int:
            raise ValueError("time must be an integer (epoch milliseconds)")
        if "data" not in obj:
            raise ValueError("data is missing")
        ignorable = obj.get("ignorable", False)
        if type(ignorable) is not bool:
            raise ValueError(f"ignorable must be a boolean, got {ignorable!r}")
        if not ignorable and type_ not in EVENT_DATA_TYPES:
            if type_ in _OBSOLETE_TYPES:
                raise ValueError(
                    f'the obsolete event type "{type_}" is refused unless marked '
                    '"ignorable": true'
                )
            if known_types and not is_known_event_type(type_):
                raise UnknownEventTypeError(
                    _unknown_type(type_, obj.get("ignorable")),
                    event_type=type_,
                    seq=seq,
                )
        raw_data = obj["data"]
        checked = True
        try:
            data: EventData | JsonValue = fast_data(type_, raw_data)
        except Slow:
            data = data_from_json(type_, raw_data)
            # Unknown types are copied by the lossless-JSON rules, which is their check.
            checked = type_ not in EVENT_DATA_TYPES
        surface_op: SurfaceOp | None = None
        if "surfaceOp" in obj:
            raw_op = obj["surfaceOp"]
            surface_op = (
                "append" if raw_op == "append" else _structure_surface_op(raw_op)
            )
        sources: tuple[int, ...] | None = None
        if "sourceEventSeqs" in obj:
            raw = obj["sourceEventSeqs"]
            if isinstance(raw, list) and all(type(s) is int for s in raw):
                sources = tuple(raw)
            else:
                sources = _expand_sources(raw)
        if (
            surface_op is not None or sources is not None
        ) and type_ not in SURFACE_TYPES:
            raise ValueError(f"{type_} may not carry surfaceOp or sourceEventSeqs")
        return _new_event(
            seq, time_, type_, data, surface_op, sources, ignorable
        ), checked
    except SessionCorruptError:
        raise
    except (TypeError, ValueError, KeyError, cattrs.BaseValidationError) as exc:
        raise SessionCorruptError(
            f"malformed session event at seq {where_seq}: {_describe(exc)}",
            seq=where_seq,
        ) from exc


def _unknown_type(type_: str, marked: object) -> str:
    marker = (
        'is marked "ignorable": false'
        if marked is False
        else 'is not marked "ignorable": true'
    )
    return (
        f'the event type "{type_}" is unknown and the event {marker}, '
        "so it may not be skipped; if an application writes it, declare it with "
        f"dsh_trio.session.register_event_type({type_!r}) (dsh-trio: "
        f"--event-type {type_}) before loading"
    )


def header_to_json(header: SessionHeader) -> dict[str, JsonValue]:
    """The JSON object of a session file's header line (``{"type": "session", ...}``)."""
    body = cast(dict[str, JsonValue], converter.unstructure(header))
    return {"type": "session", **body}


def header_from_json(obj: object) -> SessionHeader:
    """Structure a header line's object (the version must already have been checked)."""
    try:
        if not isinstance(obj, dict) or obj.get("type") != "session":
            raise ValueError('the header line must be an object with "type": "session"')
        body = {k: v for k, v in obj.items() if k != "type"}
        return structure(body, SessionHeader)
    except (TypeError, ValueError, KeyError, cattrs.BaseValidationError) as exc:
        raise SessionCorruptError(
            f"malformed session header: {_describe(exc)}"
        ) from exc


def _describe(exc: BaseException) -> str:
    if isinstance(exc, cattrs.BaseValidationError):
        msgs = cattrs.transform_error(exc)
        return "; ".join(msgs)
    return str(exc)


def typed_data(type_: str, data: object, *, seq: int) -> EventData | JsonValue:
    """Validate ``data`` handed to ``Session.append`` for an event of ``type_``.

    Known types take their typed value (or its JSON shape, which is structured);
    unknown types take lossless JSON, copied.

    Raises:
        InvalidEventError: the data does not fit.
    """
    cls = EVENT_DATA_TYPES.get(type_)
    try:
        if cls is None:
            return check_json(data, "data")
        if type(data) is cls:
            return data
        if attrs.has(type(data)):
            raise TypeError(f"expected {cls.__name__}, got {type(data).__name__}")
        return structure(data, cls)
    except (TypeError, ValueError, cattrs.BaseValidationError) as exc:
        raise InvalidEventError(
            f'session event "{type_}" at seq {seq} carries invalid data: {_describe(exc)}',
            seq=seq,
            type=type_,
        ) from exc
