"""The shared store against a real server: the protocol, leases, fencing, reads."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.errors import (
    PersistenceSeqError,
    SessionExistsError,
    SessionLeaseError,
    SessionLockedError,
    SessionNotFoundError,
)
from dsh_trio.persistence import load_session, persist_new_session
from dsh_trio.persistence._pg_pool import Pool
from dsh_trio.persistence._pg_writer import PostgresWriter
from dsh_trio.persistence.postgres import PostgresPersistence
from dsh_trio.session import Session
from dsh_trio.testing import ScriptedModel, reply
from dsh_trio.values import SessionHeader, SessionId

Stores = Callable[..., PostgresPersistence]
OPTIONS = dsh.AgentOptions(provider="scripted", model="m")


def _session(sid: str, marks: int = 2) -> Session:
    session = Session.create(sid)
    for i in range(marks):
        session.append("test/mark", {"i": i}, ignorable=True)
    return session


async def _expire_leases(store: PostgresPersistence) -> None:
    """Move the store's heartbeat expiry into the past, as a stalled process lets it."""
    await store._pool.run(
        lambda conn: conn.execute(
            "UPDATE dsh_trio.owners SET expires_at = now() - interval '1 s'"
            " WHERE owner = %s",
            (store._heartbeat.owner,),
        )
    )


async def test_create_append_open_round_trip_and_reads_take_no_lease(
    stores: Stores,
) -> None:
    store = stores()
    session = _session("s1")
    writer = await persist_new_session(store, session)
    assert isinstance(writer, PostgresWriter)
    assert writer.durable_seq == 2
    # Reads while the writer holds the lease: neither blocked nor blocking.
    assert await store.exists("s1")
    assert not await store.exists("nope")
    assert [h.id for h in await store.list()] == ["s1"]
    header, events = await store.read("s1")
    assert header == session.header
    assert list(events) == list(session.events)
    more = session.append("test/mark", {"i": 2}, ignorable=True)
    await writer.append([more], sync=False)
    await writer.close()
    other = stores()
    writer2, events2 = await other.open("s1")
    assert list(events2) == list(session.events)
    assert writer2.token > writer.token
    await writer2.close()


async def test_second_writer_is_refused_until_the_first_closes(stores: Stores) -> None:
    one, two = stores(), stores()
    writer = await persist_new_session(one, _session("s1"))
    with pytest.raises(
        SessionLeaseError, match='session "s1" is being written'
    ) as info:
        await two.open("s1")
    assert isinstance(info.value, SessionLockedError)
    assert info.value.session_id == "s1"
    with pytest.raises(SessionLeaseError):
        await one.open("s1")  # the same process too
    with pytest.raises(SessionExistsError):
        await two.create(SessionHeader(id=SessionId("s1"), created_at=1))
    await writer.close()  # released at once
    writer2, _ = await two.open("s1")
    await writer2.close()


async def test_a_new_id_is_claimed_before_its_first_append(stores: Stores) -> None:
    one, two = stores(), stores()
    header = SessionHeader(id=SessionId("fresh"), created_at=1)
    writer = await one.create(header)
    with pytest.raises(SessionLeaseError):
        await two.create(header)
    assert not await two.exists("fresh")
    await writer.close()
    with pytest.raises(SessionNotFoundError):
        await two.open("fresh")  # nothing was stored


async def test_a_taken_over_token_can_never_append_again(stores: Stores) -> None:
    zombie_store = stores()
    session = _session("s1")
    zombie = await persist_new_session(zombie_store, session)
    assert isinstance(zombie, PostgresWriter)
    zombie_store._heartbeat.release()  # its process stalls: no more renewals
    await _expire_leases(zombie_store)  # ... until its lease runs out
    new_store = stores()
    writer, _ = await new_store.open("s1")
    assert writer.token > zombie.token
    late = session.append("test/mark", {"i": "zombie"}, ignorable=True)
    with pytest.raises(SessionLeaseError, match=r"token \d+\) was taken over"):
        await zombie.append([late], sync=True)
    assert zombie.durable_seq == 2
    _, stored = await new_store.read("s1")
    assert len(stored) == 2
    await writer.close()
    await zombie.close()  # releasing a lost lease leaves the new one alone


async def test_append_checks_seqs_and_closed_writers(stores: Stores) -> None:
    store = stores()
    session = _session("s1")
    writer = await persist_new_session(store, session)
    bad = session.append("test/mark", {}, ignorable=True)
    with pytest.raises(PersistenceSeqError):
        await writer.append([bad, bad], sync=True)
    await writer.close()
    await writer.close()
    with pytest.raises(trio.ClosedResourceError):
        await writer.append([bad], sync=True)


async def test_an_agent_runs_on_the_store_and_dispose_releases_the_lease(
    stores: Stores,
) -> None:
    store = stores()
    other = stores()
    model = ScriptedModel(reply("one"), reply("two"))
    async with dsh.open_runtime(models={"scripted": model}, persistence=store) as rt:
        handle = await rt.agents.create("a1", options=OPTIONS)
        handle.agent.followup(dsh.user_message("hi"))
        await handle.agent.when_idle()
        with pytest.raises(SessionLeaseError):
            await other.open("a1")
        await handle.dispose()
        writer, events = await other.open("a1")  # at once: no wait for expiry
        assert [e.type for e in events].count("turn/end") == 1
        await writer.close()
        resumed = await rt.agents.resume("a1", options=OPTIONS)
        resumed.agent.followup(dsh.user_message("again"))
        await resumed.agent.when_idle()
        ends = [e for e in resumed.agent.session.events if e.type == "turn/end"]
        assert [e.data.turn for e in ends] == [1, 2]
    assert store._heartbeat.holds == 0


async def test_a_lost_lease_is_reported_as_a_persistence_failure(
    stores: Stores,
) -> None:
    store = stores()
    model = ScriptedModel(reply("one"), reply("two"))
    async with dsh.open_runtime(models={"scripted": model}, persistence=store) as rt:
        handle = await rt.agents.create("a1", options=OPTIONS)
        handle.agent.followup(dsh.user_message("hi"))
        await handle.agent.when_idle()
        await handle.agent.flush()
        # Another process takes the session over (its lease was forced to expire).
        await _expire_leases(store)
        thief, _ = await stores().open("a1")
        handle.agent.followup(dsh.user_message("again"))
        await handle.agent.when_idle()
        with pytest.raises(dsh.PersistenceError) as info:
            await handle.agent.flush()
        assert isinstance(info.value.__cause__, SessionLeaseError)
        await thief.close()
        with pytest.raises(BaseException):  # noqa: B017  # disposal reports the unwritten events
            await handle.dispose()
    _, events = await stores().read("a1")
    assert [e.type for e in events].count("turn/end") == 1  # nothing half-written


async def test_load_session_on_the_store(stores: Stores) -> None:
    store = stores()
    session = Session.create("s1")
    session.append("turn/start", {"turn": 1})
    writer = await persist_new_session(store, session)
    await writer.close()
    restored, writer = await load_session(store, "s1")
    assert [e.type for e in restored.events][-1] == "turn/end"
    await writer.close()
    _, events = await store.read("s1")
    assert [e.type for e in events][-1] == "turn/end"  # the repair was written


async def test_cancel_waits_for_the_transaction_and_reads_do_not_wait_for_it(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores()
    session = _session("s1")
    writer = await persist_new_session(store, session)
    assert isinstance(writer, PostgresWriter)
    entered, release = trio.Event(), threading.Event()
    real = Pool.count

    def held(self: Pool, kind: str, n: int = 1) -> None:
        real(self, kind, n)
        if self is store._pool and kind == "append":
            # Inside the batch's transaction, its locks held.
            trio.from_thread.run_sync(entered.set)
            release.wait()

    monkeypatch.setattr(Pool, "count", held)
    more = session.append("test/mark", {"i": 2}, ignorable=True)
    outcome: list[str] = []

    async def append() -> None:
        with trio.CancelScope() as scope:
            scope_box.append(scope)
            await writer.append([more], sync=True)
            outcome.append("returned")  # the cancel arrives at the next checkpoint
            await trio.lowlevel.checkpoint()
            outcome.append("not cancelled")
        outcome.append("cancelled" if scope.cancelled_caught else "done")

    scope_box: list[trio.CancelScope] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(append)
        try:
            await entered.wait()
            scope_box[0].cancel()
            # Reads see the last committed state, never waiting for the open batch.
            other = stores()
            _, events = await other.read("s1")
            assert len(events) == 2
            assert [h.id for h in await other.list()] == ["s1"]
            assert await other.exists("s1")
        finally:
            release.set()
    assert outcome == ["returned", "cancelled"]
    assert writer.durable_seq == 3
    _, events = await store.read("s1")
    assert len(events) == 3  # the batch was written, whole
    await writer.close()
