"""Mail to sessions on the shared store: posting, exactly-once delivery, fencing, waits."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.errors import PersistenceNotConfiguredError, TurnFailedError
from dsh_trio.persistence import JsonlPersistence
from dsh_trio.persistence.postgres import PostgresPersistence
from dsh_trio.testing import ScriptedModel, gate, reply
from dsh_trio.values import Aborted, Completed, HookCancel

Stores = Callable[..., PostgresPersistence]
OPTIONS = dsh.AgentOptions(provider="scripted", model="m")


async def _rows(store: PostgresPersistence, sql: str, *params: object) -> list[tuple]:  # type: ignore[type-arg]
    return await store._pool.run(lambda conn: conn.execute(sql, params).fetchall())


async def _mailbox(store: PostgresPersistence) -> list[tuple]:  # type: ignore[type-arg]
    return await _rows(
        store, "SELECT session_id, kind FROM dsh_trio.mailbox ORDER BY id"
    )


def _claimed(events: list[dsh.SessionEvent], message_id: str) -> int:
    """How many times ``message_id`` was claimed as a user message in ``events``."""
    return sum(
        1
        for e in events
        if e.type == "user/message" and getattr(e.data, "id", None) == message_id
    )


async def test_mail_needs_the_postgres_store(tmp_path: Path) -> None:
    async with dsh.open_runtime(persistence=JsonlPersistence(tmp_path)) as rt:
        for call in (
            rt.sessions.followup("s1", "hi"),
            rt.sessions.steer("s1", "hi"),
            rt.sessions.cancel("s1"),
            rt.sessions.wait("s1", "m1"),
        ):
            with pytest.raises(PersistenceNotConfiguredError, match="PostgreSQL"):
                await call
    async with dsh.open_runtime() as rt:
        with pytest.raises(PersistenceNotConfiguredError, match="PostgreSQL"):
            await rt.sessions.followup("s1", "hi")


async def test_mail_is_durable_before_any_holder_and_delivered_by_the_holder_once(
    stores: Stores,
) -> None:
    sender_store, holder_store = stores(), stores()
    model = ScriptedModel(reply("one"), reply("two"))
    async with (
        dsh.open_runtime(persistence=sender_store) as sender,
        dsh.open_runtime(models={"scripted": model}, persistence=holder_store) as rt,
    ):
        mid = await sender.sessions.followup("s1", "hello")
        # Durable before any process holds the session, and not delivered.
        assert await _mailbox(sender_store) == [("s1", "followup")]
        handle = await rt.agents.create("s1", options=OPTIONS)
        room = rt.sessions._mail("test")
        async with trio.open_nursery() as nursery:  # with the courier's, three at once
            for _ in range(2):
                nursery.start_soon(room.deliver, "s1")
        await handle.agent.when_idle()
        await handle.agent.flush()
        assert await room.deliver("s1") == 0
        assert await _mailbox(sender_store) == []
        _, events = await sender_store.read("s1")
        assert _claimed(list(events), mid) == 1
        splices = [
            e
            for e in events
            if e.type == "agent/inbox/spliced"
            and any(m.id == mid for m in e.data.inserted)
        ]
        assert len(splices) == 1


async def test_a_mail_to_a_live_agent_here_is_delivered_before_the_call_returns(
    stores: Stores,
) -> None:
    store = stores()
    model = ScriptedModel(reply("one"))
    async with dsh.open_runtime(models={"scripted": model}, persistence=store) as rt:
        handle = await rt.agents.create("s1", options=OPTIONS)
        mid = await rt.sessions.followup("s1", dsh.user_message("hi"))
        # Applied before the call returned: the insertion is in the live session.
        assert any(
            e.type == "agent/inbox/spliced"
            and any(m.id == mid for m in e.data.inserted)
            for e in handle.agent.session.events
        )
        result = await rt.sessions.wait("s1", mid)
        assert result.text == "one"
        assert result.reason == Completed()
        assert await _mailbox(store) == []


async def test_a_fenced_off_holder_cannot_deliver_and_the_mail_stays(
    stores: Stores,
) -> None:
    store = stores()
    model = ScriptedModel(reply("one"), reply("two"))
    async with dsh.open_runtime(models={"scripted": model}, persistence=store) as rt:
        handle = await rt.agents.create("s1", options=OPTIONS)
        handle.agent.followup(dsh.user_message("first"))
        await handle.agent.when_idle()
        await handle.agent.flush()
        # Another process takes the session over once the lease expired.
        await store._pool.run(
            lambda conn: conn.execute(
                "UPDATE dsh_trio.owners SET expires_at = now() - interval '1 s'"
            )
        )
        thief = stores()
        writer, _ = await thief.open("s1")
        mid = await rt.sessions.followup("s1", "second")  # applied here, not durable
        await handle.agent.when_idle()
        with pytest.raises(dsh.PersistenceError):
            await handle.agent.flush()
        assert await _mailbox(store) == [("s1", "followup")]  # still undelivered
        _, events = await thief.read("s1")
        assert _claimed(list(events), mid) == 0
        await writer.close()
        with pytest.raises(BaseException):  # noqa: B017  # disposal reports the unwritten events
            await handle.dispose()


async def test_steer_and_cancel_by_mail_reach_a_running_turn(stores: Stores) -> None:
    store = stores()
    first, second = gate(reply("partial")), gate(reply("steered"))
    model = ScriptedModel(first, second, reply("after"))
    async with dsh.open_runtime(models={"scripted": model}, persistence=store) as rt:
        handle = await rt.agents.create("s1", options=OPTIONS)
        mid = await rt.sessions.followup("s1", "go")
        await first.wait_reached()
        steer = await rt.sessions.steer("s1", "turn left")
        first.release()
        await second.wait_reached()
        await rt.sessions.cancel("s1", HookCancel("enough"))
        with pytest.raises(TurnFailedError) as info:
            await rt.sessions.wait("s1", steer)
        assert info.value.result.reason == Aborted(HookCancel("enough"))
        result = await rt.sessions.wait("s1", mid, check=False)
        assert result.turn == info.value.result.turn
        await handle.agent.when_idle()
        await handle.agent.flush()
        assert await _mailbox(store) == []


async def test_wait_gives_what_agent_run_gives_and_polls_without_notifications(
    stores: Stores,
) -> None:
    store = stores(listen=False, poll_s=0.05)
    model = ScriptedModel(reply("one"), reply("two"))
    async with dsh.open_runtime(models={"scripted": model}, persistence=store) as rt:
        handle = await rt.agents.create("s1", options=OPTIONS)
        expected = await handle.agent.run("first")
        mid = await rt.sessions.followup("s1", "second")
        result = await rt.sessions.wait("s1", mid)
        assert result.text == "two"
        first_id = next(
            e.data.id for e in handle.agent.session.events if e.type == "user/message"
        )
        assert await rt.sessions.wait("s1", first_id) == expected


async def test_a_cancelled_wait_changes_nothing(stores: Stores) -> None:
    store = stores()
    held = gate(reply("one"))
    model = ScriptedModel(held)
    async with dsh.open_runtime(models={"scripted": model}, persistence=store) as rt:
        handle = await rt.agents.create("s1", options=OPTIONS)
        mid = await rt.sessions.followup("s1", "hi")
        await held.wait_reached()
        with trio.move_on_after(0.01):
            await rt.sessions.wait("s1", mid)
        held.release()
        result = await rt.sessions.wait("s1", mid)
        assert result.reason == Completed()
        await handle.agent.when_idle()


@pytest.mark.parametrize("listen", [True, False], ids=["notified", "polled"])
async def test_an_agent_created_here_gets_mail_from_elsewhere_without_serve(
    stores: Stores, listen: bool
) -> None:
    sender_store = stores()
    holder_store = stores(listen=listen, poll_s=1.0 if listen else 0.05)
    model = ScriptedModel(reply("one"), reply("two"))
    async with (
        dsh.open_runtime(persistence=sender_store) as sender,
        dsh.open_runtime(models={"scripted": model}, persistence=holder_store) as rt,
    ):
        with trio.fail_after(60):  # a hang guard only: this takes well under 1 s
            # The runtime never serves: holding the session is enough.
            handle = await rt.agents.create("s1", options=OPTIONS)
            mid = await sender.sessions.followup("s1", "hello")
            assert (await sender.sessions.wait("s1", mid)).text == "one"
            await handle.dispose()
            # The courier stopped with the last agent; the next one starts it again.
            handle = await rt.agents.resume("s1", options=OPTIONS)
            mid = await sender.sessions.followup("s1", "again")
            assert (await sender.sessions.wait("s1", mid)).text == "two"
            await handle.agent.flush()
        assert await _mailbox(sender_store) == []
        _, events = await sender_store.read("s1")
        assert _claimed(list(events), mid) == 1


async def test_a_mailed_cancel_reaches_a_running_turn_of_an_agent_created_here(
    stores: Stores,
) -> None:
    sender_store, holder_store = stores(), stores()
    held = gate(reply("never"))
    model = ScriptedModel(held)
    async with (
        dsh.open_runtime(persistence=sender_store) as sender,
        dsh.open_runtime(models={"scripted": model}, persistence=holder_store) as rt,
    ):
        with trio.fail_after(60):  # a hang guard only
            handle = await rt.agents.create("c1", options=OPTIONS)
            mid = await rt.sessions.followup("c1", "work")
            await held.wait_reached()
            await sender.sessions.cancel("c1", HookCancel("stop"))
            result = await sender.sessions.wait("c1", mid, check=False)
            await handle.agent.flush()
            # The cancel caused no event of its own: its row is settled by the
            # delivery that applied it, after the turn ended. A second delivery
            # queues behind that one on the session's lock and finds nothing new.
            assert await rt.sessions._mail("test").deliver("c1") == 0
        assert result.reason == Aborted(HookCancel("stop"))
        assert await _mailbox(sender_store) == []
