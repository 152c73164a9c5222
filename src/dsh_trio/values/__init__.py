"""Value types: ids, messages, content blocks, causes, chunks, event data, and the codec.

The bottom layer of dsh_trio: everything here is an immutable ``attrs`` value or a pure
function over them (what holds state lives where it is used: the pool of fresh message
ids in :mod:`dsh_trio.loop`, the compact event sequence of a restored log in
:mod:`dsh_trio.session`). The JSON form (the reference's wire and file shape:
camelCase keys, ``{"type": ...}`` / ``{"kind": ...}`` tagged unions) is described once,
in :mod:`dsh_trio.values._wire`; from that description are built the converter of
:mod:`dsh_trio.values._converter` (session events and headers are (de)serialised by
:mod:`dsh_trio.values._codec`), the checkers of :mod:`dsh_trio.values._checks` (with
the format's extra rules in :mod:`dsh_trio.values._rules`) and the log reader's fast
decoders and typed line check (:mod:`dsh_trio.values._fast`,
:mod:`dsh_trio.values._typed_lines`). Outside data is checked by the lossless-JSON
rules of :mod:`dsh_trio.values._json` and those checkers.
"""

from ._causes import (
    CANCEL_CAUSES as CANCEL_CAUSES,
    Aborted as Aborted,
    AgentOptions as AgentOptions,
    Blocked as Blocked,
    CallConfig as CallConfig,
    CancelCause as CancelCause,
    Completed as Completed,
    DisposedCancel as DisposedCancel,
    Enter as Enter,
    Errored as Errored,
    HookCancel as HookCancel,
    Interrupted as Interrupted,
    LegacyCancel as LegacyCancel,
    LlmFailure as LlmFailure,
    MaxTokens as MaxTokens,
    ParentCancel as ParentCancel,
    PreStepDecision as PreStepDecision,
    Reject as Reject,
    RequestErrorAction as RequestErrorAction,
    Retry as Retry,
    TurnEndReason as TurnEndReason,
    UserCancel as UserCancel,
)
from ._checks import check_typed as check_typed, checker as checker
from ._chunks import (
    BlockEnd as BlockEnd,
    BlockStart as BlockStart,
    Finish as Finish,
    FinishKind as FinishKind,
    FinishReason as FinishReason,
    RawChunkRecord as RawChunkRecord,
    ReasoningChunksRecord as ReasoningChunksRecord,
    ReasoningDelta as ReasoningDelta,
    StreamChunk as StreamChunk,
    StreamRecord as StreamRecord,
    TextChunksRecord as TextChunksRecord,
    TextDelta as TextDelta,
    ToolCallChunksRecord as ToolCallChunksRecord,
    ToolCallDelta as ToolCallDelta,
    Usage as Usage,
)
from ._codec import (
    data_from_json as data_from_json,
    decode_event as decode_event,
    event_from_json as event_from_json,
    event_to_json as event_to_json,
    header_from_json as header_from_json,
    header_to_json as header_to_json,
    typed_data as typed_data,
)
from ._content import (
    SYSTEM_PROMPT_PLUGIN as SYSTEM_PROMPT_PLUGIN,
    AssistantMessage as AssistantMessage,
    ContentBlock as ContentBlock,
    ContextSection as ContextSection,
    ImageBlock as ImageBlock,
    Message as Message,
    MessageSource as MessageSource,
    ModelSource as ModelSource,
    PluginSource as PluginSource,
    ReasoningBlock as ReasoningBlock,
    SystemMessage as SystemMessage,
    TextBlock as TextBlock,
    ToolCallBlock as ToolCallBlock,
    ToolResultBlock as ToolResultBlock,
    ToolSource as ToolSource,
    UserMessage as UserMessage,
    UserSource as UserSource,
)
from ._converter import (
    converter as converter,
    structure as structure,
    to_json as to_json,
)
from ._event_data import (
    EVENT_DATA_TYPES as EVENT_DATA_TYPES,
    SURFACE_TYPES as SURFACE_TYPES,
    AdapterDefaults as AdapterDefaults,
    AssistantAttemptData as AssistantAttemptData,
    AssistantMessageData as AssistantMessageData,
    EndSeed as EndSeed,
    EpochHeader as EpochHeader,
    EventData as EventData,
    InboxSplice as InboxSplice,
    RequestContextData as RequestContextData,
    RequestHeaderData as RequestHeaderData,
    RequestHeaderReason as RequestHeaderReason,
    SessionEvent as SessionEvent,
    SessionHeader as SessionHeader,
    StepEnd as StepEnd,
    StepStart as StepStart,
    SurfaceOp as SurfaceOp,
    SurfaceReplace as SurfaceReplace,
    SystemMessageData as SystemMessageData,
    ToolCallData as ToolCallData,
    ToolErrorInfo as ToolErrorInfo,
    ToolResultData as ToolResultData,
    TurnEnd as TurnEnd,
    TurnStart as TurnStart,
)
from ._event_types import (
    REFERENCE_EVENT_TYPES as REFERENCE_EVENT_TYPES,
    is_known_event_type as is_known_event_type,
    register_event_type as register_event_type,
)
from ._ids import (
    FORMAT_VERSION as FORMAT_VERSION,
    AgentStatus as AgentStatus,
    InboxTarget as InboxTarget,
    JsonValue as JsonValue,
    MessageId as MessageId,
    SessionId as SessionId,
    ToolCallId as ToolCallId,
    now_ms as now_ms,
)
from ._json import (
    MAX_SAFE_INTEGER as MAX_SAFE_INTEGER,
    DataShapeError as DataShapeError,
    check_json as check_json,
    check_json_value as check_json_value,
    utf8_ok as utf8_ok,
)
from ._jsonline import (
    JSON_ACCELERATOR as JSON_ACCELERATOR,
    parse_json_line as parse_json_line,
    parse_json_line_stdlib as parse_json_line_stdlib,
)
from ._rules import run_times_ok as run_times_ok
from ._slots import builder as builder, slot_setters as slot_setters, twin as twin
from ._typed_lines import (
    TYPED_EXCLUDED as TYPED_EXCLUDED,
    TypedLine as TypedLine,
    assistant_message_of as assistant_message_of,
    typed_line_check as typed_line_check,
)
from ._wire import shape as shape
