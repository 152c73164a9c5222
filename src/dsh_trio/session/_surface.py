"""The surface of a session: its current nodes and the rules for changing them.

The surface is the ordered list of seqs whose events make up the model-visible
history. Only the four surface types (``system/message``, ``user/message``,
``assistant/message``, ``tool/result``) change it, each with a ``surface_op``:
``"append"`` adds the event as a node at the end; ``SurfaceReplace(start, end)``
replaces the nodes ``start``..``end`` (which must be current nodes, in order, all cited
in ``source_event_seqs``) with the event. A ``tool/result`` may replace exactly one
``tool/result`` and change only its content.

:meth:`Surface.plan` checks a transition without changing anything;
:meth:`Surface.apply` performs a planned one.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Final, TypeAlias

import attrs

from ..values import (
    SURFACE_TYPES,
    EventData,
    JsonValue,
    SessionEvent,
    SurfaceReplace,
    ToolResultBlock,
    ToolResultData,
)
from ._admission import invalid
from ._history import HistoryFold

__all__ = ["APPEND", "Plan", "Surface"]

#: The plan of an append (a replace plans the index range it replaces).
APPEND: Final[tuple[int, int]] = (-1, -1)

#: What :meth:`Surface.plan` returns: ``None`` for an event off the surface,
#: :data:`APPEND`, or the ``(i, j)`` index range of the replaced nodes.
Plan: TypeAlias = tuple[int, int] | None

# The shared node store of a surface with no node yet (never mutated): a session
# that never had a surface event (an idle agent's) pays nothing for its own.
_NO_NODES: Final[array[int]] = array("q")


@attrs.define(eq=False, weakref_slot=False)
class Surface(HistoryFold):
    """The current surface nodes of one session log, and the messages they fold
    into (:meth:`snapshot`, from :class:`HistoryFold`).

    Pure memory; never blocks. ``generation`` counts the replace ops applied, so the
    fold over the nodes knows when it must start over. ``nodes`` is read-only outside
    this class: the seqs as machine integers (8 bytes a node, whatever the seq), a
    shared empty array until the first node. A replace op finds its nodes by a scan
    of that array (it rewrites the array after them anyway).
    """

    _events: Sequence[SessionEvent]
    nodes: array[int] = attrs.field(default=_NO_NODES, init=False)
    generation: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        self._start_fold()

    @property
    def events(self) -> Sequence[SessionEvent]:
        """The log whose seqs the nodes are."""
        return self._events

    def copy(self, events: Sequence[SessionEvent]) -> Surface:
        """This surface (nodes, generation) over ``events``, an equal log; its fold
        starts over."""
        other = Surface(events)
        if self.nodes:
            other.nodes = array("q", self.nodes)
        other.generation = self.generation
        return other

    def plan(
        self,
        type_: str,
        data: EventData | JsonValue,
        op: object,
        sources: tuple[int, ...] | None,
        seq: int,
    ) -> Plan:
        """Check the surface transition of event ``seq``; return the plan to apply.

        Raises:
            InvalidEventError: the event breaks a surface rule.
        """
        if type_ not in SURFACE_TYPES:
            if op is not None or sources is not None:
                raise invalid(
                    seq,
                    type_,
                    "only surface events (system/message, user/message, "
                    "assistant/message, tool/result) may carry surface_op or "
                    "source_event_seqs",
                )
            return None
        if op is None:
            raise invalid(seq, type_, "a surface event must carry surface_op")
        if sources is not None and type_ == "assistant/message":
            raise invalid(
                seq, type_, "assistant/message may not carry source_event_seqs"
            )
        if op.__class__ is str and op == "append":
            return APPEND
        if op.__class__ is not SurfaceReplace:
            raise invalid(
                seq,
                type_,
                f'surface_op must be "append" or SurfaceReplace, got {op!r:.60}',
            )
        start = op.start_seq
        end = op.end_seq
        nodes = self.nodes
        i = _position(nodes, start)
        j = _position(nodes, end)
        if i is None:
            raise invalid(
                seq,
                type_,
                f"replace start_seq {start!r:.40} is not a current surface node",
            )
        if j is None:
            raise invalid(
                seq, type_, f"replace end_seq {end!r:.40} is not a current surface node"
            )
        if i > j:
            raise invalid(
                seq,
                type_,
                f"replace start_seq {start} comes after end_seq {end} on the surface",
            )
        shadowed = nodes[i : j + 1].tolist()
        cited = set(sources) if sources is not None else set()
        missing = [s for s in shadowed if s not in cited]
        if missing:
            raise invalid(
                seq,
                type_,
                f"source_event_seqs must include every replaced surface node; "
                f"missing {missing}",
            )
        if type_ == "tool/result":
            if not isinstance(data, ToolResultData):
                raise invalid(
                    seq,
                    type_,
                    f"carries {type(data).__name__} data, not ToolResultData",
                )
            self._check_tool_result_replacement(data, shadowed, seq)
        return (i, j)

    def _check_tool_result_replacement(
        self, data: ToolResultData, shadowed: list[int], seq: int
    ) -> None:
        old_event = self._events[shadowed[0]]
        if len(shadowed) != 1 or old_event.type != "tool/result":
            raise invalid(
                seq,
                "tool/result",
                f"a tool/result replacement must replace exactly one tool/result "
                f"node, not seqs {shadowed}",
            )
        old = old_event.data_as(ToolResultData)
        differences = [
            name
            for name, a, b in (
                ("turn", old.turn, data.turn),
                ("step", old.step, data.step),
                ("message.id", old.message.id, data.message.id),
                ("message.source", old.message.source, data.message.source),
                ("error", old.error, data.error),
                ("tool_call_ids", _call_ids(old), _call_ids(data)),
            )
            if a != b
        ]
        if differences:
            raise invalid(
                seq,
                "tool/result",
                f"a tool/result replacement may change only the content of the "
                f"result at seq {shadowed[0]}; it changes {', '.join(differences)}",
            )

    def apply(self, plan: tuple[int, int], seq: int) -> None:
        """Make event ``seq`` a node as ``plan`` (from :meth:`plan`) says."""
        nodes = self.nodes
        if plan is APPEND:
            if nodes is _NO_NODES:  # the first node: the store of this surface
                self.nodes = nodes = array("q")
            nodes.append(seq)
            return
        i, j = plan
        nodes[i : j + 1] = array("q", (seq,))
        self.generation += 1


def _position(nodes: array[int], seq: object) -> int | None:
    """The position of node ``seq`` in ``nodes``, or ``None`` when it is no node."""
    if seq.__class__ is not int:
        return None
    try:
        return nodes.index(seq)
    except ValueError:
        return None


def _call_ids(data: ToolResultData) -> tuple[str, ...]:
    return tuple(
        b.tool_call_id for b in data.message.content if isinstance(b, ToolResultBlock)
    )
