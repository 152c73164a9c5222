"""The shared store reads an application's events as a JSONL log does.

A row of a type the reader does not know loads only when marked ignorable or
declared; otherwise loading refuses the session, naming the type, and the stored
rows stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dsh_trio.errors import SessionCorruptError
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
