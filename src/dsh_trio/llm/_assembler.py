"""Assemble a model stream's chunks into content blocks."""

from __future__ import annotations

from ..errors import LlmError
from ..values import (
    BlockEnd,
    BlockStart,
    ContentBlock,
    Finish,
    FinishReason,
    JsonValue,
    LlmFailure,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
    Usage,
)

__all__ = ["BlockAssembler"]

_STOP = FinishReason("stop")


class _Partial:
    """One block being assembled. A plain slotted class: ``push`` is a hot path."""

    __slots__ = ("block_type", "call_id", "end", "index", "name", "parts")

    def __init__(self, index: int, block_type: str) -> None:
        self.index = index
        self.block_type = block_type
        self.parts: list[str] = []
        self.call_id = ""
        self.name: str | None = None
        self.end: ContentBlock | None = None


class BlockAssembler:
    """Fold the chunks of one model attempt into its content blocks.

    Blocks are keyed by ``index`` and kept in order of first appearance (a block start
    or its first delta). Deltas append until the block's :class:`BlockEnd`, whose block
    is authoritative; the first end wins and later deltas for that index are ignored,
    as are deltas whose kind does not match the block's type. The last :class:`Usage`
    and the last :class:`Finish` are kept.

    Example::

        assembler = BlockAssembler()
        for chunk in chunks:
            assembler.push(chunk)
        content = assembler.blocks()
    """

    __slots__ = ("_finish", "_order", "_partials", "_usage")

    def __init__(self) -> None:
        self._partials: dict[int, _Partial] = {}
        self._order: list[_Partial] = []
        self._usage: Usage | None = None
        self._finish: Finish | None = None

    def _open(self, index: int, block_type: str) -> _Partial:
        partial = _Partial(index, block_type)
        self._partials[index] = partial
        self._order.append(partial)
        return partial

    def push(self, chunk: StreamChunk) -> None:
        """Take in the next chunk of the stream. Never blocks."""
        if chunk.__class__ is TextDelta:  # hot path: a text delta of the open block
            partial = self._partials.get(chunk.index)
            if (
                partial is not None
                and partial.end is None
                and partial.block_type == "text"
            ):
                partial.parts.append(chunk.text)
                return
        cls = chunk.__class__
        # The usual chunk classes by identity; subclasses by the isinstance chain.
        if cls is BlockStart:
            self._start(chunk)  # type: ignore[arg-type]
            return
        if cls is BlockEnd:
            self._end(chunk)  # type: ignore[arg-type]
            return
        if cls is Usage:
            self._usage = chunk  # type: ignore[assignment]
            return
        if cls is Finish:
            self._finish = chunk  # type: ignore[assignment]
            return
        # isinstance chain, most frequent chunk kinds first.
        if isinstance(chunk, TextDelta):
            self._text(chunk.index, "text", chunk.text)
        elif isinstance(chunk, ReasoningDelta):
            self._text(chunk.index, "reasoning", chunk.text)
        elif isinstance(chunk, ToolCallDelta):
            partial = self._partials.get(chunk.index)
            if partial is None:
                partial = self._open(chunk.index, "tool-call")
            if partial.end is None and partial.block_type == "tool-call":
                partial.parts.append(chunk.arguments_delta)
                if not partial.call_id and chunk.id:
                    partial.call_id = chunk.id
                if not partial.name and chunk.name:
                    partial.name = chunk.name
        elif isinstance(chunk, BlockStart):
            self._start(chunk)
        elif isinstance(chunk, BlockEnd):
            self._end(chunk)
        elif isinstance(chunk, Usage):
            self._usage = chunk
        elif isinstance(chunk, Finish):
            self._finish = chunk

    def open_text(self, index: int) -> list[str] | None:
        """The parts of the text block ``index`` while it is open (appending a text
        delta's text to them is :meth:`push` of that delta), else ``None``."""
        partial = self._partials.get(index)
        if partial is not None and partial.end is None and partial.block_type == "text":
            return partial.parts
        return None

    def _start(self, chunk: BlockStart) -> None:
        if chunk.index not in self._partials:
            self._open(chunk.index, chunk.block_type)

    def _end(self, chunk: BlockEnd) -> None:
        partial = self._partials.get(chunk.index)
        if partial is None:
            partial = self._open(chunk.index, type(chunk.block).TAG)
        if partial.end is None:
            partial.end = chunk.block

    def _text(self, index: int, block_type: str, text: str) -> None:
        partial = self._partials.get(index)
        if partial is None:
            partial = self._open(index, block_type)
        if partial.end is None and partial.block_type == block_type:
            partial.parts.append(text)

    @property
    def finish(self) -> FinishReason:
        """The finish reason of the stream; ``stop`` when no :class:`Finish` arrived."""
        return self._finish.reason if self._finish is not None else _STOP

    @property
    def finished(self) -> bool:
        """Whether a :class:`Finish` chunk arrived."""
        return self._finish is not None

    @property
    def usage(self) -> Usage | None:
        """The last usage chunk, if any."""
        return self._usage

    def _assemble(self) -> list[ContentBlock]:
        assembled: list[ContentBlock] = []
        for partial in self._order:
            if partial.end is not None:
                assembled.append(partial.end)
                continue
            block_type = partial.block_type
            if block_type == "text":
                assembled.append(TextBlock("".join(partial.parts)))
            elif block_type == "reasoning":
                assembled.append(ReasoningBlock("".join(partial.parts)))
            elif block_type == "tool-call":
                assembled.append(
                    ToolCallBlock(
                        partial.call_id or f"call-{partial.index}",
                        partial.name or "",
                        "".join(partial.parts),
                    )
                )
            else:
                raise LlmError(
                    LlmFailure(
                        f'block {partial.index} of unknown type "{block_type}" '
                        "was never closed by a block end",
                        "INVALID_STREAM",
                    )
                )
        return assembled

    def _keep_mask(self, assembled: list[ContentBlock]) -> list[bool]:
        drop_tool_calls = self.finish.kind == "max-tokens"
        return [
            not (drop_tool_calls and isinstance(block, ToolCallBlock))
            for block in assembled
        ]

    def blocks(self) -> tuple[ContentBlock, ...]:
        """The assembled content, in order of first appearance.

        A closed block is its :class:`BlockEnd` block; an open one is built from its
        deltas (a tool call without an id gets ``call-<index>``, without a name ``""``).
        When the stream finished with ``max-tokens`` every tool-call block is dropped.

        Raises:
            LlmError: (code ``INVALID_STREAM``) a block of an unknown type was never
                closed, so it cannot be assembled.
        """
        finish = self._finish
        if finish is None or finish.reason.kind != "max-tokens":
            order = self._order
            if len(order) == 1 and (end := order[0].end) is not None:
                return (end,)  # the common reply: one closed block
            return tuple(self._assemble())
        assembled = self._assemble()
        return tuple(
            block
            for block, keep in zip(assembled, self._keep_mask(assembled), strict=True)
            if keep
        )

    def interrupted_blocks(self) -> tuple[ContentBlock, ...]:
        """The visible prefix of an interrupted stream.

        Text and reasoning blocks, closed or still open, whose text is not
        whitespace-only, in stream order. Tool calls (complete or partial) and open
        blocks of other types are dropped.
        """
        visible: list[ContentBlock] = []
        for partial in self._order:
            block: ContentBlock
            if partial.end is not None:
                block = partial.end
            elif partial.block_type == "text":
                block = TextBlock("".join(partial.parts))
            elif partial.block_type == "reasoning":
                block = ReasoningBlock("".join(partial.parts))
            else:
                continue
            if isinstance(block, (TextBlock, ReasoningBlock)) and block.text.strip():
                visible.append(block)
        return tuple(visible)

    @property
    def replay_state(self) -> JsonValue:
        """The finish chunk's replay state, aligned with :meth:`blocks`.

        An envelope without a ``"blocks"`` list passes through unchanged. With one, it
        must have one entry per assembled block: it is then pruned with the same rule
        as :meth:`blocks`; otherwise it cannot be aligned and ``None`` is returned.

        Raises:
            LlmError: as :meth:`blocks`, when the envelope carries ``"blocks"``.
        """
        if self._finish is None:
            return None
        state = self._finish.replay_state
        if not isinstance(state, dict) or "blocks" not in state:
            return state
        entries = state["blocks"]
        assembled = self._assemble()
        if not isinstance(entries, list) or len(entries) != len(assembled):
            return None
        mask = self._keep_mask(assembled)
        if all(mask):
            return state
        pruned: list[JsonValue] = [
            entry for entry, keep in zip(entries, mask, strict=True) if keep
        ]
        return {**state, "blocks": pruned}
