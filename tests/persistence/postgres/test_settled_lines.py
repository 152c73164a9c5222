"""A live session stored in PostgreSQL keeps its settled events as the lines its
writer wrote, and reads them back exactly."""

from __future__ import annotations

from collections.abc import Callable

import dsh_trio as dsh
from dsh_trio.persistence import load_session
from dsh_trio.persistence.postgres import PostgresPersistence
from dsh_trio.session import Session
from dsh_trio.session._line_chunks import CHUNK_LINES
from dsh_trio.testing import ScriptedModel, reply
from dsh_trio.values import SessionEvent

Stores = Callable[..., PostgresPersistence]
OPTIONS = dsh.AgentOptions(provider="scripted", model="m")
TEXT = 'ünï "quoted"\nline 😀'


async def test_a_stored_live_session_keeps_its_past_as_the_written_lines(
    stores: Stores,
) -> None:
    model = ScriptedModel(default=reply(TEXT))
    async with dsh.open_runtime(
        models={"scripted": model}, persistence=stores()
    ) as runtime:
        handle = await runtime.agents.create("pg-settled", options=OPTIONS)
        agent = handle.agent
        seen: list[SessionEvent] = list(agent.session.events)
        agent.session.subscribe(seen.append)
        for i in range(30):
            agent.followup(dsh.user_message(f"q{i} {TEXT}"))
            await agent.when_idle()
        await agent.flush()
        session = agent.session
        assert session._events.compact_count > len(seen) - 2 * CHUNK_LINES > 0
        assert list(session.events) == seen
        assert [session.events[i] for i in range(len(seen))] == seen
        assert list(reversed(session.events)) == seen[::-1]
        plain = Session.restore(session.header, seen)
        assert list(session.derive_messages()) == list(plain.derive_messages())
        await handle.dispose()
    stored, writer = await load_session(stores(), "pg-settled")
    await writer.close()
    assert list(stored.events) == seen
