"""The header of a new session: its id (minted when none is given) and its meta fields."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidSessionIdError
from ..loop import AgentConfigError
from ..values import SessionId

__all__ = ["META_KEYS", "header_fields"]

#: The header fields ``create(meta=...)`` may set.
META_KEYS = frozenset(
    {"cwd", "parent_session", "origin", "delegation_depth", "agent_preset"}
)


def header_fields(
    session_id: str | None, meta: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The header fields of a new session: its id (minted if ``None``) and ``meta``."""
    fields = dict(meta or {})
    unknown = set(fields) - META_KEYS
    if unknown:
        raise AgentConfigError(
            f"unknown meta keys {sorted(unknown)} (allowed: {sorted(META_KEYS)})"
        )
    sid = session_id if session_id is not None else str(uuid.uuid4())
    raw_id: object = sid
    if not isinstance(raw_id, str) or not raw_id:
        raise InvalidSessionIdError(
            f"a session id must be a non-empty string, got {sid!r}"
        )
    fields["id"] = SessionId(sid)
    return fields
