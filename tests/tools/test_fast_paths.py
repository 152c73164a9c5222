"""The shortcuts of a tool call give what the general path gives.

Each shortcut (the shared JSON decoder, the unchecked result block of plain ASCII
text, the result appended without a second shape check, the one-call answer check
after a step) is compared with the general path it stands in for, on generated
input: the same value or the same error, the same events.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings, strategies as st

from dsh_trio.errors import InvalidEventError
from dsh_trio.loop import CancelSignal
from dsh_trio.loop._answers import answer_calls
from dsh_trio.session import Session
from dsh_trio.session._admission import typed_event_data
from dsh_trio.tools import ToolContext, ToolResult, _arguments, _outcome, tool
from dsh_trio.tools._arguments import ArgumentsSpec
from dsh_trio.tools._scheduler import _Run
from dsh_trio.tools._specs import convert_fields
from dsh_trio.values import (
    ImageBlock,
    MessageId,
    SessionId,
    TextBlock,
    ToolCallBlock,
    ToolCallData,
    ToolResultBlock,
    ToolResultData,
    ToolSource,
    UserMessage,
)

from .conftest import FakeAgent, call, drive, make_agent
from .test_scheduler import registry_of

FAST = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def _outcome_of(fn: Any, *args: Any) -> tuple[str, object]:
    """``("ok", value)`` or ``("error", (type, message))`` of ``fn(*args)``."""
    try:
        return "ok", fn(*args)
    except Exception as exc:  # the comparison is the point
        return "error", (type(exc), str(exc))


# --------------------------------------------------------------------------- decoding

json_texts = st.one_of(
    st.text(),
    st.text(alphabet='{}[]":,0123456789.eE-+ \\ufnrtalsNIy\ufeff\ud800'),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        max_leaves=12,
    ).map(lambda v: json.dumps(v, ensure_ascii=False)),
    st.sampled_from(["\ufeff{}", '\ufeff{"x": 1}', "{} x", "1e999", "NaN", "[1,]"]),
)


@FAST
@given(raw=json_texts)
def test_the_shared_decoder_decodes_as_json_loads_with_the_hooks(raw: str) -> None:
    def general(text: str) -> object:
        return json.loads(
            text,
            parse_constant=_arguments._reject_constant,
            parse_int=_arguments._parse_int,
            parse_float=_arguments._parse_float,
        )

    fast, slow = _outcome_of(_arguments._decode, raw), _outcome_of(general, raw)
    if fast[0] == "ok" and slow[0] == "ok" and fast[1] != fast[1]:
        return  # NaN is refused by the hooks, so this is unreachable; keep it total
    assert fast == slow


@FAST
@given(
    value=st.dictionaries(
        st.sampled_from(["a", "b", "c", "d", "x"]),
        st.one_of(st.integers(), st.text(max_size=3), st.none()),
    )
)
def test_the_argument_check_with_known_keys_matches_the_one_without(
    value: dict[str, object],
) -> None:
    @tool
    async def spec_of(a: int, b: str = "", c: int | None = None) -> str:
        return ""

    spec = spec_of._arguments
    assert isinstance(spec, ArgumentsSpec)
    assert spec.keys == frozenset({"a", "b", "c"})
    fields = spec.fields
    with_keys = _outcome_of(convert_fields, fields, value, "", "argument", spec.keys)
    without = _outcome_of(convert_fields, fields, value, "", "argument")
    assert with_keys == without


def test_the_known_keys_are_no_part_of_the_spec_equality() -> None:
    @tool
    async def one(a: int) -> str:
        return ""

    spec = one._arguments
    same = ArgumentsSpec(spec.fields)
    assert same == spec and hash(same) == hash(spec)
    assert repr(same) == repr(spec) and "keys" not in repr(spec)


# --------------------------------------------------------------------------- settling

returns = st.one_of(
    st.text(),
    st.text(alphabet="ab\x00\x7f\xe9\ud800\udfff\U0001f600"),
    st.builds(TextBlock, st.text(max_size=5)),
    st.lists(st.builds(TextBlock, st.text(max_size=5)), max_size=3),
    st.builds(
        ToolResult,
        st.text(max_size=5),
        is_error=st.booleans(),
        meta=st.one_of(st.none(), st.integers(), st.just(float("nan"))),
    ),
    st.integers(),
    st.none(),
)
call_ids = st.one_of(st.just("call_1"), st.text(min_size=1, max_size=4))


@FAST
@given(value=returns, call_id=call_ids, conclude=st.booleans())
def test_settling_plain_text_matches_the_checked_path(
    value: object, call_id: str, conclude: bool
) -> None:
    @tool
    async def body(ctx: ToolContext) -> str:
        return ""

    def context() -> ToolContext:
        ctx = ToolContext(agent=None, call_id=call_id, signal=CancelSignal())  # type: ignore[arg-type]
        if conclude:
            ctx.conclude_turn()
        return ctx

    fast = _outcome._settle(body, context(), value)
    slow = _outcome._settle_checked(body, context(), value)
    assert fast == slow
    assert fast.checked == slow.checked
    if fast.checked:
        # What the result append relies on: the block of a checked outcome passes.
        block = ToolResultBlock(call_id, fast.content, is_error=fast.is_error)
        data = ToolResultData(
            turn=1,
            step=1,
            message=UserMessage(
                id=MessageId("m1"), content=(block,), source=ToolSource(call_id)
            ),
            error=fast.error,
            meta=fast.meta,
        )
        typed_event_data("tool/result", data, 5)


# --------------------------------------------------------------------------- appending


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


async def _run_calls(value: object, n: int) -> tuple[str, list[tuple[object, ...]]]:
    @tool(parallel_safe=True)
    async def body(ctx: ToolContext) -> object:
        if isinstance(value, Exception):
            raise value
        return value

    agent = make_agent()
    calls = [call(f"c{i}", "body") for i in range(n)]
    try:
        await drive(registry_of(body), agent, calls)
    except InvalidEventError as exc:
        return f"refused: {exc}", _shape(agent)
    return "ok", _shape(agent)


#: What tool bodies return in the result-recording tests: text (plain, empty,
#: non-ASCII, a lone surrogate), blocks, ToolResult variants and a non-text value.
RESULT_VALUES: tuple[object, ...] = (
    "plain",
    "",
    "caf\xe9",
    "lone \ud800",
    TextBlock("block"),
    [TextBlock("a"), ImageBlock({"url": "x"})],
    ToolResult("meta", meta={"k": [1, 2.5]}),
    ToolResult("failed", is_error=True),
    ToolResult("bad meta", meta=2**60),
    42,
)


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize(
    "value", [*RESULT_VALUES, ValueError("lone \udc00 in a failure")], ids=repr
)
async def test_results_appended_without_the_second_check_match_checked_appends(
    value: object, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = await _run_calls(value, n)
    monkeypatch.setattr(_Run, "_safe_position", lambda self, call: False)
    general = await _run_calls(value, n)
    assert fast == general


async def test_a_batch_and_single_calls_log_the_same_events() -> None:
    @tool(parallel_safe=True)
    async def echo(ctx: ToolContext, x: int) -> str:
        await trio.lowlevel.checkpoint()
        return str(x + 1)

    batch = make_agent()
    await drive(
        registry_of(echo),
        batch,
        [call("a", "echo", '{"x": 1}'), call("b", "echo", '{"x": 2}')],
    )
    single = make_agent()
    for block in (call("a", "echo", '{"x": 1}'), call("b", "echo", '{"x": 2}')):
        single.signal = CancelSignal()
        await drive(registry_of(echo), single, [block])

    def per_call(agent: FakeAgent) -> dict[str, list[tuple[object, ...]]]:
        # Each call's events without seqs: its tool/call, then its tool/result.
        out: dict[str, list[tuple[object, ...]]] = {}
        for _seq, type_, data, op, _sources in _shape(agent):
            call_id = data.call_id if isinstance(data, ToolCallData) else data[3]  # type: ignore[index]
            key = call_id.call_id if isinstance(call_id, ToolSource) else call_id
            out.setdefault(str(key), []).append((type_, data, op))
        return out

    assert per_call(batch) == per_call(single)
    assert [t for _, t, *_ in _shape(single)] == ["tool/call", "tool/result"] * 2


# --------------------------------------------------------------------------- answering


def _log(entries: list[tuple[str, str]]) -> tuple[Session, int]:
    """A session holding ``("call"|"result", call_id)`` tool events after a marker."""
    session = Session.create("s1")
    session.append("custom/marker", {"n": 0})
    mark = session.next_seq
    seqs: dict[str, int] = {}
    for kind, call_id in entries:
        if kind == "call":
            seqs[call_id] = session.append(
                "tool/call",
                ToolCallData(turn=1, step=1, call_id=call_id, name="t", arguments=""),
            ).seq
        else:
            session.append(
                "tool/result",
                ToolResultData(
                    turn=1,
                    step=1,
                    message=UserMessage(
                        id=MessageId(f"m{session.next_seq}"),
                        content=(ToolResultBlock(call_id, (TextBlock("r"),)),),
                        source=ToolSource(call_id),
                    ),
                ),
                surface_op="append",
                source_event_seqs=(seqs[call_id],) if call_id in seqs else None,
            )
    return session, mark


entries = st.lists(
    st.tuples(st.sampled_from(["call", "result"]), st.sampled_from(["a", "b"])),
    max_size=5,
)


@FAST
@given(log=entries, call_id=st.sampled_from(["a", "b"]))
def test_answering_one_call_matches_the_general_check(
    log: list[tuple[str, str]], call_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh_trio.loop import _answers

    block = ToolCallBlock(call_id, "t", "")
    logged = []
    for general in (False, True):
        session, mark = _log(log)
        with monkeypatch.context() as m:
            if general:
                m.setattr(_answers, "_answered", lambda events, call_id: False)
            answer_calls(
                session, SessionId("s1"), 1, 1, [block], mark, None, CancelSignal()
            )
        logged.append(
            [
                (e.type, e.source_event_seqs, getattr(e.data, "error", None))
                for e in session.events
            ]
        )
    assert logged[0] == logged[1]
    # And what either should do: a stand-in only for a call with no result.
    added = logged[0][1 + len(log) :]
    if ("result", call_id) in log:
        assert added == []
    else:
        started = ("call", call_id) in log
        code = "TOOL_OUTCOME_UNKNOWN" if started else "TOOL_NOT_STARTED"
        assert [(t, err.code) for t, _, err in added] == [("tool/result", code)]
