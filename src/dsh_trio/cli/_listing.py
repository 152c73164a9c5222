"""The session list of ``dsh-trio sessions``: one row per stored session log.

Read-only: each row comes from the log's header and a small window at its end (the
last turn and prompt), never the whole file, and nothing is written.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Final

import attrs
import trio

from .._files import open_regular
from ..errors import DshError
from ..persistence import JsonlPersistence
from ..values import SessionHeader, TurnStart, UserMessage, UserSource, event_from_json
from ._transcript import StoredLog, _parse, _snippet, _text, format_time

__all__ = [
    "SessionSummary",
    "list_sessions",
    "render_listing",
    "summarize",
    "summarize_tail",
]


@attrs.frozen(kw_only=True)
class SessionSummary:
    """One row of ``dsh-trio sessions``.

    ``turns`` is the number of the last turn started, ``None`` when the window read
    at the end of the log holds no ``turn/start``.
    """

    id: str
    created_at: int
    turns: int | None
    last_prompt: str | None
    path: str
    problem: str | None = None


def summarize(log: StoredLog) -> SessionSummary:
    """The listing row of a log read in full: turn count and the user's last prompt."""
    turns = 0
    last: str | None = None
    for ev in log.events:
        if isinstance(ev.data, TurnStart):
            turns = ev.data.turn
        elif isinstance(ev.data, UserMessage) and isinstance(
            ev.data.source, UserSource
        ):
            last = _text(ev.data.content)
    return SessionSummary(
        id=log.header.id,
        created_at=log.header.created_at,
        turns=turns,
        last_prompt=last,
        path=log.path,
        problem=log.damage,
    )


#: ``dsh-trio sessions`` reads this much at the end of a log first, and at most
#: ``_TAIL_MAX`` (growing the window fourfold) while looking for the last turn and
#: prompt.
_TAIL_FIRST: Final = 16 * 1024
_TAIL_MAX: Final = 256 * 1024


def _tail_lines(data: bytes, *, whole: bool) -> list[bytes]:
    """The complete lines of a window at the end of a log.

    The window's first line counts only if the window starts at the first event
    (``whole``); otherwise it may be the end of a longer line.
    """
    lines = data.split(b"\n")
    lines.pop()  # after the last line end: empty, or a torn last line
    if not whole and lines:
        lines.pop(0)  # starts before the window
    return lines


def summarize_tail(path: str, header: SessionHeader) -> SessionSummary:
    """The listing row of the log at ``path``, from a small window at its end.

    Reads the header line's length and the last ``16 KiB`` of the file, growing
    the window up to ``256 KiB`` until it holds the last ``turn/start`` (the turn
    count is its number) and the user's last prompt. Only lines naming those two
    types are decoded. Blocking file I/O.

    Raises:
        UnusableFileError: the path holds a link, a FIFO, ... (not opened).
        OSError: the file cannot be read.
    """
    turns: int | None = None
    last: str | None = None
    problem: str | None = None
    with os.fdopen(open_regular(path, os.O_RDONLY)[0], "rb") as f:
        body = len(f.readline())  # where the events start
        size = f.seek(0, os.SEEK_END)
        if size > body:
            f.seek(size - 1)
            if f.read(1) != b"\n":
                problem = "the last line is incomplete"
        window = _TAIL_FIRST
        while True:
            start = max(body, size - window)
            f.seek(start)
            data = f.read(size - start)
            found_turn, found_prompt = _scan_tail(
                _tail_lines(data, whole=start == body)
            )
            if found_turn is not None:
                turns = found_turn
            if found_prompt is not None:
                last = found_prompt
            if (turns is not None and last is not None) or start == body:
                break
            if window >= _TAIL_MAX:
                break
            window *= 4
        if turns is None and size - body <= _TAIL_MAX:
            turns = 0  # the whole log was read: no turn yet
    return SessionSummary(
        id=header.id,
        created_at=header.created_at,
        turns=turns,
        last_prompt=last,
        path=path,
        problem=problem,
    )


def _scan_tail(lines: list[bytes]) -> tuple[int | None, str | None]:
    """The last turn number and the user's last prompt among ``lines``."""
    turn: int | None = None
    prompt: str | None = None
    for line in reversed(lines):
        if turn is None and b'"turn/start"' in line:
            data = _event_data(line)
            if isinstance(data, TurnStart):
                turn = data.turn
        elif prompt is None and b'"user/message"' in line:
            data = _event_data(line)
            if isinstance(data, UserMessage) and isinstance(data.source, UserSource):
                prompt = _text(data.content)
        if turn is not None and prompt is not None:
            break
    return turn, prompt


def _event_data(line: bytes) -> object:
    try:
        return event_from_json(_parse(line)).data
    except (ValueError, RecursionError):
        return None


def _summaries(
    persistence: JsonlPersistence, headers: Sequence[SessionHeader]
) -> list[SessionSummary]:
    out: list[SessionSummary] = []
    for header in headers:
        path = persistence.path_for(header)
        try:
            out.append(summarize_tail(path, header))
        except (OSError, DshError) as exc:
            out.append(
                SessionSummary(
                    id=header.id,
                    created_at=header.created_at,
                    turns=0,
                    last_prompt=None,
                    path=path,
                    problem=str(exc),
                )
            )
    out.sort(key=lambda s: (s.created_at, s.id), reverse=True)
    return out


async def list_sessions(persistence: JsonlPersistence) -> list[SessionSummary]:
    """Summaries of every stored session, newest first (read-only).

    Blocks on worker threads while the logs are read.
    """
    headers = await persistence.list()
    return await trio.to_thread.run_sync(_summaries, persistence, headers)


def render_listing(summaries: Sequence[SessionSummary]) -> str:
    """The table ``dsh-trio sessions`` prints (header row first)."""
    width = max([len("ID"), *(len(s.id) for s in summaries)])
    rows = [f"{'ID':<{width}}  {'CREATED':<19}  {'TURNS':>5}  LAST PROMPT"]
    for s in summaries:
        if s.problem is not None and not s.turns and s.last_prompt is None:
            prompt = f"(unreadable: {_snippet(s.problem)})"
        else:
            prompt = _snippet(s.last_prompt) if s.last_prompt else "-"
        turns = "?" if s.turns is None else str(s.turns)
        rows.append(
            f"{s.id:<{width}}  {format_time(s.created_at):<19}  {turns:>5}  {prompt}"
        )
    return "\n".join(rows)
