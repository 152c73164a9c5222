"""Replies of the same model share their source, so a long history holds one."""

from __future__ import annotations

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, chunks, reply

OPTIONS = dsh.AgentOptions(provider="scripted", model="m")


def _replayed(state: str) -> dsh.testing.Script:
    return chunks(
        dsh.BlockStart(0, "text"),
        dsh.TextDelta(0, "r"),
        dsh.BlockEnd(0, dsh.TextBlock("r")),
        dsh.Finish(dsh.FinishReason("stop"), replay_state={"state": state}),
    )


def _replies(agent: dsh.Agent) -> list[dsh.AssistantMessage]:
    return [
        m
        for m in agent.session.derive_messages()
        if isinstance(m, dsh.AssistantMessage)
    ]


async def test_replies_without_replay_state_share_one_source() -> None:
    model = ScriptedModel(
        reply("a"), reply("b"), _replayed("s1"), _replayed("s2"), reply("e"), reply("c")
    )
    async with dsh.open_runtime(models={"scripted": model}) as runtime:
        agent = (await runtime.agents.create(options=OPTIONS)).agent
        other = (
            await runtime.agents.create(
                options=dsh.AgentOptions(provider="scripted", model="other")
            )
        ).agent
        for text in ("1", "2", "3", "4"):
            agent.followup(dsh.user_message(text))
            await agent.when_idle()
        other.followup(dsh.user_message("5"))
        await other.when_idle()
        agent.followup(dsh.user_message("6"))
        await agent.when_idle()
        a, b, s1, s2, c = _replies(agent)
        (elsewhere,) = _replies(other)
    assert a.source == dsh.ModelSource("scripted", "m")
    assert a.source is b.source
    # A reply with replay state keeps its own.
    assert s1.source == dsh.ModelSource("scripted", "m", {"state": "s1"})
    assert s2.source.replay_state == {"state": "s2"}
    # Another model's reply has its own source; the first model's next reply
    # equals (and shares again) the source of its model.
    assert elsewhere.source == dsh.ModelSource("scripted", "other")
    assert c.source == a.source and c.source is not elsewhere.source
