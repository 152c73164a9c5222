"""``StreamAccumulator`` builds its run records without re-checking them: they equal
the records the classes construct; a tool-call block end is recorded as the full
check would have it."""

from __future__ import annotations

from typing import Any

import pytest

import dsh_trio as dsh
from dsh_trio.errors import InvalidStreamChunkError
from dsh_trio.session import StreamAccumulator, expand_stream
from dsh_trio.values import (
    RawChunkRecord,
    ReasoningChunksRecord,
    TextChunksRecord,
    ToolCallChunksRecord,
)


def test_run_records_equal_the_constructed_ones() -> None:
    acc = StreamAccumulator()
    pushed: list[tuple[int, dsh.StreamChunk]] = [
        (10, dsh.TextDelta(0, "a")),
        (12, dsh.TextDelta(0, "b")),
        (15, dsh.ReasoningDelta(1, "r")),
        (16, dsh.ReasoningDelta(1, "s")),
        (20, dsh.ToolCallDelta(2, "c1", "get", "{")),
        (23, dsh.ToolCallDelta(2, "c1", "get", "}")),
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
        dsh.ToolCallBlock("c1", "get", "{}"),
        dsh.ToolCallBlock("c\u00e9", "g\u00e9t", '{"x": "\u00e9"}'),
    ],
    ids=repr,
)
def test_a_valid_tool_call_end_is_recorded(block: dsh.ToolCallBlock) -> None:
    acc = StreamAccumulator()
    chunk = dsh.BlockEnd(0, block)
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
        acc.push(dsh.BlockEnd(0, dsh.ToolCallBlock(*fields)), 5)
    assert acc.records() == ()
