from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given, settings, strategies as st

from dsh_trio.errors import LlmError
from dsh_trio.llm import BlockAssembler
from dsh_trio.values import (
    BlockEnd,
    BlockStart,
    ContentBlock,
    Finish,
    FinishReason,
    ImageBlock,
    JsonValue,
    LlmFailure,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
    Usage,
)


def assemble(chunks: Iterable[StreamChunk]) -> BlockAssembler:
    assembler = BlockAssembler()
    for chunk in chunks:
        assembler.push(chunk)
    return assembler


def test_empty_stream() -> None:
    a = assemble([])
    assert a.blocks() == ()
    assert a.interrupted_blocks() == ()
    assert a.finish == FinishReason("stop")
    assert not a.finished
    assert a.usage is None
    assert a.replay_state is None


def test_blocks_in_order_of_first_appearance() -> None:
    a = assemble(
        [
            ReasoningDelta(1, "think"),
            BlockStart(0, "text"),
            TextDelta(0, "he"),
            ReasoningDelta(1, "ing"),
            TextDelta(0, "llo"),
            ToolCallDelta(2, "c1", "echo", '{"a":'),
            ToolCallDelta(2, "", None, "1}"),
            Finish(FinishReason("tool-calls")),
        ]
    )
    assert a.blocks() == (
        ReasoningBlock("thinking"),
        TextBlock("hello"),
        ToolCallBlock("c1", "echo", '{"a":1}'),
    )
    assert a.finish == FinishReason("tool-calls")
    assert a.finished


def test_block_end_is_authoritative_and_first_end_wins() -> None:
    a = assemble(
        [
            BlockStart(0, "text"),
            TextDelta(0, "draft"),
            BlockEnd(0, TextBlock("final")),
            TextDelta(0, " ignored"),
            BlockEnd(0, TextBlock("second end ignored")),
        ]
    )
    assert a.blocks() == (TextBlock("final"),)


def test_block_end_without_start_or_deltas_opens_the_block() -> None:
    image = ImageBlock({"url": "x"})
    a = assemble([BlockEnd(3, image), TextDelta(1, "t")])
    assert a.blocks() == (image, TextBlock("t"))


def test_deltas_of_the_wrong_kind_are_ignored() -> None:
    a = assemble(
        [
            BlockStart(0, "text"),
            TextDelta(0, "a"),
            ReasoningDelta(0, "not text"),
            ToolCallDelta(0, "x", "y", "{}"),
            TextDelta(0, "b"),
        ]
    )
    assert a.blocks() == (TextBlock("ab"),)


def test_tool_call_fallbacks() -> None:
    a = assemble([BlockStart(4, "tool-call"), ToolCallDelta(4, "", None, "{}")])
    assert a.blocks() == (ToolCallBlock("call-4", "", "{}"),)
    b = assemble([BlockStart(2, "tool-call")])
    assert b.blocks() == (ToolCallBlock("call-2", "", ""),)


def test_tool_call_keeps_first_id_and_name() -> None:
    a = assemble(
        [
            ToolCallDelta(0, "", None, "["),
            ToolCallDelta(0, "id-1", "first", "1"),
            ToolCallDelta(0, "id-2", "second", "]"),
        ]
    )
    assert a.blocks() == (ToolCallBlock("id-1", "first", "[1]"),)


def test_max_tokens_drops_every_tool_call() -> None:
    a = assemble(
        [
            TextDelta(0, "partial answer"),
            ToolCallDelta(1, "c1", "echo", "{}"),
            BlockEnd(1, ToolCallBlock("c1", "echo", "{}")),
            ToolCallDelta(2, "c2", "echo", '{"trunc'),
            Finish(FinishReason("max-tokens")),
        ]
    )
    assert a.blocks() == (TextBlock("partial answer"),)


def test_tool_calls_kept_for_other_finishes() -> None:
    a = assemble([ToolCallDelta(0, "c1", "echo", "{}"), Finish(FinishReason("stop"))])
    assert a.blocks() == (ToolCallBlock("c1", "echo", "{}"),)


def test_unclosed_unknown_block_raises() -> None:
    a = assemble([BlockStart(0, "text"), TextDelta(0, "x"), BlockStart(1, "audio")])
    with pytest.raises(LlmError) as info:
        a.blocks()
    assert info.value.failure.code == "INVALID_STREAM"
    assert "audio" in info.value.failure.message
    # The visible prefix is still available for an interrupted stream.
    assert a.interrupted_blocks() == (TextBlock("x"),)


def test_closed_unknown_block_is_fine() -> None:
    image = ImageBlock({"id": 1})
    a = assemble([BlockStart(0, "image"), BlockEnd(0, image)])
    assert a.blocks() == (image,)


def test_interrupted_blocks_whitespace_and_tool_rules() -> None:
    a = assemble(
        [
            TextDelta(0, "  \n"),  # whitespace only: dropped
            ReasoningDelta(1, "plan"),
            BlockEnd(1, ReasoningBlock("plan.")),  # closed: its end block
            ToolCallDelta(2, "c1", "echo", "{}"),  # tool call: dropped
            BlockEnd(3, ToolCallBlock("c2", "echo", "{}")),  # closed tool call: dropped
            BlockStart(4, "text"),
            TextDelta(4, " visible "),  # open text: kept verbatim
            BlockEnd(5, TextBlock("\t")),  # closed whitespace-only: dropped
            BlockStart(6, "audio"),  # unknown open: dropped
        ]
    )
    assert a.interrupted_blocks() == (
        ReasoningBlock("plan."),
        TextBlock(" visible "),
    )


def test_usage_keeps_the_last_one() -> None:
    a = assemble([Usage(1, 2), Usage(3, 4, reasoning_tokens=1)])
    assert a.usage == Usage(3, 4, reasoning_tokens=1)


def test_finish_with_failure() -> None:
    failure = LlmFailure("busy", "RATE_LIMIT")
    a = assemble([TextDelta(0, "x"), Finish(FinishReason("error", failure))])
    assert a.finish.kind == "error"
    assert a.finish.failure is failure


def test_replay_state_passes_through_without_blocks() -> None:
    state: JsonValue = {"response": {"id": "r1"}}
    a = assemble([TextDelta(0, "x"), Finish(FinishReason("stop"), replay_state=state)])
    assert a.replay_state == state
    b = assemble([Finish(FinishReason("stop"), replay_state="opaque")])
    assert b.replay_state == "opaque"


def test_replay_state_dropped_when_blocks_misaligned() -> None:
    state: JsonValue = {"response": {}, "blocks": [{"a": 1}]}
    a = assemble(
        [
            TextDelta(0, "x"),
            TextDelta(1, "y"),
            Finish(FinishReason("stop"), replay_state=state),
        ]
    )
    assert a.replay_state is None
    bad: JsonValue = {"response": {}, "blocks": "nope"}
    b = assemble([TextDelta(0, "x"), Finish(FinishReason("stop"), replay_state=bad)])
    assert b.replay_state is None


def test_replay_state_pruned_like_blocks() -> None:
    state: JsonValue = {"response": {"id": 1}, "blocks": ["t", "tc", "r"]}
    chunks: list[StreamChunk] = [
        TextDelta(0, "x"),
        ToolCallDelta(1, "c", "n", "{"),
        ReasoningDelta(2, "y"),
    ]
    kept = assemble([*chunks, Finish(FinishReason("max-tokens"), replay_state=state)])
    assert kept.replay_state == {"response": {"id": 1}, "blocks": ["t", "r"]}
    whole = assemble([*chunks, Finish(FinishReason("stop"), replay_state=state)])
    assert whole.replay_state == state


block_kinds = st.sampled_from(["text", "reasoning", "tool-call"])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), block_kinds, st.text(max_size=4)),
        max_size=30,
    )
)
def test_blocks_concatenate_deltas(deltas: list[tuple[int, str, str]]) -> None:
    expected: dict[int, tuple[str, list[str]]] = {}
    chunks: list[StreamChunk] = []
    for index, kind, text in deltas:
        chunk: StreamChunk
        if kind == "text":
            chunk = TextDelta(index, text)
        elif kind == "reasoning":
            chunk = ReasoningDelta(index, text)
        else:
            chunk = ToolCallDelta(index, f"id{index}", "f", text)
        chunks.append(chunk)
        first_kind, parts = expected.setdefault(index, (kind, []))
        if first_kind == kind:
            parts.append(text)
    want: list[ContentBlock] = []
    for index, (kind, parts) in expected.items():
        joined = "".join(parts)
        if kind == "text":
            want.append(TextBlock(joined))
        elif kind == "reasoning":
            want.append(ReasoningBlock(joined))
        else:
            want.append(ToolCallBlock(f"id{index}", "f", joined))
    assert assemble(chunks).blocks() == tuple(want)
