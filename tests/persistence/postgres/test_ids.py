"""The shared store takes exactly the session ids a JSONL store takes (so every
session it holds exports as a log), and refuses what PostgreSQL text cannot hold
with InvalidSessionIdError, never a raw driver error."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.errors import InvalidSessionIdError
from dsh_trio.persistence.postgres import (
    PostgresPersistence,
    export_session,
    import_session,
)
from dsh_trio.values import SessionHeader, SessionId

Stores = Callable[..., PostgresPersistence]


def header(sid: str) -> SessionHeader:
    return SessionHeader(id=SessionId(sid), created_at=1)


async def outcome(persistence: dsh.SessionPersistence, sid: str) -> str:
    """What creating (and storing) session ``sid`` gives: ``"stored"`` or the refusal."""
    try:
        writer = await persistence.create(header(sid))
    except InvalidSessionIdError as exc:
        return f"refused: {exc}"
    session = dsh.Session.create(sid)
    session.append("test/mark", {"i": 0}, ignorable=True)
    try:
        await writer.append(list(session.events), sync=True)
    finally:
        await writer.close()
    return "stored"


@pytest.mark.parametrize(
    "sid",
    ["x" * 255, "x" * 256, "x" * 300, "x" * 10_000, "é" * 51, "é" * 52, "../x"],
    ids=["255", "256", "300", "10000", "51-encoded", "52-encoded", "traversal"],
)
async def test_the_store_takes_the_ids_a_jsonl_store_takes(
    stores: Stores, tmp_path: Path, sid: str
) -> None:
    store = stores()
    jsonl = dsh.JsonlPersistence(tmp_path / "jsonl")
    assert await outcome(store, sid) == await outcome(jsonl, sid)
    if await store.exists(sid):  # whatever it stored exports as a log
        path = await export_session(store, sid, tmp_path / "exported")
        assert await trio.Path(path).is_file()


async def test_a_nul_in_an_id_is_refused_clearly_everywhere(
    stores: Stores, tmp_path: Path
) -> None:
    store = stores()
    sid = "a\x00b"
    with pytest.raises(InvalidSessionIdError, match="NUL"):
        await store.create(header(sid))
    for call in (store.open, store.exists, store.read):
        with pytest.raises(InvalidSessionIdError, match="NUL"):
            await call(sid)
    with pytest.raises(InvalidSessionIdError, match="NUL"):
        await export_session(store, sid, tmp_path / "exported")
    with pytest.raises(InvalidSessionIdError, match="surrogate"):
        await store.exists("a\udc00")
    # A JSONL log may hold such an id (escaped); it is refused on import, and
    # nothing is stored.
    jsonl = dsh.JsonlPersistence(tmp_path / "jsonl")
    assert await outcome(jsonl, sid) == "stored"
    log = jsonl.path_for(header(sid))
    with pytest.raises(InvalidSessionIdError, match="NUL"):
        await import_session(store, log)
    assert await store.list() == []
