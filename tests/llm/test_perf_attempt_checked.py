"""``ModelStream.checked`` tells the plainly ASCII chunks apart without the general
repair; for any chunk it returns what the general repair would, counting repairs."""

from __future__ import annotations

from typing import Any, cast

from hypothesis import given, strategies as st

import dsh_trio as dsh
from dsh_trio.llm import ModelRequest
from dsh_trio.llm._runtime import ModelStream, _repaired


class Text(str):
    """A ``str`` subclass: never taken for a plain ``str``."""


def _texts() -> st.SearchStrategy[Any]:
    plain = st.text(st.characters(max_codepoint=127), max_size=4)
    wide = st.text(max_size=4)  # any code point but a lone surrogate
    # Text UTF-8 cannot encode (lone surrogates), which the repair replaces.
    broken = st.sampled_from(["\ud800", "x\udfffy", "caf\u00e9\udc80"])
    return st.one_of(plain, wide, broken, st.one_of(plain, broken).map(Text))


def _chunks() -> st.SearchStrategy[Any]:
    text = _texts()
    failure = st.builds(dsh.LlmFailure, text, text, st.none() | text)
    block = st.one_of(
        st.builds(dsh.TextBlock, text),
        st.builds(dsh.ReasoningBlock, text),
        st.builds(dsh.ToolCallBlock, text, text, text),
    )
    return st.one_of(
        st.builds(dsh.BlockStart, st.integers(0, 3), text),
        st.builds(dsh.TextDelta, st.integers(0, 3), text),
        st.builds(dsh.ReasoningDelta, st.integers(0, 3), text),
        st.builds(dsh.ToolCallDelta, st.integers(0, 3), text, st.none() | text, text),
        st.builds(dsh.BlockEnd, st.integers(0, 3), block),
        st.builds(dsh.Usage, st.integers(0, 9), st.integers(0, 9)),
        st.builds(dsh.Finish, st.builds(dsh.FinishReason, st.just("stop"))),
        st.builds(dsh.Finish, st.builds(dsh.FinishReason, st.just("error"), failure)),
    )


@given(_chunks())
def test_checked_is_the_general_repair(chunk: Any) -> None:
    stream = ModelStream(None, cast(ModelRequest, type("R", (), {"provider": "p"})))
    fixed = _repaired(chunk)
    got = stream.checked(chunk)
    if fixed is None:
        assert got is chunk
        assert stream._repaired == 0
    else:
        assert got == fixed
        assert stream._repaired == 1
