"""``StreamAccumulator.push``: the common raw chunks skip the full shape check only
when it would pass; anything it would refuse is still refused, naming the problem."""

from __future__ import annotations

from typing import Any

import pytest

import dsh_trio as dsh
from dsh_trio.errors import InvalidStreamChunkError
from dsh_trio.session import StreamAccumulator, expand_stream
from dsh_trio.values import RawChunkRecord

BIG = 2**53


def bad(cls: Any, *args: Any, **kwargs: Any) -> Any:
    """Build a chunk with ill-typed fields (attrs does not check them)."""
    return cls(*args, **kwargs)


VALID: list[Any] = [
    dsh.BlockStart(0, "text"),
    dsh.BlockStart(1, "caf\u00e9"),
    dsh.BlockEnd(0, dsh.TextBlock("plain")),
    dsh.BlockEnd(0, dsh.TextBlock("caf\u00e9")),
    dsh.BlockEnd(2, dsh.ReasoningBlock("think")),
    dsh.BlockEnd(1, dsh.ToolCallBlock("c1", "get", '{"x": 1}')),
    dsh.Usage(1, 2),
    dsh.Usage(1, 2, 3, 4, 5),
    dsh.Finish(dsh.FinishReason("stop")),
    dsh.Finish(dsh.FinishReason("tool-calls")),
    dsh.Finish(dsh.FinishReason("max-tokens"), replay_state={"k": [1]}),
    dsh.Finish(dsh.FinishReason("error", dsh.LlmFailure("boom", "X"))),
]

INVALID: list[tuple[Any, str]] = [
    (bad(dsh.BlockStart, True, "text"), "index"),
    (bad(dsh.BlockStart, BIG, "text"), "index"),
    (bad(dsh.BlockStart, 0, 7), "block_type"),
    (bad(dsh.BlockStart, 0, "bad \ud800"), "block_type"),
    (bad(dsh.BlockEnd, 0.0, bad(dsh.TextBlock, "x")), "index"),
    (bad(dsh.BlockEnd, 0, bad(dsh.TextBlock, b"x")), "text"),
    (bad(dsh.BlockEnd, 0, bad(dsh.TextBlock, "\udfff")), "text"),
    (bad(dsh.BlockEnd, 0, bad(dsh.ToolCallBlock, 1, "get", "{}")), "id"),
    (bad(dsh.BlockEnd, 0, bad(dsh.ToolCallBlock, "c1", "get", None)), "arguments"),
    (bad(dsh.BlockEnd, 0, "not a block"), "block"),
    (bad(dsh.Usage, 1.5, 2), "input_tokens"),
    (bad(dsh.Usage, 1, -BIG), "output_tokens"),
    (bad(dsh.Usage, 1, 2, cache_read_tokens="3"), "cache_read_tokens"),
    (bad(dsh.Finish, bad(dsh.FinishReason, "done")), "kind"),
    (bad(dsh.Finish, bad(dsh.FinishReason, ["stop"])), "kind"),
    (
        bad(dsh.Finish, bad(dsh.FinishReason, "stop"), replay_state={1: 2}),
        "replay_state",
    ),
    (bad(dsh.Finish, "stop"), "reason"),
]


@pytest.mark.parametrize("chunk", VALID, ids=repr)
def test_a_valid_raw_chunk_is_recorded_as_is(chunk: Any) -> None:
    acc = StreamAccumulator()
    acc.push(chunk, 1000)
    assert acc.records() == (RawChunkRecord(1000, chunk),)
    assert expand_stream(acc.records()) == [(1000, chunk)]


@pytest.mark.parametrize(("chunk", "field"), INVALID, ids=repr)
def test_an_invalid_raw_chunk_is_refused_naming_the_field(
    chunk: Any, field: str
) -> None:
    acc = StreamAccumulator()
    acc.push(dsh.TextDelta(0, "kept"), 999)
    with pytest.raises(InvalidStreamChunkError, match=field):
        acc.push(chunk, 1000)
    assert acc.chunk_count == 1  # nothing of the refused chunk was recorded
