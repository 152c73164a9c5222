"""The typed data of session events, the header, and the event itself."""

from __future__ import annotations

import builtins
from typing import Literal, TypeAlias, TypeVar

import attrs

from ._causes import CallConfig, TurnEndReason
from ._chunks import StreamRecord, Usage
from ._content import AssistantMessage, SystemMessage, UserMessage
from ._ids import FORMAT_VERSION, InboxTarget, JsonValue, SessionId

T = TypeVar("T")

# --------------------------------------------------------------------------- session event data


@attrs.frozen(weakref_slot=False)
class SurfaceReplace:
    """Surface op: the nodes ``start_seq``..``end_seq`` are replaced by this event."""

    start_seq: int
    end_seq: int


SurfaceOp: TypeAlias = Literal["append"] | SurfaceReplace


@attrs.frozen(kw_only=True, weakref_slot=False)
class SessionHeader:
    """The first line of a session file: identity and lineage."""

    version: int = FORMAT_VERSION
    id: SessionId
    created_at: int
    cwd: str | None = None
    parent_session: str | None = None
    is_seeded: bool = False
    origin: str | None = None
    delegation_depth: int = 0
    agent_preset: str | None = None


@attrs.frozen(weakref_slot=False)
class TurnStart:
    """``turn/start``."""

    turn: int


@attrs.frozen(weakref_slot=False)
class TurnEnd:
    """``turn/end``."""

    turn: int
    reason: TurnEndReason


@attrs.frozen(weakref_slot=False)
class StepStart:
    """``step/start``."""

    turn: int
    step: int


@attrs.frozen(weakref_slot=False)
class StepEnd:
    """``step/end``."""

    turn: int
    step: int


@attrs.frozen(kw_only=True, weakref_slot=False)
class SystemMessageData:
    """``system/message``: a system-prompt node on the surface."""

    turn: int
    step: int
    message: SystemMessage


@attrs.frozen(kw_only=True, weakref_slot=False)
class AssistantMessageData:
    """``assistant/message``: one settled model attempt that produced a message."""

    turn: int
    step: int
    message: AssistantMessage
    stream: tuple[StreamRecord, ...]
    usage: Usage | None = None
    interrupted: bool | None = None


@attrs.frozen(kw_only=True, weakref_slot=False)
class AssistantAttemptData:
    """``assistant/attempt``: a settled attempt with no model-visible message."""

    turn: int
    step: int
    stream: tuple[StreamRecord, ...]


@attrs.frozen(kw_only=True, weakref_slot=False)
class ToolCallData:
    """``tool/call``."""

    turn: int
    step: int
    call_id: str
    name: str
    arguments: str


@attrs.frozen(weakref_slot=False)
class ToolErrorInfo:
    """``tool/result`` error facts."""

    name: str
    code: str


@attrs.frozen(kw_only=True, weakref_slot=False)
class ToolResultData:
    """``tool/result``: the result message of one call."""

    turn: int
    step: int
    message: UserMessage
    error: ToolErrorInfo | None = None
    meta: JsonValue = attrs.field(default=None, hash=False)


@attrs.frozen(weakref_slot=False)
class AdapterDefaults:
    """Which header config fields the adapter filled in."""

    reasoning_effort: bool | None = None
    max_tokens: bool | None = None


@attrs.frozen(kw_only=True, weakref_slot=False)
class EpochHeader:
    """The canonical request header: config, adapter-default markers, tool schemas."""

    config: CallConfig
    adapter_defaults: AdapterDefaults | None = None
    tools: tuple[JsonValue, ...] | None = attrs.field(default=None, hash=False)


RequestHeaderReason: TypeAlias = Literal["initial", "resume", "change", "series"]


@attrs.frozen(kw_only=True, weakref_slot=False)
class RequestHeaderData:
    """``request/header``."""

    header: EpochHeader
    reason: RequestHeaderReason
    starts_series: bool | None = None


@attrs.frozen(kw_only=True, weakref_slot=False)
class RequestContextData:
    """``request/context``."""

    provider: str
    model: str
    context_window: int | None = None
    system_prompt_update: str | None = None


@attrs.frozen(weakref_slot=False)
class EndSeed:
    """``session/end-seed``; ``inherited`` tags a fork's cut."""

    inherited: bool | None = None


@attrs.frozen(kw_only=True, weakref_slot=False)
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


@attrs.frozen(kw_only=True, weakref_slot=False)
class SessionEvent:
    """One entry of the session log. ``seq`` is its index; ``time`` epoch ms.

    ``data`` is the typed value of a known event type (the class
    :data:`EVENT_DATA_TYPES` names: ``TurnStart`` for ``turn/start``, the
    ``UserMessage`` itself for ``user/message``, ...) or the plain JSON of an unknown
    one, so its static type is a union. Where the code knows the type, take the data
    with :meth:`data_as`, which checks it (one ``isinstance``) and returns it typed;
    where it does not, narrow with ``isinstance`` or ``match``.

    Example::

        event = session.append("turn/start", TurnStart(3))
        event.data_as(TurnStart).turn  # 3
        event.data_as(TurnEnd)  # TypeError: session event 0 ("turn/start") holds
        #                         TurnStart data, not TurnEnd
        match event.data:
            case ToolCallData(name=name): ...
    """

    seq: int
    time: int
    type: str
    data: EventData | JsonValue = attrs.field(hash=False)
    surface_op: SurfaceOp | None = None
    source_event_seqs: tuple[int, ...] | None = None
    #: The reference's ``"ignorable": true`` marker: a reader that does not know
    #: the type may skip the event. Read from and written back to the log as is.
    ignorable: bool = False

    # ``builtins.type``: the ``type`` field shadows the builtin in this class body.
    def data_as(self, cls: builtins.type[T]) -> T:
        """``data``, checked to be an instance of ``cls`` and typed as one.

        Pure and cheap (one ``isinstance``); never copies.

        Raises:
            TypeError: ``data`` is not a ``cls``; the message names the event's seq
                and type, the class of its data and ``cls``.
        """
        data = self.data
        if isinstance(data, cls):
            return data
        raise TypeError(
            f'session event {self.seq} ("{self.type}") holds '
            f"{type(data).__name__} data, not {cls.__name__}"
        )
