"""Claim boundaries by example: a follow-up queued while a turn runs starts its own turn."""

from __future__ import annotations

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, reply, tool_calls
from dsh_trio.values import TurnStart

from .conftest import OPTIONS


def _turn_of(events: list[dsh.SessionEvent], message_id: str) -> int:
    """The turn whose ``user/message`` carries ``message_id``."""
    turn = 0
    for event in events:
        data = event.data
        if isinstance(data, TurnStart):
            turn = data.turn
        elif isinstance(data, dsh.UserMessage) and data.id == message_id:
            return turn
    raise AssertionError(f"{message_id} was never written")


async def test_a_step_boundary_claims_next_step_only_so_a_followup_waits_for_its_turn() -> (
    None
):
    # Turn 1: a tool call (step 1) then a reply (step 2); the follow-up queued
    # meanwhile must not join step 2: it is the prompt of turn 2.
    model = ScriptedModel(
        tool_calls(("call-1", "lookup", "{}")), reply("one"), reply("two")
    )
    async with dsh.open_runtime(models={"scripted": model}) as runtime:
        agent = (await runtime.agents.create("a", options=OPTIONS)).agent
        agent.followup(dsh.user_message("first", id="m0"))
        agent.followup(dsh.user_message("second", id="u1"))
        await agent.when_idle()
        events = list(agent.session.events)
    starts = [e.data.turn for e in events if isinstance(e.data, TurnStart)]
    assert starts == [1, 2]
    assert _turn_of(events, "m0") == 1
    assert _turn_of(events, "u1") == 2
    # What the model saw: u1 reaches it only in turn 2's request.
    seen = [[m.id for m in r.messages] for r in model.requests]
    assert len(seen) == 3
    assert "u1" not in seen[1]
    assert "u1" in seen[2]
