"""The event types a stored log may hold without ``"ignorable": true``.

A reader that meets an event type it does not know must refuse the log unless the
event is marked ``"ignorable": true``: an unknown event may change the meaning of
every event after it, so skipping it would rebuild a wrong session. This is the
reference's rule, and the reference's readers know a fixed catalogue of types. The
types known here are the core types (those with typed data), the types of the
reference's catalogue (kept as plain JSON), and the types an application declared
with :func:`register_event_type`.

The declarations are process-wide and only ever grow: a type once declared stays
known, so a log that loaded once loads again.
"""

from __future__ import annotations

import threading
from typing import Final

from ..errors import InvalidEventError
from ._event_data import EVENT_DATA_TYPES

__all__ = ["REFERENCE_EVENT_TYPES", "is_known_event_type", "register_event_type"]

#: Every event type the reference's readers know (its generated catalogue), so that
#: a log it writes with its plugins' events loads here too; their data stays JSON.
REFERENCE_EVENT_TYPES: Final = frozenset(
    {
        "agent-preset/selected",
        "agent/inbox/spliced",
        "approval/asked",
        "approval/decided",
        "approval/policy",
        "assistant/attempt",
        "assistant/message",
        "command/done",
        "command/run",
        "compaction/end",
        "compaction/prune",
        "compaction/start",
        "compaction/summary",
        "deliverables/presented",
        "feedback/message-delete",
        "feedback/message-put",
        "feedback/record",
        "goal/change",
        "hook/invoked",
        "hook/result",
        "llm/retry",
        "llm/retry-started",
        "model/selection",
        "permission/preset",
        "plan/mode",
        "request/context",
        "request/header",
        "sandbox/mode",
        "schedule/change",
        "session-log-deepseek/delivery-accepted",
        "session/end-seed",
        "session/title",
        "session/title-llm-request",
        "step/end",
        "step/start",
        "subagent/catalog",
        "subagent/descriptor",
        "subagent/model-selection-policy",
        "system/message",
        "team/member",
        "team/message/delivered",
        "team/message/queued",
        "team/task",
        "todo/write",
        "tool-workflow/agent-end",
        "tool-workflow/agent-start",
        "tool-workflow/run-end",
        "tool-workflow/run-start",
        "tool/call",
        "tool/ptc-dispatch",
        "tool/ptc-dispatch-start",
        "tool/result",
        "turn/end",
        "turn/start",
        "user/message",
        "web/deepseek-search-llm-request",
    }
)

_known: frozenset[str] = frozenset(EVENT_DATA_TYPES) | REFERENCE_EVENT_TYPES
_lock: Final = threading.Lock()  # declarations may come from any thread


def is_known_event_type(name: str) -> bool:
    """Whether a stored event of type ``name`` loads without ``"ignorable": true``.

    Pure and cheap (one set lookup); never blocks. Safe from any thread.
    """
    return name in _known


def register_event_type(name: str) -> None:
    """Declare an event type the application writes, so that its logs load.

    Loading a stored log refuses an event of a type it does not know unless the
    event is marked ``"ignorable": true`` (``Session.append(..., ignorable=True)``),
    as the reference does. Mark informational events ignorable: any reader, the
    reference's included, may then skip them. Declare the types whose loss would
    change the meaning of the log: dsh_trio then loads them (their data stays plain
    JSON), and a reader that does not know them refuses the log, as it must.

    Declarations are process-wide and permanent; declare at import time of the
    application, before its logs are loaded (in every process that loads them, the
    ``dsh-trio`` command included, which declares those given with
    ``--event-type``). Synchronous, never
    blocks, idempotent; declaring a type dsh_trio already knows changes nothing.

    Example::

        from dsh_trio.session import register_event_type

        register_event_type("billing/charge")
        session.append("billing/charge", {"cents": 120})  # loads again on resume

    Args:
        name: the event type, as written in the log's ``type`` field.

    Raises:
        InvalidEventError: ``name`` is not a non-empty ``str``.
    """
    global _known
    if name.__class__ is not str or not name:
        raise InvalidEventError(
            f"register_event_type() expects an event type (a non-empty str), got "
            f"{name!r:.60}"
        )
    with _lock:
        if name not in _known:
            # Replaced, never changed in place: readers on other threads see the old
            # set or the new one, each complete.
            _known = _known | {name}
