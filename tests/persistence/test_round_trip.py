"""Every event type survives JsonlPersistence unchanged (property test)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import trio
from hypothesis import HealthCheck, given, settings, strategies as st

from dsh_trio.persistence import _jsonl_load
from dsh_trio.persistence._jsonl import JsonlPersistence
from dsh_trio.session import register_event_type
from dsh_trio.values import (
    MAX_SAFE_INTEGER,
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
    SessionHeader,
    SessionId,
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
)

# Arbitrary unicode (control characters, U+2028, astral planes); hypothesis's text
# never produces lone surrogates, which UTF-8 cannot hold.
texts = st.text(max_size=12)
short = st.text(max_size=6)
safe_ints = st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
counts = st.integers(0, MAX_SAFE_INTEGER)
finite = st.floats(allow_nan=False, allow_infinity=False).filter(
    lambda f: not (f == 0.0 and str(f).startswith("-"))
)
json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | safe_ints | finite | texts,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(short, inner, max_size=3)
    ),
    max_leaves=6,
)
message_ids = texts.map(MessageId)

leaf_blocks = st.one_of(
    st.builds(TextBlock, texts),
    st.builds(ReasoningBlock, texts),
    st.builds(ImageBlock, json_values),
    st.builds(ToolCallBlock, short, short, texts),
)
blocks = st.one_of(
    leaf_blocks,
    st.builds(
        ToolResultBlock,
        short,
        st.lists(leaf_blocks, max_size=2).map(tuple),
        st.booleans(),
    ),
)
contents = st.lists(blocks, max_size=3).map(tuple)
sources = st.one_of(
    st.builds(UserSource),
    st.builds(
        PluginSource,
        short,
        st.none() | short,
        st.none()
        | st.lists(st.builds(ContextSection, short, short), max_size=2).map(tuple),
        st.none() | short,
    ),
    st.builds(ModelSource, short, short, json_values),
    st.builds(ToolSource, short),
)
user_messages = st.builds(UserMessage, message_ids, contents, sources)
model_sources = st.builds(ModelSource, short, short, json_values)
failures = st.builds(
    LlmFailure,
    texts,
    short,
    st.none() | st.integers(100, 599),
    st.none() | counts | finite.filter(lambda f: f >= 0),
    st.none() | short,
)
causes = st.one_of(
    st.builds(UserCancel),
    st.builds(ParentCancel),
    st.builds(HookCancel, texts),
    st.builds(DisposedCancel),
)
reasons = st.one_of(
    st.builds(Completed),
    st.builds(MaxTokens),
    st.builds(Blocked),
    st.builds(Aborted, causes),
    st.builds(Errored, failures),
    st.builds(Interrupted),
)
usages = st.builds(
    Usage,
    counts,
    counts,
    st.none() | counts,
    st.none() | counts,
    st.none() | counts,
)
chunks = st.one_of(
    st.builds(BlockStart, counts, st.sampled_from(["text", "reasoning", "tool-call"])),
    st.builds(TextDelta, counts, texts),
    st.builds(ReasoningDelta, counts, texts),
    st.builds(ToolCallDelta, counts, short, st.none() | short, texts),
    st.builds(BlockEnd, counts, blocks),
    usages,
    st.builds(
        Finish,
        st.one_of(
            st.builds(
                FinishReason, st.sampled_from(["stop", "tool-calls", "max-tokens"])
            ),
            st.builds(FinishReason, st.sampled_from(["aborted", "error"]), failures),
        ),
        json_values,
    ),
)


@st.composite
def runs(draw: st.DrawFn, cls: Any) -> Any:
    members = draw(st.lists(texts, min_size=1, max_size=4))
    dt = draw(
        st.lists(
            st.integers(0, 10_000), min_size=len(members) - 1, max_size=len(members) - 1
        )
    )
    return cls(draw(counts), draw(counts), tuple(dt), tuple(members))


@st.composite
def tool_runs(draw: st.DrawFn) -> ToolCallChunksRecord:
    args = draw(st.lists(texts, min_size=1, max_size=4))
    dt = draw(
        st.lists(st.integers(0, 10_000), min_size=len(args) - 1, max_size=len(args) - 1)
    )
    return ToolCallChunksRecord(
        draw(counts),
        draw(counts),
        tuple(dt),
        draw(short.filter(bool)),
        tuple(args),
        draw(st.none() | short.filter(bool)),
    )


records = st.one_of(
    runs(TextChunksRecord),
    runs(ReasoningChunksRecord),
    tool_runs(),
    st.builds(RawChunkRecord, counts, chunks),
)
streams = st.lists(records, max_size=4).map(tuple)
surface_ops = st.one_of(st.just("append"), st.builds(SurfaceReplace, counts, counts))
sources_seqs = st.none() | st.lists(counts, min_size=1, max_size=3).map(tuple)

# type → (data strategy, is a surface type)
DATA: dict[str, tuple[st.SearchStrategy[Any], bool]] = {
    "turn/start": (st.builds(TurnStart, counts), False),
    "turn/end": (st.builds(TurnEnd, counts, reasons), False),
    "step/start": (st.builds(StepStart, counts, counts), False),
    "step/end": (st.builds(StepEnd, counts, counts), False),
    "user/message": (user_messages, True),
    "system/message": (
        st.builds(
            SystemMessageData,
            turn=counts,
            step=counts,
            message=st.builds(SystemMessage, message_ids, contents, sources),
        ),
        True,
    ),
    "assistant/message": (
        st.builds(
            AssistantMessageData,
            turn=counts,
            step=counts,
            message=st.builds(AssistantMessage, message_ids, contents, model_sources),
            stream=streams,
            usage=st.none() | usages,
            interrupted=st.none() | st.booleans(),
        ),
        True,
    ),
    "assistant/attempt": (
        st.builds(AssistantAttemptData, turn=counts, step=counts, stream=streams),
        False,
    ),
    "tool/call": (
        st.builds(
            ToolCallData,
            turn=counts,
            step=counts,
            call_id=short,
            name=short,
            arguments=texts,
        ),
        False,
    ),
    "tool/result": (
        st.builds(
            ToolResultData,
            turn=counts,
            step=counts,
            message=user_messages,
            error=st.none() | st.builds(ToolErrorInfo, short, short),
            meta=json_values,
        ),
        True,
    ),
    "request/header": (
        st.builds(
            RequestHeaderData,
            header=st.builds(
                EpochHeader,
                config=st.builds(
                    CallConfig,
                    provider=short,
                    model=short,
                    reasoning_effort=st.none() | short,
                    max_tokens=st.none() | st.integers(1, MAX_SAFE_INTEGER),
                    temperature=st.none() | finite,
                    stop=st.none() | st.lists(short, max_size=2).map(tuple),
                ),
                adapter_defaults=st.none()
                | st.builds(
                    AdapterDefaults,
                    st.none() | st.booleans(),
                    st.none() | st.booleans(),
                ),
                tools=st.none() | st.lists(json_values, max_size=2).map(tuple),
            ),
            reason=st.sampled_from(["initial", "resume", "change", "series"]),
            starts_series=st.none() | st.booleans(),
        ),
        False,
    ),
    "request/context": (
        st.builds(
            RequestContextData,
            provider=short,
            model=short,
            context_window=st.none() | counts,
            system_prompt_update=st.none() | short,
        ),
        False,
    ),
    "session/end-seed": (st.builds(EndSeed, st.none() | st.booleans()), False),
    "agent/inbox/spliced": (
        st.builds(
            InboxSplice,
            target=st.sampled_from(list(InboxTarget)),
            start=counts,
            inserted=st.lists(user_messages, max_size=2).map(tuple),
            removed_count=st.none() | counts,
            outcome=st.none() | st.just("canceled"),
        ),
        False,
    ),
    # An unknown (plugin) type keeps plain JSON: marked ignorable (see ``build``),
    # or declared by the application.
    "plugin/custom-thing": (json_values, False),
    "plugin/declared-thing": (json_values, False),
}
register_event_type("plugin/declared-thing")


@st.composite
def event_drafts(draw: st.DrawFn) -> tuple[str, Any, Any, Any, int]:
    type_ = draw(st.sampled_from(sorted(DATA)))
    data_strategy, surface = DATA[type_]
    data = draw(data_strategy)
    op = draw(surface_ops) if surface else None
    sources_ = draw(sources_seqs) if surface else None
    return type_, data, op, sources_, draw(counts)


def build(drafts: list[tuple[str, Any, Any, Any, int]]) -> list[SessionEvent]:
    return [
        SessionEvent(
            seq=i,
            time=time,
            type=type_,
            data=data,
            surface_op=op,
            source_event_seqs=src,
            ignorable=type_ == "plugin/custom-thing",
        )
        for i, (type_, data, op, src, time) in enumerate(drafts)
    ]


_ids = itertools.count()


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    drafts=st.lists(event_drafts(), min_size=1, max_size=8),
    cuts=st.lists(st.integers(1, 8), max_size=3),
    syncs=st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_every_event_type_round_trips(
    tmp_path: Path, drafts: list[Any], cuts: list[int], syncs: list[bool]
) -> None:
    events = build(drafts)
    # Split into batches at arbitrary points; the stored log must not care.
    bounds = sorted({0, len(events), *(c for c in cuts if c < len(events))})
    batches = [events[a:b] for a, b in itertools.pairwise(bounds)]
    session_id = f"rt-{next(_ids)}"

    async def main() -> None:
        persistence = JsonlPersistence(tmp_path)
        writer = await persistence.create(
            SessionHeader(id=SessionId(session_id), created_at=1, cwd="/w")
        )
        try:
            for batch, sync in zip(batches, syncs, strict=False):
                await writer.append(batch, sync=sync)
            for batch in batches[len(syncs) :]:
                await writer.append(batch, sync=False)
        finally:
            await writer.close()
        reader, got = await JsonlPersistence(tmp_path).open(session_id)
        await reader.close()
        assert got == events
        # One line per event, every line valid JSON on its own.
        raw = (tmp_path / "--w--" / session_id / "session.v3.jsonl").read_bytes()
        lines = raw.split(b"\n")
        assert lines[-1] == b""
        assert len(lines) == len(events) + 2
        for line in lines[:-1]:
            json.loads(line)

    trio.run(main)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    drafts=st.lists(event_drafts(), min_size=1, max_size=8), block=st.integers(1, 64)
)
def test_the_streamed_read_does_not_depend_on_the_block_size(
    tmp_path: Path, drafts: list[Any], block: int
) -> None:
    """Lines spanning read blocks (and multi-byte characters split by them) load the same."""
    events = build(drafts)
    session_id = f"blocks-{next(_ids)}"

    async def main() -> None:
        persistence = JsonlPersistence(tmp_path)
        writer = await persistence.create(
            SessionHeader(id=SessionId(session_id), created_at=1, cwd="/w")
        )
        await writer.append(events, sync=True)
        await writer.close()
        old = _jsonl_load._BLOCK
        setattr(_jsonl_load, "_BLOCK", block)  # noqa: B010  # a Final, for this test only
        try:
            reader, got = await JsonlPersistence(tmp_path).open(session_id)
            await reader.close()
        finally:
            setattr(_jsonl_load, "_BLOCK", old)  # noqa: B010
        assert got == events

    trio.run(main)
