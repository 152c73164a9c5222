"""An agent follows its session's appends only while something needs them: a turn
wait (``run``/``stream``) or a ``session/event`` listener. Until then an append
costs no relay call; once needed, nothing is missed and the relay runs first."""

from __future__ import annotations

import dsh_trio as dsh
from dsh_trio.events import SessionEventAppended
from dsh_trio.loop._waits import TurnWaits
from dsh_trio.testing import ScriptedModel, reply

from .conftest import OPTIONS


def _is_relay(listener: object) -> bool:
    """Whether ``listener`` is an agent's relay (its turn waits' session listener)."""
    return getattr(listener, "__func__", None) is TurnWaits.on_session_event


def _relays(agent: dsh.Agent) -> bool:
    return any(_is_relay(sub.listener) for sub in agent.session._subs)


async def test_an_agent_nobody_asks_about_does_not_follow_its_session(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    handle = await runtime.agents.create("quiet", options=OPTIONS)
    agent = handle.agent
    assert not _relays(agent)
    model.push(reply("ok"))
    agent.followup(dsh.user_message("hi"))
    await agent.when_idle()
    assert not _relays(agent)
    await handle.dispose()


async def test_a_turn_wait_follows_the_session_and_sees_its_turn_end(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    model.push(reply("yes"))
    result = await agent.run("sure?")
    assert (result.turn, result.text) == (1, "yes")
    assert _relays(agent)
    assert _is_relay(agent.session._subs[0].listener)


async def test_a_session_event_listener_hears_agents_made_before_and_after_it(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    before = await runtime.agents.create("before", options=OPTIONS)
    heard: list[tuple[str, str]] = []

    def on_event(payload: SessionEventAppended) -> None:
        heard.append((payload.session.id, payload.event.type))

    dispose = runtime.events.on("session/event", on_event)
    after = await runtime.agents.create("after", options=OPTIONS)
    for handle in (before, after):
        assert _relays(handle.agent)
        assert _is_relay(handle.agent.session._subs[0].listener)
        model.push(reply("ok"))
        start = handle.agent.session.next_seq
        handle.agent.followup(dsh.user_message("hi"))
        await handle.agent.when_idle()
        appended = [e.type for e in handle.agent.session.events[start:]]
        assert [t for s, t in heard if s == handle.agent.id][-len(appended) :] == (
            appended
        )
    dispose()
    await before.dispose()
    await after.dispose()
    assert not _relays(before.agent)


async def test_an_agent_scoped_session_event_listener_is_heard_too(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    heard: list[str] = []
    agent.scope.on("session/event", lambda p: heard.append(p.event.type))
    model.push(reply("ok"))
    agent.followup(dsh.user_message("hi"))
    await agent.when_idle()
    assert heard[0] == "agent/inbox/spliced"
    assert heard[-1] == "turn/end"
