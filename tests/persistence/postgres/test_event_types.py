"""The shared store reads an application's events as a JSONL log does.

A row of a type the reader does not know loads only when marked ignorable or
declared; otherwise loading refuses the session, naming the type, and the stored
rows stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dsh_trio.errors import (
    SessionCorruptError,
    SessionFormatError,
    UnknownEventTypeError,
)
from dsh_trio.persistence import load_session, persist_new_session
from dsh_trio.persistence.postgres import PostgresPersistence
from dsh_trio.session import Session, register_event_type
from dsh_trio.values import Completed, TurnEnd, TurnStart

Stores = Callable[..., PostgresPersistence]


async def test_an_ignorable_row_loads_an_unknown_one_is_refused_until_declared(
    stores: Stores,
) -> None:
    store = stores()
    session = Session.create("app")
    session.append("turn/start", TurnStart(1))
    session.append("pg-app/ignorable-note", {"n": 1}, ignorable=True)
    session.append("pg-app/charge", {"cents": 120})
    session.append("turn/end", TurnEnd(1, Completed()))
    writer = await persist_new_session(store, session)
    await writer.close()

    with pytest.raises(SessionCorruptError) as refused:
        await load_session(store, "app")
    assert refused.value.seq == 2
    assert 'event type "pg-app/charge" is unknown' in str(refused.value)

    register_event_type("pg-app/charge")
    loaded, writer = await load_session(store, "app")
    await writer.close()
    assert list(loaded.events) == list(session.events)  # nothing was cut or added
    assert loaded.events[1].ignorable and not loaded.events[2].ignorable
    assert loaded.events[2].data == {"cents": 120}


async def test_a_row_marked_ignorable_false_is_a_format_refusal(stores: Stores) -> None:
    """``"ignorable": false`` is no marker: the row's unknown type refuses the
    session as a JSONL log's line does (the reference's format refusal), by seq,
    line and type, and the rows stay as they are."""
    store = stores()
    session = Session.create("app")
    session.append("turn/start", TurnStart(1))
    session.append("pg-app/unmarked", {"n": 1}, ignorable=True)
    session.append("turn/end", TurnEnd(1, Completed()))
    writer = await persist_new_session(store, session)
    await writer.close()

    def unmark(conn: Any) -> list[str]:
        conn.execute(
            "UPDATE dsh_trio.events SET line = replace(line, "
            "'\"ignorable\":true', '\"ignorable\":false') "
            "WHERE session_id = 'app' AND seq = 1"
        )
        rows = conn.execute(
            "SELECT line FROM dsh_trio.events WHERE session_id = 'app' ORDER BY seq"
        ).fetchall()
        return [row[0] for row in rows]

    rows = await store._pool.run(unmark)
    assert rows[1].endswith('"ignorable":false}')
    with pytest.raises(SessionFormatError) as refused:
        await load_session(store, "app")
    error = refused.value
    assert isinstance(error, UnknownEventTypeError)
    assert isinstance(error, SessionCorruptError)
    assert (error.event_type, error.seq, error.line) == ("pg-app/unmarked", 1, 3)
    assert str(error).startswith(
        'stored session "app", seq 1: the event type "pg-app/unmarked" is unknown '
        'and the event is marked "ignorable": false'
    )

    def lines(conn: Any) -> list[str]:
        found = conn.execute(
            "SELECT line FROM dsh_trio.events WHERE session_id = 'app' ORDER BY seq"
        ).fetchall()
        return [row[0] for row in found]

    assert await store._pool.run(lines) == rows  # nothing cut or added
