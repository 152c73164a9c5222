"""Typed output: ``run``/``stream`` with ``output_type``, the ``final_result`` tool and its retries."""

from __future__ import annotations

import enum
import json
from typing import Annotated, Any

import attrs
import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.cli import OfflineModel
from dsh_trio.testing import ScriptedModel, gate, reply, tool_calls
from dsh_trio.values import ToolErrorInfo


class Currency(enum.Enum):
    EUR = "EUR"
    USD = "USD"


@attrs.frozen
class Line:
    item_name: Annotated[str, "what was sold"]
    qty: int = attrs.field(validator=attrs.validators.gt(0))


@attrs.frozen
class Invoice:
    """An invoice read from the user's text."""

    number: str
    currency: Currency
    lines: list[Line]
    note: str | None = None


VALID = json.dumps(
    {
        "number": "A-1",
        "currency": "EUR",
        "lines": [{"itemName": "tea", "qty": 2}, {"itemName": "cake", "qty": 1}],
    }
)
EXPECTED = Invoice("A-1", Currency.EUR, [Line("tea", 2), Line("cake", 1)])
BAD_QTY = json.dumps(
    {"number": "A-1", "currency": "EUR", "lines": [{"itemName": "tea", "qty": "2"}]}
)


def final(call_id: str, arguments: str) -> Any:
    return tool_calls((call_id, "final_result", arguments))


def tool_names(request: dsh.ModelRequest) -> list[Any]:
    return [t["name"] for t in request.tools if isinstance(t, dict)]


def offered(request: dsh.ModelRequest, name: str) -> Any:
    """The schema of the tool ``name`` that ``request`` offered."""
    (found,) = [t for t in request.tools if isinstance(t, dict) and t["name"] == name]
    return found


def results(result: Any) -> list[tuple[str, bool, str]]:
    """``(call id, is_error, text)`` of each tool result the turn appended."""
    out = []
    for message in result.messages:
        for block in message.content:
            if isinstance(block, dsh.ToolResultBlock):
                text = "".join(getattr(b, "text", "") for b in block.content)
                out.append((block.tool_call_id, block.is_error, text))
    return out


# --------------------------------------------------------------------------- first try


async def test_a_valid_first_call_is_the_output_and_ends_the_turn(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    model.push(final("c1", VALID))
    result = await agent.run(
        "Invoice A-1: 2 tea, 1 cake, in euros.", output_type=Invoice
    )
    assert result.output == EXPECTED
    assert isinstance(result.output, Invoice)
    assert result.reason == dsh.Completed()
    assert len(model.requests) == 1  # no model step after the accepting round
    assert results(result) == [("c1", False, "Final result accepted.")]
    # The tool the model was offered: the type's schema, under wire keys.
    tool = offered(model.requests[0], "final_result")
    parameters = tool["parameters"]
    assert parameters["required"] == ["number", "currency", "lines"]
    assert parameters["additionalProperties"] is False
    assert parameters["properties"]["currency"] == {"enum": ["EUR", "USD"]}
    line = parameters["properties"]["lines"]["items"]
    assert line["properties"]["itemName"] == {
        "type": "string",
        "description": "what was sold",
    }
    assert "An invoice read from the user's text." in tool["description"]


async def test_a_non_object_type_is_the_response_key(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    model.push(final("c1", '{"response": [3, 1, 2]}'))
    result = await agent.run("Three numbers?", output_type=list[int])
    assert result.output == [3, 1, 2]
    model.push(final("c2", '{"response": "USD"}'))
    assert (await agent.run("Which?", output_type=Currency)).output is Currency.USD


# --------------------------------------------------------------------------- repair


async def test_an_invalid_call_is_answered_with_the_problem_and_repaired(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    model.push(final("c1", BAD_QTY), final("c2", VALID))
    result = await agent.run("Invoice?", output_type=Invoice)
    assert result.output == EXPECTED
    assert result.reason == dsh.Completed()
    assert len(model.requests) == 2
    (first, second) = results(result)
    assert first[:2] == ("c1", True)
    # What was wrong and where: the JSON path of the bad field, under its wire key.
    assert '$.lines[0].qty: expected an integer, got string "2"' in first[2]
    assert "Call final_result again" in first[2]
    assert second == ("c2", False, "Final result accepted.")
    # The model saw its error result before it tried again.
    seen = model.requests[1].messages[-1]
    assert isinstance(seen, dsh.UserMessage)
    assert isinstance(seen.content[0], dsh.ToolResultBlock)
    assert seen.content[0].is_error


async def test_a_validator_failure_names_the_object_it_refused(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    zero = json.dumps(
        {"number": "A-1", "currency": "EUR", "lines": [{"itemName": "tea", "qty": 0}]}
    )
    model.push(final("c1", zero), final("c2", VALID))
    result = await agent.run("Invoice?", output_type=Invoice)
    assert "$.lines[0]: 'qty' must be > 0: 0" in results(result)[0][2]
    assert result.output == EXPECTED


async def test_a_reply_without_the_call_gets_a_reminder(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    model.push(reply("It is invoice A-1."), final("c1", VALID))
    result = await agent.run("Invoice?", output_type=Invoice)
    assert result.output == EXPECTED
    reminder = model.requests[1].messages[-1]
    assert isinstance(reminder, dsh.UserMessage)
    assert reminder.source == dsh.PluginSource("dsh_trio.output", form="reminder")
    assert "did not call the final_result tool" in dsh.text_of(reminder)
    assert reminder in result.messages


# --------------------------------------------------------------------------- failure


async def test_the_turn_fails_after_output_retries(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    model.push(final("c1", BAD_QTY), final("c2", '{"number": 7}'))
    with pytest.raises(dsh.TurnFailedError) as info:
        await agent.run("Invoice?", output_type=Invoice)  # output_retries=1
    failed = info.value.result
    assert isinstance(failed.reason, dsh.Errored)
    assert failed.reason.error.code == "OUTPUT_INVALID"
    assert "no valid Invoice final result in 2 tries" in str(info.value)
    assert "(OUTPUT_INVALID)" in str(info.value)
    assert failed.output is None
    assert len(model.requests) == 2  # no third try
    # Every call has its result: the last one names what was wrong too.
    (_, last) = results(failed)
    assert last[:2] == ("c2", True)
    assert "$.number: expected a string, got integer 7" in last[2]
    assert "No tries are left." in last[2]
    # check=False returns the result; the agent goes on.
    model.push(final("c3", BAD_QTY))
    again = await agent.run(
        "Again?", output_type=Invoice, output_retries=0, check=False
    )
    assert isinstance(again.reason, dsh.Errored)
    assert again.reason.error.code == "OUTPUT_INVALID"
    assert again.output is None
    assert len(model.requests) == 3  # output_retries=0: one try only


async def test_replies_without_the_call_use_up_the_tries(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    model.push(reply("No."), reply("Still no."), reply("Never."))
    result = await agent.run(
        "Invoice?", output_type=Invoice, output_retries=2, check=False
    )
    assert isinstance(result.reason, dsh.Errored)
    assert result.reason.error.code == "OUTPUT_INVALID"
    assert "did not call final_result" in result.reason.error.message
    assert len(model.requests) == 3


# --------------------------------------------------------------------------- stream


async def test_stream_carries_the_output(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    model.push(final("c1", BAD_QTY), final("c2", VALID))
    async with agent.stream("Invoice?", output_type=Invoice) as turn:
        frames = [f async for f in turn.frames()]
        result = await turn.result()
    assert result.output == EXPECTED
    starts = [f for f in frames if isinstance(f, dsh.StreamStartFrame)]
    assert len(starts) == 2  # both attempts were followed live


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("output_type", "match"),
    [
        (set[int], r"output_type set\[int\]: unsupported type set\[int\]"),
        (int | str, r"only X \| None unions"),
        (enum.IntEnum("Level", "LOW HIGH"), r"enum Level also derives from int"),
    ],
)
async def test_an_unsupported_type_is_refused_with_nothing_queued(
    agent: dsh.Agent, model: ScriptedModel, output_type: Any, match: str
) -> None:
    before = agent.session.next_seq
    with pytest.raises(dsh.ToolDefinitionError, match=match):
        await agent.run("x", output_type=output_type)
    with pytest.raises(dsh.ToolDefinitionError, match=match):
        agent.stream("x", output_type=output_type)  # at the call, before the block
    assert agent.session.next_seq == before
    assert not agent.inbox.has_pending
    assert model.requests == []


@attrs.frozen
class Node:
    name: str
    children: list[Node]


async def test_recursive_and_unresolvable_classes_are_refused(agent: dsh.Agent) -> None:
    with pytest.raises(
        dsh.ToolDefinitionError,
        match=r"\(Node.children\): attrs class Node is recursive",
    ):
        await agent.run("x", output_type=Node)

    @attrs.frozen
    class Inner:
        n: int

    @attrs.frozen
    class Outer:  # its string annotation names a class no module holds
        inner: Inner

    with pytest.raises(
        dsh.ToolDefinitionError,
        match=r"cannot resolve the annotations of Outer: name 'Inner' is not defined",
    ):
        await agent.run("x", output_type=Outer)
    attrs.resolve_types(Outer, localns={"Inner": Inner})  # as the message suggests
    assert agent.stream("x", output_type=Outer) is not None


async def test_bad_output_retries_are_refused(agent: dsh.Agent) -> None:
    before = agent.session.next_seq
    with pytest.raises(ValueError, match="output_retries must be 0 or more, got -1"):
        await agent.run("x", output_type=Invoice, output_retries=-1)
    with pytest.raises(TypeError, match="output_retries must be an int"):
        await agent.run("x", output_type=Invoice, output_retries=True)
    with pytest.raises(TypeError, match="given without output_type"):
        await agent.run("x", output_retries=3)
    with pytest.raises(TypeError, match="given without output_type"):
        agent.stream("x", output_retries=0)
    assert agent.session.next_seq == before
    assert not agent.inbox.has_pending


async def test_a_tool_named_final_result_clashes(
    runtime: dsh.Runtime, agent: dsh.Agent, model: ScriptedModel
) -> None:
    @dsh.tool(name="final_result")
    async def mine() -> str:
        """Not the typed output's."""
        return "x"

    unregister = runtime.tools.register(mine)
    before = agent.session.next_seq
    with pytest.raises(
        dsh.ToolDefinitionError, match='offers a tool named "final_result"'
    ):
        await agent.run("x", output_type=Invoice)
    assert agent.session.next_seq == before
    # A plain turn is unaffected by the name.
    unregister()
    model.push(reply("ok"))
    assert (await agent.run("x")).text == "ok"


async def test_a_clash_registered_after_the_call_fails_that_turn(
    runtime: dsh.Runtime, agent: dsh.Agent, model: ScriptedModel
) -> None:
    @dsh.tool(name="final_result")
    async def mine() -> str:
        """Not the typed output's."""
        return "x"

    held = gate(reply("first"))
    model.push(held, final("c1", VALID))
    agent.followup(dsh.user_message("first"))
    await held.wait_reached()
    failed: list[dsh.TurnResult] = []

    async def typed() -> None:
        failed.append(await agent.run("x", output_type=Invoice, check=False))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(typed)
        await trio.testing.wait_all_tasks_blocked()
        runtime.tools.register(mine)
        held.release()
    (result,) = failed
    assert isinstance(result.reason, dsh.Errored)
    assert 'offers a tool named "final_result"' in result.reason.error.message


# --------------------------------------------------------------------------- other turns


async def test_other_turns_are_unaffected(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    held = gate(reply("before"))
    model.push(held, final("c1", VALID), reply("after"))
    agent.followup(dsh.user_message("before"))  # its turn runs first
    await held.wait_reached()
    outcomes: list[dsh.TurnResult] = []

    async def typed() -> None:
        outcomes.append(await agent.run("typed", output_type=Invoice))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(typed)
        await trio.testing.wait_all_tasks_blocked()
        held.release()
    plain = await agent.run("after")
    assert outcomes[0].output == EXPECTED
    assert plain.output is None and plain.text == "after"
    offered = [tool_names(r) for r in model.requests]
    assert offered == [[], ["final_result"], []]


async def test_final_result_runs_in_model_order_with_other_tools(
    runtime: dsh.Runtime, agent: dsh.Agent, model: ScriptedModel
) -> None:
    ran: list[str] = []

    @dsh.tool
    async def note(text: str) -> str:
        """Write a note."""
        ran.append(text)
        return "noted"

    runtime.tools.register(note)
    model.push(
        tool_calls(
            ("c1", "note", '{"text": "a"}'),
            ("c2", "final_result", VALID),
            ("c3", "note", '{"text": "b"}'),
        )
    )
    result = await agent.run("Invoice?", output_type=Invoice)
    assert result.output == EXPECTED
    assert ran == ["a", "b"]
    assert [(c, e) for c, e, _ in results(result)] == [
        ("c1", False),
        ("c2", False),
        ("c3", False),
    ]
    assert len(model.requests) == 1
    assert tool_names(model.requests[0]) == ["final_result", "note"]


async def test_the_log_holds_ordinary_tool_events(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    model.push(final("c1", BAD_QTY), final("c2", VALID))
    await agent.run("Invoice?", output_type=Invoice)
    events = agent.session.events
    calls = [e for e in events if e.type == "tool/call"]
    answers = [e for e in events if e.type == "tool/result"]
    assert [e.data.name for e in calls] == ["final_result", "final_result"]
    assert [e.source_event_seqs for e in answers] == [(c.seq,) for c in calls]
    error = answers[0].data.error
    assert error == ToolErrorInfo("ToolArgumentsError", "INVALID_ARGS")
    # The derived history pairs every call with its result, as a resume reads it.
    history = agent.session.derive_messages()
    called = [
        b.id for m in history for b in m.content if isinstance(b, dsh.ToolCallBlock)
    ]
    answered = [
        b.tool_call_id
        for m in history
        for b in m.content
        if isinstance(b, dsh.ToolResultBlock)
    ]
    assert called == answered == ["c1", "c2"]


# --------------------------------------------------------------------------- offline


async def test_the_offline_model_answers_with_placeholders() -> None:
    async with dsh.open_runtime(models={"offline": OfflineModel()}) as runtime:
        options = dsh.AgentOptions(provider="offline", model="offline-demo")
        async with runtime.agents.open(options=options) as agent:
            result = await agent.run("Read invoice 7", output_type=Invoice)
            assert result.output == Invoice("Read invoice 7", Currency.EUR, [])
            assert result.reason == dsh.Completed()
            numbers = await agent.run("numbers", output_type=dict[str, int])
            assert numbers.output == {}
            plain = await agent.run("hello")
            assert plain.output is None
            assert plain.text.startswith('Hello! You said: "hello"')


async def test_a_typed_output_turn_takes_the_plain_path(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    # The fast lane runs only turns it can run exactly: a typed-output turn (its
    # tools and its end are the output's) goes by the plain path, the next plain
    # turn by the lane again.
    from dsh_trio.loop._lane import LANE

    before = LANE.entries
    model.push(final("c1", VALID))
    result = await agent.run("Invoice A-1.", output_type=Invoice)
    assert result.output == EXPECTED
    assert LANE.entries == before
    model.push(reply("ok"))
    await agent.run("hello")
    assert LANE.entries == before + 1
