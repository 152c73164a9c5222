"""The lines a log writer wrote, gathered and compressed in chunks for its session.

A log writer hands :class:`LineChunks` each batch of lines it wrote (in its worker
thread); every :data:`CHUNK_LINES` lines or more become one zlib chunk, compressed
there with the vocabulary of event lines as a preset dictionary (:data:`_CHUNK_DICT`),
for the writer's live session to keep its settled events as (see
:meth:`~._compact.DecodedEvents.adopt_lines`). This module owns the chunk format:
:func:`inflate_chunk` gives back the lines a chunk holds.
"""

from __future__ import annotations

import threading
import zlib
from typing import Final

__all__ = ["CHUNK_LINES", "LineChunks", "inflate_chunk"]

#: Lines a log writer gathers before compressing them for its live session (see
#: :class:`LineChunks`): what an active session holds as pending lines is at most
#: this many.
CHUNK_LINES: Final = 64
#: The zlib level of a log writer's chunks: compressed off the event loop, where
#: the default level's fifth less of held bytes is worth its twice the time (about
#: 2 µs a line).
_CHUNK_LEVEL: Final = 6
#: The preset dictionary of a log writer's chunks: the vocabulary of event lines
#: (their keys and types, most common last), which a chunk of a few tens of lines
#: would otherwise spell out once each (a sixth of its compressed bytes). A chunk
#: compressed without it reads back too (see :func:`inflate_chunk`).
_CHUNK_DICT: Final = b"".join(
    [
        b'{"type":"session/end-seed","seq":',
        b'{"type":"assistant/attempt","seq":',
        b'{"type":"tool/call","seq":',
        b'{"type":"tool/result","seq":',
        b'{"type":"tool-call","id":"","name":"","arguments":',
        b'"source":{"kind":"tool","callId":"',
        b'{"type":"reasoning","text":"',
        b'{"type":"agent/inbox/spliced","seq":',
        b'"data":{"target":"next-turn","start":0,"removedCount":1,"inserted":[{',
        b'"source":{"kind":"user"},"role":"user","id":"',
        b'{"type":"request/header","seq":',
        b'"data":{"header":{"config":{"provider":"',
        b'"reason":"initial"}}',
        b'{"type":"request/context","seq":',
        b'"data":{"provider":"',
        b'{"type":"turn/end","seq":',
        b'"reason":{"kind":"completed"}}}',
        b'{"type":"turn/start","seq":',
        b'{"type":"step/end","seq":',
        b'{"type":"step/start","seq":',
        b'{"type":"system/message","seq":',
        b'"message":{"role":"system","content":[],"source":{"kind":"plugin",',
        b'"plugin":"@deepseek-ai/dsh-system-prompt"},"id":"',
        b'{"type":"user/message","seq":',
        b'"data":{"content":[{"type":"text","text":"',
        b'"usage":{"inputTokens":',
        b',"outputTokens":',
        b'"stream":[{"type":"chunk","time":',
        b'"chunk":{"type":"block-start","index":0,"blockType":"text"}},',
        b'{"type":"text-chunks","time0":',
        b',"index":0,"dt":[0,0,0,0,0,0,0,0,0,0',
        b'],"texts":["',
        b'"chunk":{"type":"block-end","index":0,"block":{"type":"text","text":"',
        b'"chunk":{"type":"usage","usage":{"inputTokens":',
        b'"chunk":{"type":"finish","reason":{"kind":"stop"}}}]},',
        b'{"type":"assistant/message","seq":',
        b'"message":{"role":"assistant","content":[{"type":"text","text":"',
        b'"source":{"kind":"model","provider":"',
        b'","model":"',
        b'"},"id":"',
        b'"data":{"turn":',
        b',"step":1',
        b'"surfaceOp":"append"}',
        b',"time":',
        b',"data":{',
    ]
)


def inflate_chunk(chunk: bytes) -> bytes:
    """The lines a chunk holds: compressed with :data:`_CHUNK_DICT` or without a
    preset dictionary (zlib uses the one given only when the chunk asks for it)."""
    return zlib.decompressobj(zdict=_CHUNK_DICT).decompress(chunk)


class LineChunks:
    """The lines a log writer wrote, gathered and compressed for its live session.

    A writer hands each batch it wrote to :meth:`add` (in its worker thread, after
    the write succeeded): the encoded lines it wrote anyway. Every
    :data:`CHUNK_LINES` lines or more are compressed there, off the event loop
    (zlib releases the interpreter lock), into a chunk that :meth:`take` hands over;
    the recorder of the session passes the chunks to ``Session`` (which keeps the
    events they hold as those lines once they are settled). Batches that do not
    continue the previous one start the gathering afresh. Thread-safe.

    Example::

        chunks = LineChunks()
        chunks.add(0, b'{"type":"turn/start",...}\n', 1)
        chunks.take()  # [] until CHUNK_LINES lines were added
    """

    __slots__ = ("_count", "_lock", "_parts", "_ready", "_start")

    def __init__(self) -> None:
        self._start = 0
        self._count = 0
        self._parts: list[bytes] = []
        self._ready: list[tuple[int, int, bytes]] = []
        self._lock = threading.Lock()

    def add(self, first_seq: int, data: bytes, count: int) -> None:
        """Gather ``count`` written lines (each ending in ``\n``) from ``first_seq``."""
        if count <= 0:
            return
        if self._count and first_seq != self._start + self._count:
            self._parts.clear()  # a gap: start again from this batch
            self._count = 0
        if not self._count:
            self._start = first_seq
        self._parts.append(data)
        self._count += count
        if self._count >= CHUNK_LINES:
            data = b"".join(self._parts)
            packer = zlib.compressobj(_CHUNK_LEVEL, zdict=_CHUNK_DICT)
            packed = packer.compress(data[:-1]) + packer.flush()
            chunk = (self._start, self._count, packed)
            self._parts = []
            self._count = 0
            with self._lock:
                self._ready.append(chunk)

    def take(self) -> list[tuple[int, int, bytes]]:
        """The chunks compressed since the last call: ``(first seq, lines, bytes)``."""
        with self._lock:
            ready = self._ready
            if ready:
                self._ready = []
            return ready
