"""Every event type survives event_to_json -> json.dumps -> json.loads -> event_from_json."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dsh_trio.errors import SessionCorruptError
from dsh_trio.session import register_event_type
from dsh_trio.values import (
    EVENT_DATA_TYPES,
    Aborted,
    AdapterDefaults,
    AssistantAttemptData,
    AssistantMessage,
    AssistantMessageData,
    Blocked,
    BlockEnd,
    BlockStart,
    CallConfig,
    Completed,
    ContextSection,
    DataShapeError,
    DisposedCancel,
    EndSeed,
    EpochHeader,
    Errored,
    Finish,
    FinishReason,
    HookCancel,
    ImageBlock,
    InboxSplice,
    InboxTarget,
    Interrupted,
    LegacyCancel,
    LlmFailure,
    MaxTokens,
    MessageId,
    ModelSource,
    ParentCancel,
    PluginSource,
    RawChunkRecord,
    ReasoningBlock,
    ReasoningChunksRecord,
    ReasoningDelta,
    RequestContextData,
    RequestHeaderData,
    SessionEvent,
    StepEnd,
    StepStart,
    SurfaceReplace,
    SystemMessage,
    SystemMessageData,
    TextBlock,
    TextChunksRecord,
    TextDelta,
    ToolCallBlock,
    ToolCallChunksRecord,
    ToolCallData,
    ToolCallDelta,
    ToolErrorInfo,
    ToolResultBlock,
    ToolResultData,
    ToolSource,
    TurnEnd,
    TurnStart,
    Usage,
    UserCancel,
    UserMessage,
    UserSource,
    _codec,
    checker,
    data_from_json,
    decode_event,
    event_from_json,
    event_to_json,
)
from dsh_trio.values._fast import Slow, fast_data

SAFE = 2**53 - 1

# --------------------------------------------------------------------------- strategies

# Every code point UTF-8 can encode: control characters included, surrogates not.
text = st.text(st.characters(codec="utf-8"), max_size=12)
safe_int = st.integers(-SAFE, SAFE)
nat = st.integers(0, SAFE)
small_nat = st.integers(0, 50)
finite_float = st.floats(allow_nan=False, allow_infinity=False).filter(
    lambda f: not (f == 0.0 and math.copysign(1.0, f) < 0)
)


def opt(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | safe_int | finite_float | text,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3)
    ),
    max_leaves=8,
)

blocks: st.SearchStrategy[Any] = st.recursive(
    st.builds(TextBlock, text)
    | st.builds(ReasoningBlock, text)
    | st.builds(ImageBlock, json_values)
    | st.builds(ToolCallBlock, text, text, text),
    lambda inner: st.builds(
        ToolResultBlock,
        text,
        st.lists(inner, max_size=3).map(tuple),
        st.booleans(),
    ),
    max_leaves=6,
)
contents = st.lists(blocks, max_size=3).map(tuple)
model_source = st.builds(ModelSource, text, text, json_values)
sources = (
    st.builds(UserSource)
    | st.builds(
        PluginSource,
        text,
        opt(text),
        opt(st.lists(st.builds(ContextSection, text, text), max_size=3).map(tuple)),
        opt(text),
    )
    | model_source
    | st.builds(ToolSource, text)
)
message_ids = text.map(MessageId)
user_messages = st.builds(UserMessage, message_ids, contents, sources)
assistant_messages = st.builds(AssistantMessage, message_ids, contents, model_source)
system_messages = st.builds(SystemMessage, message_ids, contents, sources)

failures = st.builds(
    LlmFailure,
    text,
    text,
    opt(safe_int),
    opt(safe_int | finite_float),
    opt(text),
)
causes = st.sampled_from(
    [UserCancel(), ParentCancel(), DisposedCancel(), LegacyCancel()]
) | st.builds(HookCancel, text)
reasons = (
    st.sampled_from([Completed(), MaxTokens(), Blocked(), Interrupted()])
    | st.builds(Aborted, causes)
    | st.builds(Errored, failures)
)
usages = st.builds(Usage, nat, nat, opt(nat), opt(nat), opt(nat))
finish_reasons = st.builds(
    FinishReason,
    st.sampled_from(["stop", "tool-calls", "max-tokens", "aborted", "error"]),
    opt(failures),
)
chunks = (
    st.builds(
        BlockStart, small_nat, st.sampled_from(["text", "reasoning", "tool-call"])
    )
    | st.builds(TextDelta, small_nat, text)
    | st.builds(ReasoningDelta, small_nat, text)
    | st.builds(ToolCallDelta, small_nat, text, opt(text), text)
    | st.builds(BlockEnd, small_nat, blocks)
    | usages
    | st.builds(Finish, finish_reasons, json_values)
)


@st.composite
def runs(draw: st.DrawFn, cls: type[Any]) -> Any:
    members = draw(st.lists(text, min_size=1, max_size=4))
    dt = tuple(
        draw(
            st.lists(
                st.integers(-1000, 1000),
                min_size=len(members) - 1,
                max_size=len(members) - 1,
            )
        )
    )
    time0 = draw(st.integers(0, 2**50))
    index = draw(small_nat)
    if cls is ToolCallChunksRecord:
        return ToolCallChunksRecord(
            time0,
            index,
            dt,
            draw(text.filter(bool)),
            tuple(members),
            draw(opt(text.filter(bool))),
        )
    return cls(time0, index, dt, tuple(members))


records = (
    runs(TextChunksRecord)
    | runs(ReasoningChunksRecord)
    | runs(ToolCallChunksRecord)
    | st.builds(RawChunkRecord, nat, chunks)
)
streams = st.lists(records, max_size=4).map(tuple)

call_configs = st.builds(
    CallConfig,
    provider=text,
    model=text,
    reasoning_effort=opt(text),
    max_tokens=opt(nat),
    temperature=opt(finite_float),
    stop=opt(st.lists(text, max_size=3).map(tuple)),
)
epoch_headers = st.builds(
    EpochHeader,
    config=call_configs,
    adapter_defaults=opt(
        st.builds(AdapterDefaults, opt(st.booleans()), opt(st.booleans()))
    ),
    tools=opt(st.lists(json_values, min_size=1, max_size=3).map(tuple)),
)

turn = nat
data_by_type: dict[str, st.SearchStrategy[Any]] = {
    "turn/start": st.builds(TurnStart, turn),
    "turn/end": st.builds(TurnEnd, turn, reasons),
    "step/start": st.builds(StepStart, turn, turn),
    "step/end": st.builds(StepEnd, turn, turn),
    "user/message": user_messages,
    "system/message": st.builds(
        SystemMessageData, turn=turn, step=turn, message=system_messages
    ),
    "assistant/message": st.builds(
        AssistantMessageData,
        turn=turn,
        step=turn,
        message=assistant_messages,
        stream=streams,
        usage=opt(usages),
        interrupted=opt(st.booleans()),
    ),
    "assistant/attempt": st.builds(
        AssistantAttemptData, turn=turn, step=turn, stream=streams
    ),
    "tool/call": st.builds(
        ToolCallData, turn=turn, step=turn, call_id=text, name=text, arguments=text
    ),
    "tool/result": st.builds(
        ToolResultData,
        turn=turn,
        step=turn,
        message=user_messages,
        error=opt(st.builds(ToolErrorInfo, text, text)),
        meta=json_values,
    ),
    "request/header": st.builds(
        RequestHeaderData,
        header=epoch_headers,
        reason=st.sampled_from(["initial", "resume", "change", "series"]),
        starts_series=opt(st.booleans()),
    ),
    "request/context": st.builds(
        RequestContextData,
        provider=text,
        model=text,
        context_window=opt(nat),
        system_prompt_update=opt(text),
    ),
    "session/end-seed": st.builds(EndSeed, opt(st.booleans())),
    "agent/inbox/spliced": st.builds(
        InboxSplice,
        target=st.sampled_from(list(InboxTarget)),
        start=nat,
        inserted=st.lists(user_messages, max_size=2).map(tuple),
        removed_count=opt(nat),
        outcome=opt(st.just("canceled")),
    ),
}

surface_ops: st.SearchStrategy[Any] = st.just("append") | st.builds(
    SurfaceReplace, nat, nat
)
# Runs of consecutive seqs, which the writer spells as ranges ``[first, last]``.
seq_lists = opt(
    st.lists(st.tuples(nat, st.integers(1, 5)), min_size=1, max_size=4).map(
        lambda runs: tuple(s for start, n in runs for s in range(start, start + n))
    )
)


#: An event type no reader knows, and one the application declared.
UNKNOWN_TYPE = "plugin/custom-thing"
DECLARED_TYPE = "plugin/declared-thing"
register_event_type(DECLARED_TYPE)


@st.composite
def events(draw: st.DrawFn) -> SessionEvent:
    type_ = draw(st.sampled_from([*sorted(data_by_type), UNKNOWN_TYPE, DECLARED_TYPE]))
    data = draw(data_by_type[type_]) if type_ in data_by_type else draw(json_values)
    surface = type_ in {
        "system/message",
        "user/message",
        "assistant/message",
        "tool/result",
    }
    return SessionEvent(
        seq=draw(nat),
        time=draw(nat),
        type=type_,
        data=data,
        surface_op=draw(surface_ops) if surface else None,
        source_event_seqs=draw(seq_lists) if surface else None,
        # A row of an unknown type loads only when marked ignorable.
        ignorable=True if type_ == UNKNOWN_TYPE else draw(st.booleans()),
    )


# --------------------------------------------------------------------------- tests


def test_strategies_cover_every_known_event_type() -> None:
    assert set(data_by_type) == set(EVENT_DATA_TYPES)


def _round_trip(event: SessionEvent) -> SessionEvent:
    line = json.dumps(event_to_json(event), ensure_ascii=False, allow_nan=False)
    line.encode("utf-8")  # the file encoding must accept every string
    return event_from_json(json.loads(line))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events())
def test_every_event_round_trips_through_json(event: SessionEvent) -> None:
    assert _round_trip(event) == event


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(sorted(data_by_type)).flatmap(
        lambda t: st.tuples(st.just(t), data_by_type[t])
    )
)
def test_each_type_round_trips(type_and_data: tuple[str, Any]) -> None:
    type_, data = type_and_data
    surface = type_ in {
        "system/message",
        "user/message",
        "assistant/message",
        "tool/result",
    }
    event = SessionEvent(
        seq=3,
        time=1_700_000_000_000,
        type=type_,
        data=data,
        surface_op="append" if surface else None,
    )
    back = _round_trip(event)
    assert back == event
    assert type(back.data) is EVENT_DATA_TYPES[type_]


def test_absent_optionals_are_omitted_not_null() -> None:
    event = SessionEvent(
        seq=0,
        time=1,
        type="request/context",
        data=RequestContextData(provider="p", model="m"),
    )
    assert event_to_json(event) == {
        "type": "request/context",
        "seq": 0,
        "time": 1,
        "data": {"provider": "p", "model": "m"},
    }


# --------------------------------------------------------------------------- fast decoder

# The log reader structures event data through generated decoders (``values._fast``)
# and falls back to the general converter for whatever they do not take. These
# tests hold the two to the same values and the decoders to the checkers' verdict.

_odd_values: st.SearchStrategy[Any] = st.sampled_from(
    [
        None,
        True,
        False,
        0,
        -1,
        1.5,
        2**53,
        -(2**53),
        "",
        "x",
        "\ud800",
        "caf\u00e9",
        [],
        {},
        ["x"],
        [1],
        {"type": "text"},
        {"kind": "user"},
        "text",
        "usage",
        "next-turn",
    ]
)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*path, i))
    return out


@st.composite
def _mutated(draw: st.DrawFn, value: Any) -> Any:
    """``value`` (JSON) with one random change somewhere inside it."""
    value = json.loads(json.dumps(value))
    path = draw(st.sampled_from(_paths(value)))
    if not path:
        return draw(_odd_values | json_values)
    parent = value
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    op = draw(st.sampled_from(["replace", "delete", "add"]))
    if op == "replace" or (op == "delete" and isinstance(parent, list)):
        parent[last] = draw(_odd_values | json_values)
    elif op == "delete":
        del parent[last]
    elif isinstance(parent, dict):
        parent[draw(st.sampled_from(["extra", "type", "kind", "role", "id"]))] = draw(
            _odd_values
        )
    else:
        parent.append(draw(_odd_values | json_values))
    return value


def _same(fast: Any, general: Any) -> None:
    # ``repr`` tells apart what ``==`` does not: 1 and 1.0, an enum and its str.
    assert fast == general
    assert repr(fast) == repr(general)


def _typed_json(type_: str, data: Any) -> Any:
    return event_to_json(SessionEvent(seq=0, time=0, type=type_, data=data))["data"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(data_by_type)).flatmap(
        lambda t: st.tuples(st.just(t), data_by_type[t])
    )
)
def test_fast_decoder_gives_the_general_value(type_and_data: tuple[str, Any]) -> None:
    type_, data = type_and_data
    raw = json.loads(json.dumps(_typed_json(type_, data)))
    general = data_from_json(type_, raw)
    try:
        fast = fast_data(type_, raw)
    except Slow:
        # Only what the checkers refuse may leave the fast path.
        with pytest.raises(DataShapeError):
            checker(EVENT_DATA_TYPES[type_])(general)
        return
    _same(fast, general)
    _same(fast, data)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(data_by_type)).flatmap(
        lambda t: st.tuples(
            st.just(t),
            data_by_type[t].map(lambda d: _typed_json(t, d)).flatmap(_mutated),
        )
    )
)
def test_fast_decoder_takes_only_what_the_general_path_and_checker_take(
    type_and_raw: tuple[str, Any],
) -> None:
    type_, raw = type_and_raw
    try:
        fast = fast_data(type_, raw)
    except Slow:
        return  # the general converter decides, as it always did
    general = data_from_json(type_, raw)  # raises if the fast path took too much
    _same(fast, general)
    checker(EVENT_DATA_TYPES[type_])(fast)  # raises if the checker refuses it


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events().map(event_to_json).flatmap(lambda obj: st.just(obj) | _mutated(obj)))
def test_decode_event_matches_the_general_decoder(obj: Any) -> None:
    """Same event or the same error as structuring through the converter alone."""
    line = json.loads(json.dumps(obj))

    def general() -> SessionEvent:
        # The decoder with the fast path switched off.
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_codec, "fast_data", _always_slow)
            return event_from_json(json.loads(json.dumps(line)))

    try:
        expected: SessionEvent | str = general()
    except SessionCorruptError as exc:
        expected = f"{exc} seq={exc.seq}"
    try:
        got: SessionEvent | str = event_from_json(line)
    except SessionCorruptError as exc:
        got = f"{exc} seq={exc.seq}"
    if isinstance(expected, str):
        assert got == expected
    else:
        _same(got, expected)


def _always_slow(type_: str, data: object) -> Any:
    raise Slow


def test_decode_event_reports_data_the_checkers_refuse_as_unchecked() -> None:
    # The converter takes a lone surrogate in a text; the checker does not, so the
    # event must be re-checked by Session.restore.
    obj: dict[str, Any] = {
        "type": "user/message",
        "seq": 0,
        "time": 1,
        "data": {
            "role": "user",
            "id": "m",
            "content": [{"type": "text", "text": "\ud800"}],
        },
        "surfaceOp": "append",
    }
    _event, checked = decode_event(obj, 0)
    assert not checked
    _ok, checked = decode_event({**obj, "data": {**obj["data"], "content": []}}, 0)
    assert checked
    assert decode_event(
        {"type": "x/y", "seq": 0, "time": 1, "data": [1], "ignorable": True}, 0
    )[1]
