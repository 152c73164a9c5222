"""What a tool body's return value becomes in the log, however the call ran.

A plain text result is settled without the general check, appended without a second
shape check, and a body that takes no context gets none made; a batch of calls and
single calls log the same; a call left without a result after a step gets exactly one
stand-in. Each is compared with the general path on generated values: the same
value or the same error, the same events.
"""

from __future__ import annotations

import pytest
import trio
from hypothesis import HealthCheck, given, settings, strategies as st

from dsh_trio.errors import InvalidEventError
from dsh_trio.loop import CancelSignal
from dsh_trio.loop._answers import answer_calls
from dsh_trio.session import Session
from dsh_trio.session._admission import typed_event_data
from dsh_trio.tools import ToolContext, ToolResult, _outcome, tool
from dsh_trio.tools._scheduler import _Run
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

from .conftest import FakeAgent, call, drive, make_agent, registry_of

FAST = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

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


# --------------------------------------------------------------------------- settling


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


# --------------------------------------------------------------------------- a body without a context


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


# --------------------------------------------------------------------------- appending


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


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize(
    "value", [*RESULT_VALUES, ValueError("lone \udc00 in a failure")], ids=repr
)
async def test_results_appended_without_the_second_check_match_checked_appends(
    value: object, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = await _run_calls(value, n)
    # A position the append cannot vouch for sends every result through the check.
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


# --------------------------------------------------------------------------- answering what is left


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
def test_a_step_call_without_a_result_gets_one_stand_in(
    log: list[tuple[str, str]], call_id: str
) -> None:
    """After a step, the one call of its message gets a stand-in result only when the
    log holds none for it: ``TOOL_OUTCOME_UNKNOWN`` citing its first ``tool/call``
    when that was written, else ``TOOL_NOT_STARTED`` citing nothing."""
    session, mark = _log(log)
    before = len(session.events)
    block = ToolCallBlock(call_id, "t", "")
    answer_calls(session, SessionId("s1"), 1, 1, [block], mark, None, CancelSignal())
    added = [
        (e.type, e.source_event_seqs, getattr(e.data, "error", None))
        for e in session.events[before:]
    ]
    if ("result", call_id) in log:
        assert added == []
        return
    calls = [
        e.seq
        for e in session.events[mark:before]
        if isinstance(e.data, ToolCallData) and e.data.call_id == call_id
    ]
    code = "TOOL_OUTCOME_UNKNOWN" if calls else "TOOL_NOT_STARTED"
    cited = (calls[0],) if calls else None
    assert [(t, seqs, err.code) for t, seqs, err in added] == [
        ("tool/result", cited, code)
    ]
