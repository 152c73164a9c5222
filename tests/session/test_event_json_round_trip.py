"""Every event type survives event_to_json -> json.dumps -> json.loads -> event_from_json."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import HealthCheck, given, settings, strategies as st

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
    event_from_json,
    event_to_json,
)

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
        opt(st.lists(text, max_size=3).map(tuple)),
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
seq_lists = opt(st.lists(nat, min_size=1, max_size=4).map(tuple))


@st.composite
def events(draw: st.DrawFn) -> SessionEvent:
    type_ = draw(st.sampled_from([*sorted(data_by_type), "plugin/custom-thing"]))
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
