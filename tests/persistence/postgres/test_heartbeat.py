"""Leases are renewed per process, not per session: one statement per period."""

from __future__ import annotations

from collections.abc import Callable

import trio
import trio.testing

from dsh_trio.persistence.postgres import PostgresPersistence
from dsh_trio.values import SessionHeader, SessionId

Stores = Callable[..., PostgresPersistence]


async def test_a_thousand_sessions_cost_one_renewal_statement_per_period(
    stores: Stores, autojump_clock: trio.testing.MockClock
) -> None:
    store = stores(lease_s=30.0)
    writers = []
    async with trio.open_nursery() as nursery:

        async def claim(n: int) -> None:
            header = SessionHeader(id=SessionId(f"s{n:04d}"), created_at=n)
            writers.append(await store.create(header))

        for n in range(1000):
            nursery.start_soon(claim, n)
    assert store._heartbeat.holds == 1000
    await trio.testing.wait_all_threads_completed()  # no statement in flight
    before, periods = dict(store.statements), store.renewals
    for _ in range(1000):  # until three renewal periods passed (virtual time)
        if store.renewals >= periods + 3:
            break
        await trio.sleep(1)
    await trio.testing.wait_all_threads_completed()
    after = dict(store.statements)
    renewed = store.renewals - periods
    spent = {k: after[k] - before.get(k, 0) for k in after}
    assert spent == {**dict.fromkeys(before, 0), "renew": renewed}
    # The leases are alive on the server: nothing expired meanwhile.
    live = await store._pool.run(
        lambda conn: conn.execute(
            "SELECT count(*) FROM dsh_trio.leases l JOIN dsh_trio.owners o"
            " ON o.owner = l.owner AND o.epoch = l.epoch"
            " WHERE o.expires_at > clock_timestamp()"
        ).fetchone()
    )
    assert live is not None and live[0] == 1000
    for writer in writers:
        await writer.close()
    assert store._heartbeat.holds == 0
    await trio.testing.wait_all_threads_completed()
    periods = store.renewals
    await trio.sleep(100)  # the renewal task stopped with the last writer
    assert store.renewals == periods
