"""The compact stream record: packing, exact expansion, strict validation, readers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from dsh_trio.errors import InvalidStreamChunkError, SessionCorruptError
from dsh_trio.session import StreamAccumulator, expand_stream, stream_text
from dsh_trio.session._stream import (
    first_token_time,
    has_visible_content,
    last_raw_chunk,
)
from dsh_trio.values import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishReason,
    ImageBlock,
    LlmFailure,
    RawChunkRecord,
    ReasoningBlock,
    ReasoningChunksRecord,
    ReasoningDelta,
    StreamChunk,
    TextBlock,
    TextChunksRecord,
    TextDelta,
    ToolCallBlock,
    ToolCallChunksRecord,
    ToolCallDelta,
    Usage,
)

SAFE = 2**53 - 1


def pack(pushes: list[tuple[StreamChunk, int]]) -> tuple[Any, ...]:
    acc = StreamAccumulator()
    for chunk, t in pushes:
        acc.push(chunk, t)
    return acc.records()


# --------------------------------------------------------------------------- packing


def test_text_run_packs_consecutive_deltas_of_one_block() -> None:
    records = pack(
        [
            (BlockStart(0, "text"), 10),
            (TextDelta(0, "he"), 11),
            (TextDelta(0, "l"), 11),
            (TextDelta(0, "lo"), 15),
            (BlockEnd(0, TextBlock("hello")), 16),
            (Usage(3, 4), 17),
            (Finish(FinishReason("stop")), 18),
        ]
    )
    assert records == (
        RawChunkRecord(10, BlockStart(0, "text")),
        TextChunksRecord(11, 0, (0, 4), ("he", "l", "lo")),
        RawChunkRecord(16, BlockEnd(0, TextBlock("hello"))),
        RawChunkRecord(17, Usage(3, 4)),
        RawChunkRecord(18, Finish(FinishReason("stop"))),
    )


def test_a_lone_delta_is_a_one_member_run() -> None:
    assert pack([(TextDelta(2, "x"), 5)]) == (TextChunksRecord(5, 2, (), ("x",)),)
    assert pack([(ReasoningDelta(0, "r"), 5)]) == (
        ReasoningChunksRecord(5, 0, (), ("r",)),
    )


def test_runs_split_on_kind_and_block_index() -> None:
    records = pack(
        [
            (ReasoningDelta(0, "think"), 1),
            (TextDelta(0, "a"), 2),
            (TextDelta(1, "b"), 3),
            (TextDelta(1, "c"), 4),
            (ReasoningDelta(0, "more"), 5),
        ]
    )
    assert records == (
        ReasoningChunksRecord(1, 0, (), ("think",)),
        TextChunksRecord(2, 0, (), ("a",)),
        TextChunksRecord(3, 1, (1,), ("b", "c")),
        ReasoningChunksRecord(5, 0, (), ("more",)),
    )


def test_a_raw_record_ends_the_run() -> None:
    records = pack(
        [
            (TextDelta(0, "a"), 1),
            (Usage(1, 1), 2),
            (TextDelta(0, "b"), 3),
        ]
    )
    assert records == (
        TextChunksRecord(1, 0, (), ("a",)),
        RawChunkRecord(2, Usage(1, 1)),
        TextChunksRecord(3, 0, (), ("b",)),
    )


def test_negative_and_zero_gaps_are_kept() -> None:
    records = pack(
        [(TextDelta(0, "a"), 10), (TextDelta(0, "b"), 10), (TextDelta(0, "c"), 7)]
    )
    assert records == (TextChunksRecord(10, 0, (0, -3), ("a", "b", "c")),)


def test_unsafe_gap_starts_a_new_run() -> None:
    records = pack([(TextDelta(0, "a"), -SAFE), (TextDelta(0, "b"), SAFE)])
    assert records == (
        TextChunksRecord(-SAFE, 0, (), ("a",)),
        TextChunksRecord(SAFE, 0, (), ("b",)),
    )


def test_tool_call_runs_need_same_index_id_and_name() -> None:
    records = pack(
        [
            (ToolCallDelta(0, "c1", "search", '{"q'), 1),
            (ToolCallDelta(0, "c1", "search", '":1'), 2),
            (ToolCallDelta(0, "c1", None, "}"), 3),  # name presence differs
            (ToolCallDelta(0, "c1", None, " "), 3),
            (ToolCallDelta(0, "c2", None, "x"), 4),  # id differs
            (ToolCallDelta(1, "c2", None, "y"), 5),  # index differs
            (ToolCallDelta(1, "c2", "other", "z"), 6),  # name value differs
            (ToolCallDelta(1, "c2", "other2", "w"), 7),
        ]
    )
    assert records == (
        ToolCallChunksRecord(1, 0, (1,), "c1", ('{"q', '":1'), "search"),
        ToolCallChunksRecord(3, 0, (0,), "c1", ("}", " "), None),
        ToolCallChunksRecord(4, 0, (), "c2", ("x",), None),
        ToolCallChunksRecord(5, 1, (), "c2", ("y",), None),
        ToolCallChunksRecord(6, 1, (), "c2", ("z",), "other"),
        ToolCallChunksRecord(7, 1, (), "c2", ("w",), "other2"),
    )


def test_tool_call_delta_with_empty_id_or_empty_name_is_raw() -> None:
    records = pack(
        [
            (ToolCallDelta(0, "c1", "f", "a"), 1),
            (ToolCallDelta(0, "", "f", "b"), 2),
            (ToolCallDelta(0, "c1", "", "c"), 3),
            (ToolCallDelta(0, "c1", "f", "d"), 4),
        ]
    )
    assert records == (
        ToolCallChunksRecord(1, 0, (), "c1", ("a",), "f"),
        RawChunkRecord(2, ToolCallDelta(0, "", "f", "b")),
        RawChunkRecord(3, ToolCallDelta(0, "c1", "", "c")),
        ToolCallChunksRecord(4, 0, (), "c1", ("d",), "f"),
    )


def test_records_snapshot_does_not_close_the_run() -> None:
    acc = StreamAccumulator()
    acc.push(TextDelta(0, "a"), 1)
    first = acc.records()
    acc.push(TextDelta(0, "b"), 2)
    assert first == (TextChunksRecord(1, 0, (), ("a",)),)
    assert acc.records() == (TextChunksRecord(1, 0, (1,), ("a", "b")),)
    assert acc.chunk_count == 2
    assert StreamAccumulator().records() == ()


@pytest.mark.parametrize(
    ("chunk", "time", "expected"),
    [
        (TextDelta(0, "a"), 1.5, "receive time must be a safe integer"),
        (TextDelta(0, "a"), 2**53, "receive time must be a safe integer"),
        (TextDelta(0, 3), 1, "chunk.text must be a str"),  # type: ignore[arg-type]
        (TextDelta("0", "a"), 1, "chunk.index must be an int"),  # type: ignore[arg-type]
        (TextDelta(0, "\ud800"), 1, "lone surrogate"),
        (ToolCallDelta(0, "c", 5, "a"), 1, "chunk.name"),  # type: ignore[arg-type]
        (ToolCallDelta(0, "c", "n", None), 1, "chunk.arguments_delta must be a str"),  # type: ignore[arg-type]
        (BlockEnd(0, ImageBlock({1, 2})), 1, "chunk.block.attachment is not JSON"),  # type: ignore[arg-type]
        (
            Finish(FinishReason("stop"), replay_state=float("nan")),
            1,
            "chunk.replay_state",
        ),
        (
            Finish(FinishReason("stop", LlmFailure("m", "c", retry_after_ms=-0.0))),
            1,
            "retry_after_ms",
        ),
        (Usage(1, 2**60), 1, "chunk.output_tokens"),
        ("text-delta", 1, "must be"),
    ],
)
def test_push_refuses_what_cannot_be_recorded(
    chunk: Any, time: Any, expected: str
) -> None:
    acc = StreamAccumulator()
    acc.push(TextDelta(0, "ok"), 1)
    with pytest.raises(InvalidStreamChunkError) as info:
        acc.push(chunk, time)
    assert expected in str(info.value)
    assert acc.records() == (TextChunksRecord(1, 0, (), ("ok",)),)


def test_run_records_equal_the_constructed_ones() -> None:
    """The records a push builds are the record classes' own values (equal, of the
    exact class), and expand back to what was pushed."""
    acc = StreamAccumulator()
    pushed: list[tuple[int, StreamChunk]] = [
        (10, TextDelta(0, "a")),
        (12, TextDelta(0, "b")),
        (15, ReasoningDelta(1, "r")),
        (16, ReasoningDelta(1, "s")),
        (20, ToolCallDelta(2, "c1", "get", "{")),
        (23, ToolCallDelta(2, "c1", "get", "}")),
    ]
    for time_ms, chunk in pushed:
        acc.push(chunk, time_ms)
    records = acc.records()
    assert records == (
        TextChunksRecord(time0=10, index=0, dt=(2,), texts=("a", "b")),
        ReasoningChunksRecord(time0=15, index=1, dt=(1,), texts=("r", "s")),
        ToolCallChunksRecord(
            time0=20, index=2, dt=(3,), id="c1", args=("{", "}"), name="get"
        ),
    )
    assert [type(r) for r in records] == [
        TextChunksRecord,
        ReasoningChunksRecord,
        ToolCallChunksRecord,
    ]
    assert expand_stream(records) == pushed


@pytest.mark.parametrize(
    "block",
    [
        ToolCallBlock("c1", "get", "{}"),
        ToolCallBlock("c\u00e9", "g\u00e9t", '{"x": "\u00e9"}'),
    ],
    ids=repr,
)
def test_a_valid_tool_call_end_is_recorded(block: ToolCallBlock) -> None:
    acc = StreamAccumulator()
    chunk = BlockEnd(0, block)
    acc.push(chunk, 5)
    assert acc.records() == (RawChunkRecord(5, chunk),)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        (("c1", 7, "{}"), "name"),
        (("c1", "get", b"{}"), "arguments"),
        (("c1", "g\udfff", "{}"), "name"),
        ((None, "get", "{}"), "id"),
    ],
    ids=repr,
)
def test_an_invalid_tool_call_end_is_refused(fields: Any, field: str) -> None:
    acc = StreamAccumulator()
    with pytest.raises(InvalidStreamChunkError, match=field):
        acc.push(BlockEnd(0, ToolCallBlock(*fields)), 5)
    assert acc.records() == ()


def _pushed(times: list[int], texts: list[str]) -> StreamAccumulator:
    acc = StreamAccumulator()
    acc.push(BlockStart(3, "text"), times[0])
    for time_ms, text in zip(times[1:], texts, strict=True):
        acc.push(TextDelta(3, text), time_ms)
    return acc


def _extended(times: list[int], texts: list[str]) -> StreamAccumulator:
    acc = StreamAccumulator()
    acc.push(BlockStart(3, "text"), times[0])
    acc.push(TextDelta(3, texts[0]), times[1])
    assert acc.text_run() == 3
    acc.extend_text_run(times[2:4], texts[1:3])
    acc.extend_text_run([], [])
    acc.extend_text_run(times[4:], texts[3:])
    return acc


@pytest.mark.parametrize(
    "times",
    [
        [5, 10, 10, 12, 20, 21],
        [5, 10, -3, 12, 9, 21],
        # A gap the record cannot hold starts a new run, as ``push`` does.
        [5, 10, SAFE, -SAFE, 0, SAFE],
    ],
)
def test_extending_the_text_run_equals_pushing_each_delta(times: list[int]) -> None:
    texts = ["a", "b", "", "cd", "e"]
    pushed, extended = _pushed(times, texts), _extended(times, texts)
    assert extended.records() == pushed.records()
    assert extended.chunk_count == pushed.chunk_count == 6
    pushed.push(Usage(1, 2), 30)
    extended.push(Usage(1, 2), 30)
    assert extended.records() == pushed.records()


# --------------------------------------------------------------------------- expansion

text = st.text(st.characters(codec="utf-8"), max_size=6)
small = st.integers(0, 3)
chunks = st.one_of(
    st.builds(TextDelta, small, text),
    st.builds(ReasoningDelta, small, text),
    st.builds(
        ToolCallDelta,
        small,
        st.sampled_from(["", "c1", "c2"]),
        st.sampled_from([None, "", "f", "g"]),
        text,
    ),
    st.builds(BlockStart, small, st.sampled_from(["text", "reasoning", "tool-call"])),
    st.builds(
        BlockEnd,
        small,
        st.builds(TextBlock, text) | st.builds(ToolCallBlock, text, text, text),
    ),
    st.builds(Usage, small, small),
    st.builds(
        Finish,
        st.builds(FinishReason, st.sampled_from(["stop", "tool-calls", "max-tokens"])),
    ),
)
times = st.integers(-SAFE, SAFE) | st.integers(1_700_000_000_000, 1_700_000_000_100)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(chunks, times), max_size=30))
def test_expand_reproduces_every_chunk_and_time(
    pushes: list[tuple[StreamChunk, int]],
) -> None:
    records = pack(pushes)
    assert expand_stream(records) == [(t, c) for c, t in pushes]
    # packing is canonical: re-packing the expansion gives the same records
    assert pack([(c, t) for t, c in expand_stream(records)]) == records
    for record in records:
        if isinstance(record, (TextChunksRecord, ReasoningChunksRecord)):
            assert len(record.dt) == len(record.texts) - 1
        elif isinstance(record, ToolCallChunksRecord):
            assert len(record.dt) == len(record.args) - 1
            assert record.id and record.name != ""


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        (
            (TextChunksRecord(1, 0, (), ()),),
            "stream record 0 (text-chunks) texts must not be empty",
        ),
        (
            (ReasoningChunksRecord(1, 0, (1,), ("a",)),),
            "stream record 0 (reasoning-chunks) dt must have one entry fewer",
        ),
        (
            (RawChunkRecord(1, Usage(1, 1)), TextChunksRecord(1, 0, (), ("a", "b"))),
            "stream record 1 (text-chunks) dt",
        ),
        (
            (TextChunksRecord(SAFE, 0, (1,), ("a", "b")),),
            "member 1's time outside the safe integer range",
        ),
        ((TextChunksRecord(0, 0, (-SAFE, -1), ("a", "b", "c")),), "member 2's time"),
        (
            (ToolCallChunksRecord(1, 0, (), "", ("a",)),),
            "(tool-call-chunks) id must be a non-empty call id",
        ),
        (
            (ToolCallChunksRecord(1, 0, (), "c", ("a",), ""),),
            "(tool-call-chunks) name must be non-empty when present",
        ),
        ((ToolCallChunksRecord(1, 0, (), "c", ()),), "args must not be empty"),
        ((TextChunksRecord(1, 0, [], ("a",)),), "dt must be a tuple"),  # type: ignore[arg-type]
        ((TextChunksRecord(1.0, 0, (), ("a",)),), "time0 must be an int"),  # type: ignore[arg-type]
        ((RawChunkRecord(1, "chunk"),), "(chunk) chunk must be"),  # type: ignore[arg-type]
        (("text-chunks",), "stream record 0 (str) must be"),
        ([TextDelta(0, "a")], "stream record 0"),
        ("abc", "a stream must be a tuple"),
    ],
)
def test_expand_validates_strictly(records: Any, expected: str) -> None:
    with pytest.raises(SessionCorruptError) as info:
        expand_stream(records)
    assert expected in str(info.value)


# --------------------------------------------------------------------------- readers


def sample() -> tuple[Any, ...]:
    return pack(
        [
            (BlockStart(0, "reasoning"), 5),
            (ReasoningDelta(0, "hmm"), 9),
            (BlockStart(1, "text"), 10),
            (TextDelta(1, "Hel"), 12),
            (TextDelta(1, "lo"), 13),
            (Usage(1, 2), 14),
            (TextDelta(1, "!"), 15),
            (ToolCallDelta(2, "c", "f", "{}"), 16),
            (Usage(3, 4), 17),
            (Finish(FinishReason("tool-calls")), 18),
        ]
    )


def test_stream_text_joins_text_only() -> None:
    assert stream_text(sample()) == "Hello!"
    assert stream_text(()) == ""
    assert stream_text((RawChunkRecord(1, TextDelta(0, "raw")),)) == "raw"


def test_first_token_time() -> None:
    assert first_token_time(sample()) == 9
    assert first_token_time((RawChunkRecord(1, BlockStart(0, "text")),)) is None
    assert (
        first_token_time(
            (
                RawChunkRecord(1, BlockStart(0, "text")),
                RawChunkRecord(4, ToolCallDelta(0, "", None, "x")),
            )
        )
        == 4
    )


def test_has_visible_content() -> None:
    assert has_visible_content(sample())
    assert not has_visible_content(())
    assert not has_visible_content(
        pack([(TextDelta(0, " \n"), 1), (ReasoningDelta(1, "\t"), 2)])
    )
    assert not has_visible_content(pack([(ToolCallDelta(0, "c", "f", "{}"), 1)]))
    assert has_visible_content(
        pack([(ReasoningDelta(0, " "), 1), (ReasoningDelta(0, "x"), 2)])
    )
    assert has_visible_content((RawChunkRecord(1, BlockEnd(0, ReasoningBlock("r"))),))


def test_last_raw_chunk() -> None:
    assert last_raw_chunk(sample(), Usage) == Usage(3, 4)
    assert last_raw_chunk(sample(), Finish) == Finish(FinishReason("tool-calls"))
    assert last_raw_chunk(sample(), BlockEnd) is None
