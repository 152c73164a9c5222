"""The lines of a JSONL session log: line 1 the header, then one event per line.

Each line is compact JSON ending in ``\\n`` (non-ASCII kept as UTF-8); the header keys
come in the reference's order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from ..errors import (
    InvalidEventError,
    InvalidSessionIdError,
    SessionCorruptError,
    SessionFormatError,
)
from ..values import (
    FORMAT_VERSION,
    SessionEvent,
    SessionHeader,
    event_to_json,
    header_from_json,
    header_to_json,
    parse_json_line,
)

__all__ = ["encode_events", "encode_header", "parse_header", "parse_line"]

_ENCODER: Final = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False
)


def encode_events(events: Sequence[SessionEvent]) -> bytes:
    """The lines of ``events``, each compact JSON ending in ``\\n``.

    JSON escapes every control character, so no string can break a line.

    Raises:
        InvalidEventError: an event holds a lone surrogate, which UTF-8 cannot
            encode (nothing of the batch is encoded).
    """
    lines = [_ENCODER.encode(event_to_json(ev)) for ev in events]
    lines.append("")
    try:
        return "\n".join(lines).encode("utf-8")
    except UnicodeEncodeError:
        for ev, line in zip(events, lines, strict=False):
            try:
                line.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidEventError(
                    f'session event "{ev.type}" at seq {ev.seq} holds a lone '
                    f"surrogate ({exc.object[exc.start : exc.end]!r}), which UTF-8 "
                    "cannot encode; nothing was written",
                    seq=ev.seq,
                    type=ev.type,
                ) from None
        raise  # pragma: no cover - some line failed above


# The reference writes the header keys in this order.
_HEADER_KEY_ORDER: Final = (
    "type",
    "version",
    "id",
    "createdAt",
    "cwd",
    "parentSession",
    "isSeeded",
    "origin",
    "delegationDepth",
    "agentPreset",
)


def encode_header(header: SessionHeader) -> bytes:
    """The header line of a log, ending in ``\\n``.

    Raises:
        InvalidSessionIdError: a header field holds a lone surrogate.
    """
    obj = header_to_json(header)
    ordered: dict[str, object] = {k: obj[k] for k in _HEADER_KEY_ORDER if k in obj}
    ordered.update(obj)  # keys this list does not know keep their place at the end
    try:
        return (_ENCODER.encode(ordered) + "\n").encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidSessionIdError(
            f"session header of {header.id!r} holds a lone surrogate, which UTF-8 "
            "cannot encode"
        ) from None


def parse_line(line: bytes) -> object:
    """Parse one line; raises ``ValueError`` (or ``RecursionError``) if it is not JSON.

    The standard library's result, sped up by ``msgspec`` when it is installed
    (:func:`dsh_trio.values.parse_json_line`).
    """
    return parse_json_line(line)


def parse_header(line: bytes, path: str, session_id: str | None) -> SessionHeader:
    """The header of the log at ``path`` from its first line (without the line end).

    The version is checked first, on the raw object, as the reference does.

    Raises:
        SessionFormatError: the header names a foreign format version.
        SessionCorruptError: the line is not a valid header, or names another id
            than ``session_id`` (``line`` is 1).
    """
    try:
        raw = parse_line(line)
    except (ValueError, RecursionError) as exc:
        raise SessionCorruptError(
            f"session log {path}, line 1: the header line is not JSON ({exc})",
            line=1,
        ) from exc
    if isinstance(raw, dict):
        version = raw.get("version")
        if (
            isinstance(version, (int, float))
            and not isinstance(version, bool)
            and version != FORMAT_VERSION
        ):
            raise SessionFormatError(
                f"session log {path} uses format version {version}; this library "
                f"reads version {FORMAT_VERSION} only",
                version=version,
            )
    try:
        header = header_from_json(raw)
    except SessionCorruptError as exc:
        raise SessionCorruptError(
            f"session log {path}, line 1 (the header): {exc}", line=1
        ) from exc
    if session_id is not None and header.id != session_id:
        raise SessionCorruptError(
            f'session log {path}, line 1 (the header): it holds session "{header.id}", '
            f'not "{session_id}"',
            line=1,
        )
    return header
