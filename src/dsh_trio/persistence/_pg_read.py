"""Reading a session from the shared store: one snapshot, no lease, no lock.

The header row and the event rows are read in one ``REPEATABLE READ`` transaction,
so a reader sees whole batches only and never waits for (or delays) a writer. The
rows are decoded exactly as the lines of a JSONL log are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ..errors import (
    InvalidSessionIdError,
    SessionCorruptError,
    SessionNotFoundError,
    UnknownEventTypeError,
)
from ..session import LoadedLog
from ..values import (
    SURFACE_TYPES,
    SessionEvent,
    SessionHeader,
    decode_event,
    parse_json_line,
    typed_line_check,
    utf8_ok,
)
from ._gc import gc_paused
from ._jsonl_lines import parse_header
from ._jsonl_paths import check_id
from ._pg_pool import Conn, Pool, fetch_one, import_psycopg

__all__ = ["check_stored_id", "decode_rows", "read_rows", "read_tail"]

_EVENTS: Final = (
    "SELECT seq, line FROM dsh_trio.events WHERE session_id = %s ORDER BY seq"
)


def check_stored_id(session_id: object) -> None:
    """Refuse an id the server cannot hold in a ``text`` column.

    What :func:`check_id` refuses, and an id holding a NUL or a lone surrogate:
    PostgreSQL text holds neither (a JSONL log can, escaped, but such a log cannot
    be imported).

    Raises:
        InvalidSessionIdError: the id is empty, not a string, or not storable.
    """
    check_id(session_id)
    assert isinstance(session_id, str)
    if "\x00" in session_id:
        raise InvalidSessionIdError(
            f"session id {session_id[:40]!r} holds a NUL character, which "
            "PostgreSQL text cannot store"
        )
    if not utf8_ok(session_id):
        raise InvalidSessionIdError(
            f"session id {session_id[:40]!r} holds a lone surrogate, which UTF-8 "
            "cannot encode"
        )


def read_rows(
    pool: Pool, conn: Conn, session_id: str
) -> tuple[SessionHeader, list[bytes]]:
    """The parsed header and the event lines (UTF-8) of ``session_id``, in seq order (blocking).

    Raises:
        SessionNotFoundError: nothing is stored under the id.
        SessionFormatError, SessionCorruptError: the header row is not readable.
        SessionCorruptError: the event rows are not contiguous from seq 0.
    """
    where = f'stored session "{session_id}"'
    with conn.transaction():
        pool.execute(conn, "read", "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        row = fetch_one(
            pool.execute(
                conn,
                "read",
                "SELECT header FROM dsh_trio.sessions WHERE id = %s",
                (session_id,),
            )
        )
        if row is None:
            raise SessionNotFoundError(session_id)
        header = parse_header(str(row[0]).encode("utf-8"), where, session_id)
        lines: list[bytes] = []
        cursor = conn.cursor()
        # The lines as the bytes the server sends: no decoding, as a file read.
        cursor.adapters.register_loader("text", _raw_loader())
        pool.count("read")
        for seq, line in cursor.execute(_EVENTS, (session_id,)):
            if seq != len(lines):
                raise SessionCorruptError(
                    f"{where}: event {len(lines)} is missing (the next stored row is "
                    f"seq {seq}); the store is left unchanged",
                    seq=len(lines),
                )
            lines.append(line)
    return header, lines


_RAW: list[type] = []


def _raw_loader() -> type:
    """A psycopg loader giving a ``text`` column as its UTF-8 bytes."""
    if not _RAW:
        psycopg = import_psycopg()

        class RawText(psycopg.adapt.Loader):  # type: ignore[misc, name-defined]
            def load(self, data: bytes | bytearray | memoryview) -> bytes:
                return bytes(data)

        _RAW.append(RawText)
    return _RAW[0]


def decode_rows(
    header: SessionHeader, lines: list[bytes], session_id: str
) -> Sequence[SessionEvent]:
    """Decode event lines as a JSONL load decodes a log's lines (blocking, CPU).

    Raises:
        SessionCorruptError: a line is not JSON or not a valid event (``seq``
            names it; ``line`` is where it would be in a JSONL log).
    """
    where = f'stored session "{session_id}"'
    events = LoadedLog()
    typed = typed_line_check()  # the common row in one typed decode, if it can
    with gc_paused():
        for seq, line in enumerate(lines):
            if typed is not None:
                found = typed(line)
                if found is not None and found[1] == seq:
                    events.admit_line(found[0], found[3], line)
                    continue
            try:
                obj = parse_json_line(line)
            except (ValueError, RecursionError) as exc:
                raise SessionCorruptError(
                    f"{where}, seq {seq}: the row is not JSON ({exc})",
                    seq=seq,
                    line=seq + 2,
                ) from exc
            try:
                event, checked = decode_event(obj, seq)
            except UnknownEventTypeError as exc:
                raise UnknownEventTypeError(
                    f"{where}, seq {seq}: {exc}; the session is left unchanged",
                    event_type=exc.event_type,
                    seq=seq,
                    line=seq + 2,
                ) from exc
            except (SessionCorruptError, RecursionError) as exc:
                raise SessionCorruptError(
                    f"{where}, seq {seq}: {exc}; the row is not a valid event",
                    seq=seq,
                    line=seq + 2,
                ) from exc
            if event.surface_op is None and event.type in SURFACE_TYPES:
                raise SessionCorruptError(
                    f"{where}, seq {seq}: a {event.type} event without its surfaceOp",
                    seq=seq,
                    line=seq + 2,
                )
            events.admit(event, line, checked)
    del header
    return events


def read_tail(
    pool: Pool, conn: Conn, session_id: str, start: int
) -> list[SessionEvent]:
    """The stored events of ``session_id`` from seq ``start`` on, decoded (blocking).

    A session not stored yet has none. Rows are committed whole batches, so the
    events end at a batch boundary.

    Raises:
        SessionCorruptError: a row is not a valid event.
    """
    where = f'stored session "{session_id}"'
    cursor = conn.cursor()
    cursor.adapters.register_loader("text", _raw_loader())
    pool.count("read")
    events: list[SessionEvent] = []
    rows = cursor.execute(
        "SELECT seq, line FROM dsh_trio.events WHERE session_id = %s AND seq >= %s"
        " ORDER BY seq",
        (session_id, start),
    ).fetchall()
    for seq, line in rows:
        try:
            event, _checked = decode_event(parse_json_line(line), seq)
        except (ValueError, SessionCorruptError, RecursionError) as exc:
            raise SessionCorruptError(
                f"{where}, seq {seq}: {exc}; the row is not a valid event",
                seq=seq,
                line=seq + 2,
            ) from exc
        events.append(event)
    return events
