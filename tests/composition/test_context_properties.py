"""Runtime-context snapshots against a model of the retained state, over random histories.

Operations: change the context (a text, or nothing), run a turn (through a pre-step
listener that calls ``next()`` or one that replaces the batch), compact the retained
snapshot away. The model says, for every turn, which snapshot (if any) must come last in
the batch; the session must agree.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio
from hypothesis import given, settings, strategies as st

import dsh_trio as dsh
from dsh_trio.loop._context import CLEARED_CONTEXT, SNAPSHOT_PREAMBLE
from dsh_trio.testing import ScriptedModel, reply
from dsh_trio.values import SYSTEM_PROMPT_PLUGIN, SurfaceReplace

OPTIONS = dsh.AgentOptions(provider="scripted", model="m")

ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from([None, "", "alpha", "beta"])),
        st.tuples(st.just("turn"), st.booleans()),
        st.tuples(st.just("compact"), st.none()),
    ),
    min_size=1,
    max_size=12,
)

_NEVER = object()


def is_snapshot(event: dsh.SessionEvent) -> bool:
    data = event.data
    return (
        event.type == "user/message"
        and isinstance(data, dsh.UserMessage)
        and isinstance(data.source, dsh.PluginSource)
        and data.source.plugin == SYSTEM_PROMPT_PLUGIN
    )


def expected_text(current: str | None, retained: object) -> str | None:
    """What the projection must publish for ``current`` given the model's retained text."""
    rendered = f"{SNAPSHOT_PREAMBLE}\n\n{current}" if current else ""
    if retained is _NEVER and not rendered:
        return None
    text = rendered or CLEARED_CONTEXT
    return None if retained == text else text


@settings(max_examples=60, deadline=None, derandomize=True)
@given(script=ops)
def test_snapshots_follow_the_model_of_the_retained_state(
    script: list[tuple[str, Any]],
) -> None:
    async def main() -> None:
        model = ScriptedModel(default=reply("ok"))
        state: dict[str, Any] = {"text": None, "bypass": False}
        async with dsh.open_runtime(models={"scripted": model}) as runtime:
            runtime.prompt.context("ctx", lambda agent: state["text"])
            async with runtime.agents.open(options=OPTIONS) as agent:

                async def pre_step(e: Any, next: Callable[[], Awaitable[Any]]) -> Any:
                    if state["bypass"]:
                        return dsh.Enter(e.messages)
                    return await next()

                agent.scope.on("agent/pre-step", pre_step)
                retained: object = _NEVER
                retained_seq: int | None = None
                for op, arg in script:
                    if op == "set":
                        state["text"] = arg
                    elif op == "compact":
                        if retained_seq is None:
                            continue
                        agent.session.append(
                            "user/message",
                            dsh.user_message("summary"),
                            surface_op=SurfaceReplace(retained_seq, retained_seq),
                            source_event_seqs=(retained_seq,),
                        )
                        retained, retained_seq = None, None
                    else:
                        state["bypass"] = arg
                        want = expected_text(state["text"], retained)
                        mark = agent.session.next_seq
                        await agent.run(dsh.user_message("go"))
                        new = [e for e in agent.session.events[mark:] if is_snapshot(e)]
                        users = [
                            e
                            for e in agent.session.events[mark:]
                            if e.type == "user/message"
                        ]
                        if want is None or arg:
                            assert new == []
                        else:
                            (snapshot,) = new
                            assert snapshot is users[-1]  # last of the batch
                            assert isinstance(snapshot.data, dsh.UserMessage)
                            assert dsh.text_of(snapshot.data) == want
                            retained, retained_seq = want, snapshot.seq

    trio.run(main)
