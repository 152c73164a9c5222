"""Workers serving a store's sessions (``runtime.serve``): activation, passivation, takeover.

Each runtime here has its own store object, so each is one "process" to the
store: its own owner row, heartbeat and ``LISTEN`` connection.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.errors import PersistenceNotConfiguredError, TurnFailedError
from dsh_trio.nursery import Runtime
from dsh_trio.persistence import persist_new_session
from dsh_trio.persistence.postgres import PostgresPersistence
from dsh_trio.session import Session
from dsh_trio.testing import ScriptedModel, gate, reply
from dsh_trio.values import (
    Aborted,
    Completed,
    HookCancel,
    InboxSplice,
    InboxTarget,
    Interrupted,
    SessionEvent,
    TurnStart,
)

Stores = Callable[..., PostgresPersistence]
OPTIONS = dsh.AgentOptions(provider="scripted", model="m")


@asynccontextmanager
async def _worker(
    store: PostgresPersistence,
    model: ScriptedModel,
    log: list[tuple[str, str]] | None = None,
    **kwargs: object,
) -> AsyncIterator[Runtime]:
    """A runtime serving ``store`` until the block is left (which must end within 60 s)."""
    async with (
        dsh.open_runtime(models={"scripted": model}, persistence=store) as rt,
        trio.open_nursery() as nursery,
    ):
        if log is not None:
            for name in ("agent/activated", "agent/passivated"):
                rt.events.on(
                    name,
                    functools.partial(lambda n, p: log.append((n, p.agent.id)), name),
                )
        await nursery.start(functools.partial(rt.serve, options=OPTIONS, **kwargs))  # type: ignore[arg-type]
        with trio.fail_after(60):  # a hang guard only: these blocks take well under 1 s
            yield rt
        nursery.cancel_scope.cancel()


def _claims(events: Sequence[SessionEvent], message_id: str) -> int:
    return sum(
        e.type == "user/message" and getattr(e.data, "id", None) == message_id
        for e in events
    )


async def test_serve_needs_the_postgres_store_and_checks_its_bounds(
    stores: Stores,
) -> None:
    async with dsh.open_runtime() as rt:
        with pytest.raises(PersistenceNotConfiguredError, match="PostgreSQL"):
            await rt.serve()
    async with dsh.open_runtime(persistence=stores()) as rt:
        with pytest.raises(ValueError, match="max_active"):
            await rt.serve(max_active=0)
        with pytest.raises(ValueError, match="passivate_after_s"):
            await rt.serve(passivate_after_s=-1)


async def test_first_mail_creates_the_session_and_idle_agents_passivate_and_reactivate_elsewhere(
    stores: Stores,
) -> None:
    sender_store = stores()
    passivated = trio.Event()

    class Log(list[tuple[str, str]]):
        def append(self, item: tuple[str, str]) -> None:
            super().append(item)
            if item[0] == "agent/passivated":
                passivated.set()

    log = Log()
    async with dsh.open_runtime(persistence=sender_store) as sender:
        async with _worker(
            stores(), ScriptedModel(reply("one")), log, passivate_after_s=0
        ):
            mid = await sender.sessions.followup("new-1", "hello")
            result = await sender.sessions.wait("new-1", mid)
            assert result.text == "one"
            if ("agent/passivated", "new-1") not in log:
                await passivated.wait()
        assert log == [("agent/activated", "new-1"), ("agent/passivated", "new-1")]
        # Passivated: the lease is free at once (no wait for an expiry).
        writer, _ = await stores().open("new-1")
        await writer.close()
        other: list[tuple[str, str]] = []
        async with _worker(stores(), ScriptedModel(reply("two")), other):
            mid2 = await sender.sessions.followup("new-1", "again")
            result = await sender.sessions.wait("new-1", mid2)
        assert result.text == "two"
        assert result.turn == 2
        assert other[0] == ("agent/activated", "new-1")
        _, events = await sender_store.read("new-1")
        assert _claims(events, mid) == _claims(events, mid2) == 1


async def test_max_active_bounds_the_agents_a_worker_holds(stores: Stores) -> None:
    log: list[tuple[str, str]] = []
    async with dsh.open_runtime(persistence=stores()) as sender:
        model = ScriptedModel(*(reply(f"r{i}") for i in range(6)))
        async with _worker(stores(), model, log, max_active=1, passivate_after_s=0):
            mids = [
                (sid, await sender.sessions.followup(sid, "hi"))
                for sid in ("b1", "b2", "b3")
            ]
            for sid, mid in mids:
                await sender.sessions.wait(sid, mid)
    live = peak = 0
    for name, _ in log:
        live += 1 if name == "agent/activated" else -1
        peak = max(peak, live)
    assert peak == 1
    assert sorted(sid for name, sid in log if name == "agent/activated") == [
        "b1",
        "b2",
        "b3",
    ]


async def test_cancel_by_mail_reaches_a_running_turn_on_another_worker(
    stores: Stores,
) -> None:
    held = gate(reply("never"))
    async with dsh.open_runtime(persistence=stores()) as sender:
        async with _worker(stores(), ScriptedModel(held)):
            mid = await sender.sessions.followup("c1", "work")
            await held.wait_reached()
            await sender.sessions.cancel("c1", HookCancel("stop now"))
            with pytest.raises(TurnFailedError) as info:
                await sender.sessions.wait("c1", mid)
        assert info.value.result.reason == Aborted(HookCancel("stop now"))
        _, events = await sender.persistence.read("c1")
        ends = [e.data.reason for e in events if e.type == "turn/end"]
        assert ends == [Aborted(HookCancel("stop now"))]


async def test_a_worker_repairs_requeues_a_lost_claim_and_runs_parked_input(
    stores: Stores,
) -> None:
    store = stores()
    lost, parked = dsh.user_message("lost"), dsh.user_message("parked")
    # What a worker killed right after the batch holding its claim leaves behind:
    # turn 1 claimed "lost" and never recorded it; "parked" was delivered after.
    session = Session.create("r1")
    session.append(
        "agent/inbox/spliced",
        InboxSplice(target=InboxTarget.NEXT_TURN, start=0, inserted=(lost,)),
    )
    session.append("turn/start", TurnStart(turn=1))
    session.append(
        "agent/inbox/spliced",
        InboxSplice(target=InboxTarget.NEXT_TURN, start=0, removed_count=1),
    )
    session.append(
        "agent/inbox/spliced",
        InboxSplice(target=InboxTarget.NEXT_TURN, start=0, inserted=(parked,)),
    )
    writer = await persist_new_session(store, session)
    await writer.close()
    async with dsh.open_runtime(persistence=stores()) as sender:
        model = ScriptedModel(reply("a"), reply("b"), reply("c"))
        async with _worker(stores(), model):
            mid = await sender.sessions.followup("r1", "new")
            results = [
                await sender.sessions.wait("r1", m) for m in (lost.id, parked.id, mid)
            ]
    assert all(r.reason == Completed() for r in results)
    _, events = await store.read("r1")
    assert [_claims(events, m) for m in (lost.id, parked.id, mid)] == [1, 1, 1]
    ends = [e.data.reason for e in events if e.type == "turn/end"]
    assert ends[0] == Interrupted()


async def test_without_notifications_workers_and_waits_poll(stores: Stores) -> None:
    quiet = functools.partial(stores, listen=False, poll_s=0.05)
    async with dsh.open_runtime(persistence=quiet()) as sender:
        async with _worker(quiet(), ScriptedModel(reply("polled"))):
            mid = await sender.sessions.followup("q1", "anyone?")
            result = await sender.sessions.wait("q1", mid)
    assert result.text == "polled"
