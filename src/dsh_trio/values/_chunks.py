"""Stream chunks of the model seam and the compact stream records of the log."""

from __future__ import annotations

from typing import ClassVar, Literal, TypeAlias

import attrs

from ._causes import LlmFailure
from ._content import ContentBlock
from ._ids import JsonValue

# --------------------------------------------------------------------------- chunks


@attrs.frozen(weakref_slot=False)
class BlockStart:
    """A content block opens at ``index``; ``block_type`` is the block's ``type``."""

    TAG: ClassVar[str] = "block-start"
    index: int
    block_type: str


@attrs.frozen(weakref_slot=False)
class TextDelta:
    """More text for block ``index``."""

    TAG: ClassVar[str] = "text-delta"
    index: int
    text: str


@attrs.frozen(weakref_slot=False)
class ReasoningDelta:
    """More reasoning for block ``index``."""

    TAG: ClassVar[str] = "reasoning-delta"
    index: int
    text: str


@attrs.frozen(weakref_slot=False)
class ToolCallDelta:
    """More arguments for tool-call block ``index``."""

    TAG: ClassVar[str] = "tool-call-delta"
    index: int
    id: str
    name: str | None
    arguments_delta: str


@attrs.frozen(weakref_slot=False)
class BlockEnd:
    """Block ``index`` is complete; ``block`` is authoritative."""

    TAG: ClassVar[str] = "block-end"
    index: int
    block: ContentBlock


@attrs.frozen(weakref_slot=False)
class Usage:
    """Token usage of the call (also the ``usage`` field of ``assistant/message``)."""

    TAG: ClassVar[str] = "usage"
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None


FinishKind: TypeAlias = Literal["stop", "tool-calls", "max-tokens", "aborted", "error"]


@attrs.frozen(weakref_slot=False)
class FinishReason:
    """Why a stream finished; ``failure`` is set for ``"aborted"`` and ``"error"``."""

    kind: FinishKind
    failure: LlmFailure | None = None


@attrs.frozen(weakref_slot=False)
class Finish:
    """The terminal chunk of a stream."""

    TAG: ClassVar[str] = "finish"
    reason: FinishReason
    replay_state: JsonValue = attrs.field(default=None, hash=False)


StreamChunk: TypeAlias = (
    BlockStart | TextDelta | ReasoningDelta | ToolCallDelta | BlockEnd | Usage | Finish
)

# --------------------------------------------------------------------------- stream records


@attrs.frozen(weakref_slot=False)
class TextChunksRecord:
    """A run of text deltas of one block (compact ``stream`` record)."""

    TAG: ClassVar[str] = "text-chunks"
    time0: int
    index: int
    dt: tuple[int, ...]
    texts: tuple[str, ...]


@attrs.frozen(weakref_slot=False)
class ReasoningChunksRecord:
    """A run of reasoning deltas of one block."""

    TAG: ClassVar[str] = "reasoning-chunks"
    time0: int
    index: int
    dt: tuple[int, ...]
    texts: tuple[str, ...]


@attrs.frozen(weakref_slot=False)
class ToolCallChunksRecord:
    """A run of tool-call argument deltas of one block and call."""

    TAG: ClassVar[str] = "tool-call-chunks"
    time0: int
    index: int
    dt: tuple[int, ...]
    id: str
    args: tuple[str, ...]
    name: str | None = None


@attrs.frozen(weakref_slot=False)
class RawChunkRecord:
    """Any other chunk, verbatim, with its receive time."""

    TAG: ClassVar[str] = "chunk"
    time: int
    chunk: StreamChunk


StreamRecord: TypeAlias = (
    TextChunksRecord | ReasoningChunksRecord | ToolCallChunksRecord | RawChunkRecord
)
