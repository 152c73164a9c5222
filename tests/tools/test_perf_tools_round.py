"""The shortcuts of the one-call tool round give what the general paths give.

A body without a context parameter gets no :class:`ToolContext` made for it: its
outcomes and logged events are compared with those of the same body taking one,
for every kind of return value and failure. The short argument scanner (no hook for
integers) is compared with the general decode on short texts near its limits.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, strategies as st

from dsh_trio.errors import InvalidEventError
from dsh_trio.loop import CancelSignal
from dsh_trio.tools import ToolContext, _arguments, _outcome, tool
from dsh_trio.tools._scheduler import _Run
from dsh_trio.values import TextBlock, ToolCallData, ToolResultData

from .conftest import FakeAgent, call, drive, make_agent
from .test_fast_paths import FAST, RESULT_VALUES, call_ids, returns
from .test_scheduler import registry_of

# --------------------------------------------------------------------------- no context


class Stop(BaseException):
    """A body escaping with something that is not an ``Exception``."""


def _shape(agent: FakeAgent) -> list[tuple[object, ...]]:
    """The log without times and message ids."""
    out: list[tuple[object, ...]] = []
    for ev in agent.session.events:
        d: object = ev.data
        if isinstance(d, ToolResultData):
            m = d.message
            d = (d.turn, d.step, m.content, m.source, d.error, d.meta)
        out.append((ev.seq, ev.type, d, ev.surface_op, ev.source_event_seqs))
    return out


async def _run_one(value: object, call_id: str, takes_context: bool) -> object:
    """The log (and what escaped) of one call whose body gives back ``value``."""

    def give() -> object:
        if isinstance(value, BaseException):
            raise value
        return value

    if takes_context:

        @tool(name="body")
        async def with_context(ctx: ToolContext, x: int) -> object:
            return give()

        body = with_context
    else:

        @tool(name="body")
        async def without_context(x: int) -> object:
            return give()

        body = without_context
    agent = make_agent()
    escaped: object = None
    try:
        await drive(registry_of(body), agent, [call(call_id, "body", '{"x": 1}')])
    except (Stop, InvalidEventError) as exc:
        escaped = repr(exc)
    return escaped, _shape(agent)


@pytest.mark.parametrize("call_id", ["c1", "caf\xe9", "lone \ud800"], ids=repr)
@pytest.mark.parametrize(
    "value",
    [*RESULT_VALUES, None, ValueError("failed"), Stop("stopped")],
    ids=repr,
)
async def test_a_body_without_a_context_logs_what_one_with_a_context_logs(
    value: object, call_id: str
) -> None:
    without = await _run_one(value, call_id, takes_context=False)
    with_context = await _run_one(value, call_id, takes_context=True)
    assert without == with_context


async def test_a_body_without_a_context_gets_none_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(self: _Run, call: object) -> ToolContext:
        raise AssertionError("a context was made")

    monkeypatch.setattr(_Run, "_context", refuse)

    @tool
    async def plain(x: int) -> str:
        return str(x + 1)

    agent = make_agent()
    await drive(registry_of(plain), agent, [call("c1", "plain", '{"x": 1}')])
    result = [e.data for e in agent.session.events][-1]
    assert isinstance(result, ToolResultData)
    assert result.message.content[0].content == (TextBlock("2"),)
    assert isinstance(agent.session.events[0].data, ToolCallData)


@FAST
@given(value=returns, call_id=call_ids)
def test_settling_plain_text_without_a_context_matches_settling_with_one(
    value: object, call_id: str
) -> None:
    @tool
    async def body() -> str:
        return ""

    def context() -> ToolContext:
        return ToolContext(agent=None, call_id=call_id, signal=CancelSignal())  # type: ignore[arg-type]

    plain = _outcome._settle_plain(call_id, value)
    general = _outcome._settle(body, context(), value)
    if plain is not None:
        assert plain == general
        assert plain.checked == general.checked
    else:
        # Only plain ASCII text (with an ASCII call id) is settled without one.
        assert not (type(value) is str and value.isascii() and call_id.isascii())


# --------------------------------------------------------------------------- short scanner


def _result(raw: str) -> tuple[str, object]:
    try:
        return "ok", _arguments.parse_arguments(raw, "t")
    except Exception as exc:  # the comparison is the point
        return "error", (type(exc), str(exc))


def _general(raw: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, object]:
    with monkeypatch.context() as m:
        m.setattr(_arguments, "_decode_short", lambda raw: _arguments._UNDECIDED)
        return _result(raw)


def _fits(raw: str) -> str:
    assert len(raw) <= _arguments.MAX_ARGUMENT_DEPTH
    return raw


def test_short_text_cannot_hold_an_integer_over_the_digit_limit() -> None:
    # What lets the short scanner read integers with no hook.
    assert _arguments.MAX_ARGUMENT_DEPTH < _arguments.MAX_INTEGER_DIGITS


@pytest.mark.parametrize(
    "raw",
    [
        '{"x": 1}',
        '{"x": -0}',
        '{"x": ' + "9" * 55 + "}",
        '{"x": -' + "1" * 55 + "}",
        '{"x": 1.5, "y": [1, -2e3]}',
        '{"x": 1e999}',
        '{"x": -1e400}',
        '{"x": NaN}',
        '{"x": Infinity}',
        '{"x": -Infinity}',
        '{"x": 01}',
        '{"x": 1} ',
        '{"x": 1}{}',
        '{"x": }',
        "{",
    ],
)
def test_the_short_scanner_matches_the_general_decode(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _result(_fits(raw)) == _general(raw, monkeypatch)


@FAST
@given(
    value=st.dictionaries(
        st.text(alphabet="xy", max_size=2),
        st.one_of(
            st.integers(min_value=-(10**40), max_value=10**40),
            st.floats(allow_nan=False, allow_infinity=False),
            st.booleans(),
            st.none(),
        ),
        max_size=2,
    )
)
def test_short_numbers_decode_as_the_general_decode_reads_them(
    value: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = json.dumps(value)
    fast = _result(raw)
    assert fast == _general(raw, monkeypatch)
    if len(raw) <= _arguments.MAX_ARGUMENT_DEPTH:
        assert fast == ("ok", value)


def test_the_short_scanner_reads_integers_without_the_hooked_decoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(raw: str) -> object:
        raise AssertionError("the general decoder ran")

    class Refusing:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"the hooked decoder's {name} was used")

    monkeypatch.setattr(_arguments, "_decode", refuse)
    monkeypatch.setattr(_arguments, "_DECODER", Refusing())
    assert _arguments.parse_arguments('{"x": 12, "y": [-3]}', "t") == {
        "x": 12,
        "y": [-3],
    }
