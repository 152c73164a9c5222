"""Read-only views of stored session logs: reading a log, and the transcript.

Viewing never writes: the log is read directly (no write claim, no lock, no repair),
so a session can be shown while a chat is still writing it, and a torn or damaged
tail is reported instead of being cut off. Lines are decoded with the session
converter, the same one the persistence backend uses. The list reads each log's
header and a small window at its end (the last turn and prompt), never whole files;
the transcript streams the log line by line. The list itself is in ``_listing``.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Iterable, Sequence
from typing import Final

import attrs

from .._files import open_regular
from ..errors import SessionCorruptError, SessionFormatError
from ..persistence import JsonlPersistence, damaged_files
from ..values import (
    FORMAT_VERSION,
    Aborted,
    AssistantAttemptData,
    AssistantMessageData,
    Blocked,
    CancelCause,
    Completed,
    ContentBlock,
    EndSeed,
    Errored,
    Finish,
    HookCancel,
    ImageBlock,
    Interrupted,
    JsonValue,
    MaxTokens,
    RawChunkRecord,
    ReasoningBlock,
    RequestHeaderData,
    SessionEvent,
    SessionHeader,
    StepStart,
    SystemMessageData,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolResultData,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
    UserSource,
    event_from_json,
    header_from_json,
)
from ._ids import resolve_id

__all__ = [
    "StoredLog",
    "describe_cause",
    "describe_reason",
    "find_log",
    "format_time",
    "read_log",
    "render_transcript",
]

_SNIPPET: Final = 60
_INDENT: Final = "    "


@attrs.frozen(kw_only=True)
class StoredLog:
    """A session log as read from disk: its header, the intact events, and damage.

    ``damage`` describes the first line that could not be read (a torn last line or
    a malformed event); ``events`` holds everything before it. ``salvaged`` lists
    the side files beside the log holding bytes a load cut off it, with their sizes.
    """

    path: str
    header: SessionHeader
    events: tuple[SessionEvent, ...]
    damage: str | None = None
    salvaged: tuple[tuple[str, int], ...] = ()


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _parse(line: bytes) -> object:
    return json.loads(line.decode("utf-8"), parse_constant=_refuse_constant)


def read_log(path: str) -> StoredLog:
    """Read the log at ``path`` without changing it (blocking file I/O, streamed).

    Every complete, valid event line up to the first damaged one is kept; the rest
    is described in :attr:`StoredLog.damage`. Side files of bytes a load cut off
    the log are listed in :attr:`StoredLog.salvaged`.

    Raises:
        UnusableFileError: the path holds a link, a FIFO, ... (not opened).
        OSError: the file cannot be read.
        SessionFormatError: the header names another format version.
        SessionCorruptError: the header line is missing or malformed.
    """
    events: list[SessionEvent] = []
    damage: str | None = None
    with os.fdopen(open_regular(path, os.O_RDONLY)[0], "rb") as f:
        first = f.readline()
        if not first.endswith(b"\n"):
            raise SessionCorruptError(f"session log {path} has no complete header line")
        header = _header(first[:-1], path)
        for line_no, line in enumerate(f, start=2):
            if not line.endswith(b"\n"):
                damage = f"the last line ({len(line)} bytes) is incomplete"
                break
            try:
                event = event_from_json(_parse(line[:-1]), expected_seq=len(events))
            except (ValueError, RecursionError) as exc:
                damage = f"line {line_no} cannot be read ({exc})"
                break
            events.append(event)
    return StoredLog(
        path=path,
        header=header,
        events=tuple(events),
        damage=damage,
        salvaged=tuple(_salvaged(path)),
    )


def _header(line: bytes, path: str) -> SessionHeader:
    try:
        raw = _parse(line)
    except (ValueError, RecursionError) as exc:
        raise SessionCorruptError(
            f"session log {path}: the header line is not JSON ({exc})"
        ) from exc
    version = raw.get("version") if isinstance(raw, dict) else None
    if (
        isinstance(version, (int, float))
        and not isinstance(version, bool)
        and version != FORMAT_VERSION
    ):
        raise SessionFormatError(
            f"session log {path} uses format version {version}; this tool reads version {FORMAT_VERSION}",
            version=version,
        )
    return header_from_json(raw)


def _salvaged(path: str) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for side in damaged_files(os.path.dirname(path)):
        try:
            out.append((side, os.path.getsize(side)))
        except OSError:
            continue
    return out


async def find_log(persistence: JsonlPersistence, session_id: str) -> str | None:
    """The log file of the stored session ``session_id`` (an id or a unique prefix of
    one), or ``None`` when no session matches.

    Blocks on a worker thread while the stored headers are read; writes nothing.

    Raises:
        SessionIdError: ``session_id`` is the prefix of several sessions' ids.
    """
    headers = await persistence.list()
    if not any(session_id and h.id.startswith(session_id) for h in headers):
        return None
    found = resolve_id((h.id for h in headers), session_id, persistence.root)
    return next(persistence.path_for(h) for h in headers if h.id == found)


def _text(blocks: Iterable[ContentBlock]) -> str:
    return "".join(b.text for b in blocks if isinstance(b, TextBlock))


def _snippet(text: str, limit: int = _SNIPPET) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def format_time(ms: int) -> str:
    """Epoch milliseconds as local ``YYYY-MM-DD HH:MM:SS``."""
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


# --------------------------------------------------------------------------- transcript


def _indented(text: str) -> list[str]:
    return [f"{_INDENT}{line}" if line else "" for line in text.splitlines()] or [
        _INDENT.rstrip()
    ]


def _labelled(label: str, text: str) -> list[str]:
    """``label: first line`` with further lines indented below it."""
    lines = text.splitlines() or [""]
    out = [f"{label}: {lines[0]}".rstrip()]
    out.extend(f"{_INDENT}{line}" if line else "" for line in lines[1:])
    return out


def describe_cause(cause: CancelCause) -> str:
    """A cancel cause in words (``user cancel``, ``hook: reason``, ...)."""
    if isinstance(cause, HookCancel):
        return f"hook: {cause.reason}"
    return f"{cause.kind} cancel"


def describe_reason(reason: TurnEndReason) -> str:
    """A turn-end reason in words."""
    if isinstance(reason, Completed):
        return "completed"
    if isinstance(reason, Aborted):
        return f"aborted ({describe_cause(reason.reason)})"
    if isinstance(reason, Errored):
        return f"error: {reason.error.message} [{reason.error.code}]"
    if isinstance(reason, MaxTokens):
        return "stopped at the output token limit"
    if isinstance(reason, Blocked):
        return "blocked by a pre-step hook"
    assert isinstance(reason, Interrupted)
    return (
        "interrupted (the process stopped mid-turn; closed when the session was loaded)"
    )


def _blocks(blocks: Iterable[ContentBlock]) -> list[str]:
    out: list[str] = []
    text: list[str] = []

    def flush() -> None:
        if text:
            out.extend("".join(text).splitlines() or [""])
            text.clear()

    for block in blocks:
        if isinstance(block, TextBlock):
            text.append(block.text)
            continue
        flush()
        if isinstance(block, ReasoningBlock):
            out.extend(_labelled("(reasoning)", block.text))
        elif isinstance(block, ToolCallBlock):
            out.append(f"-> tool call {block.name}({block.arguments}) [{block.id}]")
        elif isinstance(block, ToolResultBlock):
            status = " error" if block.is_error else ""
            out.extend(
                _labelled(
                    f"<- tool result{status} [{block.tool_call_id}]",
                    "\n".join(_blocks(block.content)),
                )
            )
        elif isinstance(block, ImageBlock):
            out.append("[image]")
    flush()
    return out


def _message_lines(label: str, blocks: Sequence[ContentBlock]) -> list[str]:
    body = _blocks(blocks)
    if not body:
        return [f"{label}: (empty)"]
    if len(blocks) and isinstance(blocks[0], TextBlock):
        first, rest = body[0], body[1:]
        return [
            f"{label}: {first}".rstrip(),
            *(f"{_INDENT}{line}" if line else "" for line in rest),
        ]
    return [f"{label}:", *(f"{_INDENT}{line}" if line else "" for line in body)]


def _attempt_failure(data: AssistantAttemptData) -> str:
    for record in data.stream:
        if isinstance(record, RawChunkRecord) and isinstance(record.chunk, Finish):
            failure = record.chunk.reason.failure
            if failure is not None:
                return f"[model attempt failed: {failure.message} [{failure.code}]]"
    return "[model attempt ended without a reply]"


def _json_field(data: JsonValue, key: str) -> JsonValue:
    return data.get(key) if isinstance(data, dict) else None


@attrs.define
class _RenderState:
    open_turn: int | None = None
    route: str | None = None


def _event_lines(ev: SessionEvent, state: _RenderState) -> list[str]:
    data = ev.data
    if isinstance(data, TurnStart):
        state.open_turn = data.turn
        return ["", f"=== turn {data.turn} ==="]
    if isinstance(data, TurnEnd):
        state.open_turn = None
        return [f"=== turn {data.turn} ended: {describe_reason(data.reason)} ==="]
    if isinstance(data, StepStart):
        return [f"--- step {data.step} ---"] if data.step > 1 else []
    if ev.type == "user/message" and isinstance(data, UserMessage):
        if isinstance(data.source, UserSource):
            return _message_lines("user", data.content)
        return _message_lines(
            f"context ({getattr(data.source, 'plugin', data.source.TAG)})", data.content
        )
    if isinstance(data, SystemMessageData):
        if not any(_blocks(data.message.content)):
            return []  # an empty system prompt has nothing to read
        return _message_lines("system", data.message.content)
    if isinstance(data, AssistantMessageData):
        lines = _message_lines("assistant", data.message.content)
        if data.interrupted:
            lines.append("[reply interrupted]")
        return lines
    if isinstance(data, AssistantAttemptData):
        return [_attempt_failure(data)]
    if isinstance(data, ToolResultData):
        lines = _blocks(data.message.content)
        if data.error is not None:
            lines.append(f"[tool {data.error.name} failed: {data.error.code}]")
        return lines
    if isinstance(data, RequestHeaderData):
        config = data.header.config
        route = f"{config.provider}/{config.model}"
        if state.route == route:
            return []
        state.route = route
        return [f"[model {route}]"]
    if isinstance(data, EndSeed):
        return ["--- forked here ---" if data.inherited else "--- resumed ---"]
    if ev.type == "llm/retry" and isinstance(data, dict):
        failure = _json_field(data, "failure")
        retry = f"{_json_field(data, 'retry')}/{_json_field(data, 'maxRetries')}"
        code, message = _json_field(failure, "code"), _json_field(failure, "message")
        return [f"[retry {retry} after {code}: {message}]"]
    if ev.type in (
        "step/end",
        "tool/call",
        "request/context",
        "agent/inbox/spliced",
        "llm/retry-started",
    ):
        # Tool calls show in the assistant message; the rest is bookkeeping.
        return []
    return [f"[{ev.type}]"]


def render_transcript(log: StoredLog) -> str:
    """A stored session as a readable transcript (header, then one block per event)."""
    header = log.header
    lines = [f"session {header.id}", f"created {format_time(header.created_at)}"]
    if header.cwd is not None:
        lines.append(f"cwd     {header.cwd}")
    if header.parent_session is not None:
        lines.append(f"parent  {header.parent_session}")
    lines.append(f"log     {log.path}")
    state = _RenderState()
    for ev in log.events:
        lines.extend(_event_lines(ev, state))
    if not log.events:
        lines.extend(["", "(no events)"])
    if state.open_turn is not None:
        lines.append(
            f"[turn {state.open_turn} has not ended: the session is live, or its process stopped "
            "(resuming closes it as interrupted)]"
        )
    if log.damage is not None:
        lines.append(f"[the log is damaged: {log.damage}; nothing after it is shown]")
    for side, size in log.salvaged:
        lines.append(
            f"[{size} damaged bytes were cut off the end of this log when it was loaded; "
            f"they are kept in {side}]"
        )
    return "\n".join(lines)
