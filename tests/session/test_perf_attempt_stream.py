"""``StreamAccumulator.extend_text_run`` records what ``push`` of each delta would."""

from __future__ import annotations

import pytest

from dsh_trio.session import StreamAccumulator
from dsh_trio.values import MAX_SAFE_INTEGER, BlockStart, TextDelta, Usage


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
        [5, 10, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 0, MAX_SAFE_INTEGER],
    ],
)
def test_extending_the_run_equals_pushing_each_delta(times: list[int]) -> None:
    texts = ["a", "b", "", "cd", "e"]
    pushed, extended = _pushed(times, texts), _extended(times, texts)
    assert extended.records() == pushed.records()
    assert extended.chunk_count == pushed.chunk_count == 6
    pushed.push(Usage(1, 2), 30)
    extended.push(Usage(1, 2), 30)
    assert extended.records() == pushed.records()
