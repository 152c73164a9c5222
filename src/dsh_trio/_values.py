"""The value types of dsh_trio: ids, messages, content blocks, causes, reasons,
decisions, stream chunks and the typed data of session events.

Every class here is an immutable ``attrs`` value. Their JSON form (the reference's
wire and file shape: camelCase keys, ``{"type": ...}`` / ``{"kind": ...}`` tagged
unions) is produced by the one converter in :mod:`dsh_trio.session._codec`.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable
from typing import ClassVar, Literal, NewType, TypeAlias

import attrs

SessionId = NewType("SessionId", str)
MessageId = NewType("MessageId", str)
ToolCallId = NewType("ToolCallId", str)

#: A JSON value as it appears in session data (``dict``/``list`` are never mutated
#: by the runtime once accepted).
JsonValue: TypeAlias = (
    bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None
)


def new_message_id() -> MessageId:
    """Return a fresh random message id (uuid4 text)."""
    return MessageId(str(uuid.uuid4()))


# --------------------------------------------------------------------------- blocks


@attrs.frozen
class TextBlock:
    """Visible text."""

    TAG: ClassVar[str] = "text"
    text: str


@attrs.frozen
class ReasoningBlock:
    """Model reasoning text."""

    TAG: ClassVar[str] = "reasoning"
    text: str


@attrs.frozen
class ImageBlock:
    """An image attachment; ``attachment`` is JSON describing it (kept verbatim)."""

    TAG: ClassVar[str] = "image"
    attachment: JsonValue = attrs.field(hash=False)


@attrs.frozen
class ToolCallBlock:
    """A tool call as the model wrote it; ``arguments`` is raw JSON text, unparsed."""

    TAG: ClassVar[str] = "tool-call"
    id: str
    name: str
    arguments: str


@attrs.frozen
class ToolResultBlock:
    """The result of one tool call."""

    TAG: ClassVar[str] = "tool-result"
    tool_call_id: str
    content: tuple[ContentBlock, ...]
    is_error: bool = False


ContentBlock: TypeAlias = (
    TextBlock | ReasoningBlock | ImageBlock | ToolCallBlock | ToolResultBlock
)

# --------------------------------------------------------------------------- sources


@attrs.frozen
class UserSource:
    """The message came from the user."""

    TAG: ClassVar[str] = "user"


@attrs.frozen
class PluginSource:
    """The message came from a plugin (``form`` names its role, e.g. ``"snapshot"``)."""

    TAG: ClassVar[str] = "plugin"
    plugin: str
    form: str | None = None
    sections: tuple[str, ...] | None = None
    summary: str | None = None


@attrs.frozen
class ModelSource:
    """The message came from a model."""

    TAG: ClassVar[str] = "model"
    provider: str
    model: str
    replay_state: JsonValue = attrs.field(default=None, hash=False)


@attrs.frozen
class ToolSource:
    """The message carries the result of tool call ``call_id``."""

    TAG: ClassVar[str] = "tool"
    call_id: str


MessageSource: TypeAlias = UserSource | PluginSource | ModelSource | ToolSource

#: The plugin id the system-prompt projection stamps on what it writes.
SYSTEM_PROMPT_PLUGIN = "@deepseek-ai/dsh-system-prompt"

# --------------------------------------------------------------------------- messages


@attrs.frozen
class UserMessage:
    """A user-role message: caller input, injected context or a tool result."""

    ROLE: ClassVar[str] = "user"
    id: MessageId
    content: tuple[ContentBlock, ...]
    source: MessageSource = UserSource()


@attrs.frozen
class AssistantMessage:
    """A model's reply."""

    ROLE: ClassVar[str] = "assistant"
    id: MessageId
    content: tuple[ContentBlock, ...]
    source: ModelSource


@attrs.frozen
class SystemMessage:
    """A system prompt node."""

    ROLE: ClassVar[str] = "system"
    id: MessageId
    content: tuple[ContentBlock, ...]
    source: MessageSource = PluginSource(SYSTEM_PROMPT_PLUGIN)


Message: TypeAlias = UserMessage | AssistantMessage | SystemMessage


def user_message(
    text_or_blocks: str | ContentBlock | tuple[ContentBlock, ...] | list[ContentBlock],
    *,
    source: MessageSource | None = None,
    id: str | None = None,
) -> UserMessage:
    """Build a :class:`UserMessage` with a fresh id.

    Example::

        >>> m = user_message("hello")
        >>> m.content
        (TextBlock(text='hello'),)

    Args:
        text_or_blocks: plain text (one text block), one block, or a sequence of blocks.
        source: where the message comes from; :class:`UserSource` by default.
        id: an explicit message id; a uuid4 by default.
    """
    if isinstance(text_or_blocks, str):
        content: tuple[ContentBlock, ...] = (TextBlock(text_or_blocks),)
    elif isinstance(text_or_blocks, (tuple, list)):
        content = tuple(text_or_blocks)
    else:
        content = (text_or_blocks,)
    return UserMessage(
        id=MessageId(id) if id is not None else new_message_id(),
        content=content,
        source=source if source is not None else UserSource(),
    )


# --------------------------------------------------------------------------- enums


class InboxTarget(enum.StrEnum):
    """Which inbox list a message goes to."""

    NEXT_TURN = "next-turn"
    NEXT_STEP = "next-step"


class AgentStatus(enum.StrEnum):
    """The public status of an agent (maintenance reports ``IDLE``)."""

    IDLE = "idle"
    RUNNING = "running"


# --------------------------------------------------------------------------- causes


@attrs.frozen
class CancelCause:
    """Why an activity was cancelled. Match on the subclasses."""

    kind: ClassVar[str] = "unknown"


@attrs.frozen
class UserCancel(CancelCause):
    """The user cancelled (Ctrl-C, a stop button)."""

    kind: ClassVar[str] = "user"


@attrs.frozen
class ParentCancel(CancelCause):
    """The owning agent cancelled."""

    kind: ClassVar[str] = "parent"


@attrs.frozen
class HookCancel(CancelCause):
    """A hook cancelled, giving a reason."""

    kind: ClassVar[str] = "hook"
    reason: str


@attrs.frozen
class DisposedCancel(CancelCause):
    """The agent is being disposed."""

    kind: ClassVar[str] = "disposed"


@attrs.frozen
class LegacyCancel(CancelCause):
    """A cause read from an old log that recorded none (load only)."""

    kind: ClassVar[str] = "legacy"


CANCEL_CAUSES: dict[str, type[CancelCause]] = {
    c.kind: c
    for c in (UserCancel, ParentCancel, HookCancel, DisposedCancel, LegacyCancel)
}

# --------------------------------------------------------------------------- failures


@attrs.frozen
class LlmFailure:
    """The facts of a failed model call.

    ``code`` is one of the reference's codes (``RATE_LIMIT``, ``SERVER``, ``TIMEOUT``,
    ``TRANSPORT``, ``AUTH``, ``INVALID_REQUEST``, ``CONTEXT_WINDOW_EXCEEDED``,
    ``EMPTY_RESPONSE``, ``ABORTED``, ``UNKNOWN``, ...).
    """

    message: str
    code: str
    status: int | None = None
    retry_after_ms: int | float | None = None
    request_id: str | None = None


# --------------------------------------------------------------------------- reasons


@attrs.frozen
class Completed:
    """The turn ended naturally."""

    TAG: ClassVar[str] = "completed"


@attrs.frozen
class MaxTokens:
    """A step of the turn hit the output-token limit (sticky for the turn)."""

    TAG: ClassVar[str] = "max-tokens"


@attrs.frozen
class Blocked:
    """``agent/pre-step`` rejected the batch."""

    TAG: ClassVar[str] = "blocked"


@attrs.frozen
class Aborted:
    """The turn was cancelled; ``reason`` is the first cause."""

    TAG: ClassVar[str] = "aborted"
    reason: CancelCause


@attrs.frozen
class Errored:
    """The turn failed."""

    TAG: ClassVar[str] = "error"
    error: LlmFailure


@attrs.frozen
class Interrupted:
    """The process stopped mid-turn; written only by crash repair."""

    TAG: ClassVar[str] = "interrupted"


TurnEndReason: TypeAlias = (
    Completed | MaxTokens | Blocked | Aborted | Errored | Interrupted
)

# --------------------------------------------------------------------------- decisions


@attrs.frozen
class Reject:
    """``agent/pre-step``: end the turn ``Blocked``; the batch is dropped."""


def _message_tuple(messages: Iterable[UserMessage]) -> tuple[UserMessage, ...]:
    return tuple(messages)


@attrs.frozen
class Enter:
    """``agent/pre-step``: run a step with ``messages``.

    ``starts_request_series`` asks the first request of the step to start a new
    request series (system prompt normalised to node 0, header logged as a series).
    """

    messages: tuple[UserMessage, ...] = attrs.field(converter=_message_tuple)
    starts_request_series: bool = False


PreStepDecision: TypeAlias = Reject | Enter


@attrs.frozen
class Retry:
    """``agent/request-error``: run the failed attempt again inside the same step."""


RequestErrorAction: TypeAlias = Retry | None

# --------------------------------------------------------------------------- options


def _check_max_tokens(_inst: object, _attr: object, value: int | None) -> None:
    raw: object = value  # callers may pass anything at runtime
    if raw is None:
        return
    if isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0:
        raise ValueError(
            f"AgentOptions.max_tokens must be a positive int, got {value!r}"
        )


@attrs.frozen(kw_only=True)
class AgentOptions:
    """Per-agent model route and limits.

    Raises:
        ValueError: ``max_tokens`` is not a positive ``int`` (bools and floats too).
    """

    provider: str | None = None
    model: str | None = None
    reasoning_effort: str | None = None
    max_tokens: int | None = attrs.field(default=None, validator=_check_max_tokens)


@attrs.frozen(kw_only=True)
class CallConfig:
    """The route and knobs of one model request (what ``agent/request`` shapes)."""

    provider: str
    model: str
    reasoning_effort: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    stop: tuple[str, ...] | None = None


# --------------------------------------------------------------------------- chunks


@attrs.frozen
class BlockStart:
    """A content block opens at ``index``; ``block_type`` is the block's ``type``."""

    TAG: ClassVar[str] = "block-start"
    index: int
    block_type: str


@attrs.frozen
class TextDelta:
    """More text for block ``index``."""

    TAG: ClassVar[str] = "text-delta"
    index: int
    text: str


@attrs.frozen
class ReasoningDelta:
    """More reasoning for block ``index``."""

    TAG: ClassVar[str] = "reasoning-delta"
    index: int
    text: str


@attrs.frozen
class ToolCallDelta:
    """More arguments for tool-call block ``index``."""

    TAG: ClassVar[str] = "tool-call-delta"
    index: int
    id: str
    name: str | None
    arguments_delta: str


@attrs.frozen
class BlockEnd:
    """Block ``index`` is complete; ``block`` is authoritative."""

    TAG: ClassVar[str] = "block-end"
    index: int
    block: ContentBlock


@attrs.frozen
class Usage:
    """Token usage of the call (also the ``usage`` field of ``assistant/message``)."""

    TAG: ClassVar[str] = "usage"
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None


FinishKind: TypeAlias = Literal["stop", "tool-calls", "max-tokens", "aborted", "error"]


@attrs.frozen
class FinishReason:
    """Why a stream finished; ``failure`` is set for ``"aborted"`` and ``"error"``."""

    kind: FinishKind
    failure: LlmFailure | None = None


@attrs.frozen
class Finish:
    """The terminal chunk of a stream."""

    TAG: ClassVar[str] = "finish"
    reason: FinishReason
    replay_state: JsonValue = attrs.field(default=None, hash=False)


StreamChunk: TypeAlias = (
    BlockStart | TextDelta | ReasoningDelta | ToolCallDelta | BlockEnd | Usage | Finish
)

# --------------------------------------------------------------------------- stream records


@attrs.frozen
class TextChunksRecord:
    """A run of text deltas of one block (compact ``stream`` record)."""

    TAG: ClassVar[str] = "text-chunks"
    time0: int
    index: int
    dt: tuple[int, ...]
    texts: tuple[str, ...]


@attrs.frozen
class ReasoningChunksRecord:
    """A run of reasoning deltas of one block."""

    TAG: ClassVar[str] = "reasoning-chunks"
    time0: int
    index: int
    dt: tuple[int, ...]
    texts: tuple[str, ...]


@attrs.frozen
class ToolCallChunksRecord:
    """A run of tool-call argument deltas of one block and call."""

    TAG: ClassVar[str] = "tool-call-chunks"
    time0: int
    index: int
    dt: tuple[int, ...]
    id: str
    args: tuple[str, ...]
    name: str | None = None


@attrs.frozen
class RawChunkRecord:
    """Any other chunk, verbatim, with its receive time."""

    TAG: ClassVar[str] = "chunk"
    time: int
    chunk: StreamChunk


StreamRecord: TypeAlias = (
    TextChunksRecord | ReasoningChunksRecord | ToolCallChunksRecord | RawChunkRecord
)

# --------------------------------------------------------------------------- session event data


@attrs.frozen
class SurfaceReplace:
    """Surface op: the nodes ``start_seq``..``end_seq`` are replaced by this event."""

    start_seq: int
    end_seq: int


SurfaceOp: TypeAlias = Literal["append"] | SurfaceReplace


@attrs.frozen(kw_only=True)
class SessionHeader:
    """The first line of a session file: identity and lineage."""

    version: int = 3
    id: SessionId
    created_at: int
    cwd: str | None = None
    parent_session: str | None = None
    is_seeded: bool = False
    origin: str | None = None
    delegation_depth: int = 0
    agent_preset: str | None = None


@attrs.frozen
class TurnStart:
    """``turn/start``."""

    turn: int


@attrs.frozen
class TurnEnd:
    """``turn/end``."""

    turn: int
    reason: TurnEndReason


@attrs.frozen
class StepStart:
    """``step/start``."""

    turn: int
    step: int


@attrs.frozen
class StepEnd:
    """``step/end``."""

    turn: int
    step: int


@attrs.frozen(kw_only=True)
class SystemMessageData:
    """``system/message``: a system-prompt node on the surface."""

    turn: int
    step: int
    message: SystemMessage


@attrs.frozen(kw_only=True)
class AssistantMessageData:
    """``assistant/message``: one settled model attempt that produced a message."""

    turn: int
    step: int
    message: AssistantMessage
    stream: tuple[StreamRecord, ...]
    usage: Usage | None = None
    interrupted: bool | None = None


@attrs.frozen(kw_only=True)
class AssistantAttemptData:
    """``assistant/attempt``: a settled attempt with no model-visible message."""

    turn: int
    step: int
    stream: tuple[StreamRecord, ...]


@attrs.frozen(kw_only=True)
class ToolCallData:
    """``tool/call``."""

    turn: int
    step: int
    call_id: str
    name: str
    arguments: str


@attrs.frozen
class ToolErrorInfo:
    """``tool/result`` error facts."""

    name: str
    code: str


@attrs.frozen(kw_only=True)
class ToolResultData:
    """``tool/result``: the result message of one call."""

    turn: int
    step: int
    message: UserMessage
    error: ToolErrorInfo | None = None
    meta: JsonValue = attrs.field(default=None, hash=False)


@attrs.frozen
class AdapterDefaults:
    """Which header config fields the adapter filled in."""

    reasoning_effort: bool | None = None
    max_tokens: bool | None = None


@attrs.frozen(kw_only=True)
class EpochHeader:
    """The canonical request header: config, adapter-default markers, tool schemas."""

    config: CallConfig
    adapter_defaults: AdapterDefaults | None = None
    tools: tuple[JsonValue, ...] | None = attrs.field(default=None, hash=False)


RequestHeaderReason: TypeAlias = Literal["initial", "resume", "change", "series"]


@attrs.frozen(kw_only=True)
class RequestHeaderData:
    """``request/header``."""

    header: EpochHeader
    reason: RequestHeaderReason
    starts_series: bool | None = None


@attrs.frozen(kw_only=True)
class RequestContextData:
    """``request/context``."""

    provider: str
    model: str
    context_window: int | None = None
    system_prompt_update: str | None = None


@attrs.frozen
class EndSeed:
    """``session/end-seed``; ``inherited`` tags a fork's cut."""

    inherited: bool | None = None


@attrs.frozen(kw_only=True)
class InboxSplice:
    """``agent/inbox/spliced``: one normalised inbox mutation."""

    target: InboxTarget
    start: int
    inserted: tuple[UserMessage, ...] = ()
    removed_count: int | None = None
    outcome: Literal["canceled"] | None = None


EventData: TypeAlias = (
    TurnStart
    | TurnEnd
    | StepStart
    | StepEnd
    | UserMessage
    | SystemMessageData
    | AssistantMessageData
    | AssistantAttemptData
    | ToolCallData
    | ToolResultData
    | RequestHeaderData
    | RequestContextData
    | EndSeed
    | InboxSplice
)

#: Event type → typed data class. Types not listed keep plain JSON data.
EVENT_DATA_TYPES: dict[str, type[EventData]] = {
    "turn/start": TurnStart,
    "turn/end": TurnEnd,
    "step/start": StepStart,
    "step/end": StepEnd,
    "user/message": UserMessage,
    "system/message": SystemMessageData,
    "assistant/message": AssistantMessageData,
    "assistant/attempt": AssistantAttemptData,
    "tool/call": ToolCallData,
    "tool/result": ToolResultData,
    "request/header": RequestHeaderData,
    "request/context": RequestContextData,
    "session/end-seed": EndSeed,
    "agent/inbox/spliced": InboxSplice,
}

#: Event types that must carry a ``surface_op`` (and only these may).
SURFACE_TYPES = frozenset(
    {"system/message", "user/message", "assistant/message", "tool/result"}
)


@attrs.frozen(kw_only=True)
class SessionEvent:
    """One entry of the session log. ``seq`` is its index; ``time`` epoch ms."""

    seq: int
    time: int
    type: str
    data: EventData | JsonValue = attrs.field(hash=False)
    surface_op: SurfaceOp | None = None
    source_event_seqs: tuple[int, ...] | None = None
