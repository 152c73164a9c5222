"""The runtime-context projection: dynamic context turned into snapshot messages.

Runtime contexts (``runtime.prompt.context(...)`` and the contexts an agent's
composition adds) are rendered at the first pre-step proposal of each turn. When the
joined text differs from the snapshot the session retains, one ``user/message``
snapshot is proposed as the last message of the batch; the default ``next()`` of
``agent/pre-step`` enters it, so a listener that replaces the batch without calling
``next()`` drops it (and it is proposed again on the next turn).

The retained snapshot follows the reference (``runtime-context.ts``): the messages
the projection owns are ``user/message`` events whose source is
``PluginSource("@deepseek-ai/dsh-system-prompt", ...)``. On the first use the surface is
scanned backwards: the newest owned message on it is retained; with none, nothing is
retained. After that every owned message becomes the retained one, and a surface
replacement that cites it clears retention (``None``: a cleared marker is due when
the contexts are empty).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from ..values import (
    SYSTEM_PROMPT_PLUGIN,
    ContextSection,
    Enter,
    PluginSource,
    SurfaceReplace,
    TextBlock,
    UserMessage,
)
from ._ids import new_message_id

if TYPE_CHECKING:
    from ..session import Session
    from ._services import AgentServices

__all__ = [
    "CLEARED_CONTEXT",
    "SNAPSHOT_PREAMBLE",
    "RuntimeContextProjection",
    "join_context_sections",
    "render_context_sections",
    "render_prompt",
]

#: The first paragraph of every runtime-context snapshot.
SNAPSHOT_PREAMBLE: Final = "Current runtime context. This snapshot supersedes earlier runtime-context snapshots."
#: The text published when every context is empty after a snapshot existed.
CLEARED_CONTEXT: Final = (
    "Current runtime context: none. Earlier runtime-context snapshots no longer apply."
)


@attrs.frozen
class _Retained:
    seq: int
    text: str | None  # None: not a single text block, so never equal to a rendering


class _Never:
    """No snapshot to follow up on (the reference's ``undefined``): with every context
    empty, nothing is published."""


_NEVER: Final = _Never()


def render_prompt(services: AgentServices, agent: Any) -> str:
    """The system prompt of ``agent``: the runtime's sections, then its composition's."""
    composition = services.composition
    extra = composition.sections_for(agent) if composition is not None else ()
    return services.prompt.render(agent, extra)


def render_context_sections(
    services: AgentServices, agent: Any
) -> tuple[ContextSection, ...]:
    """Render the runtime contexts that apply to ``agent``, in order, empty ones left out.

    The runtime's own contexts come first, then its composition's. A name registered
    twice keeps its first position and takes the later text.

    Raises:
        TypeError: a context rendered something other than a ``str`` or ``None``.
    """
    entries: Sequence[tuple[str, Callable[[Any], str | None]]]
    entries = services.prompt.contexts_for(agent)
    composition = services.composition
    if composition is not None:
        extra = composition.contexts_for(agent)
        if extra:
            entries = [*entries, *extra]
    if not entries:
        return ()
    merged: dict[str, str] = {}
    for name, render in entries:
        try:
            text = render(agent)
        except Exception as exc:
            exc.add_note(f"while rendering the runtime context {name!r}")
            raise
        if text is None:
            text = ""
        elif not isinstance(text, str):
            raise TypeError(
                f"runtime context {name!r} must render a str or None, "
                f"got {type(text).__name__}"
            )
        merged[name] = text
    return tuple(ContextSection(n, t) for n, t in merged.items() if t)


def join_context_sections(sections: Sequence[ContextSection]) -> str:
    """The snapshot text of ``sections`` (``""`` when there is none)."""
    if not sections:
        return ""
    body = "\n\n".join(s.text for s in sections)
    if not body:
        return ""
    return f"{SNAPSHOT_PREAMBLE}\n\n{body}"


def _owned_text(event_data: object) -> tuple[bool, str | None]:
    """(whether ``event_data`` is an owned snapshot, its text if a single text block)."""
    if not isinstance(event_data, UserMessage):
        return False, None
    source = event_data.source
    if not isinstance(source, PluginSource) or source.plugin != SYSTEM_PROMPT_PLUGIN:
        return False, None
    content = event_data.content
    if len(content) == 1 and isinstance(content[0], TextBlock):
        return True, content[0].text
    return True, None


class RuntimeContextProjection:
    """The retained runtime-context snapshot of one session, and the next one to propose.

    Runtime use only (the agent's turn driver). Synchronous: it reads the session's
    log, never waits.
    """

    __slots__ = ("_count", "_generation", "_next_seq", "_retained", "_session")

    def __init__(self, session: Session) -> None:
        self._session = session
        self._retained: _Retained | _Never | None = _NEVER
        self._next_seq = -1  # -1: not restored from the log yet
        self._generation = 0  # the surface's replace generation at the last look
        self._count = 0  # and its node count

    @property
    def retained_text(self) -> str | None:
        """The retained snapshot's text (``None`` when nothing is retained)."""
        self._sync()
        retained = self._retained
        return retained.text if isinstance(retained, _Retained) else None

    def _restore(self) -> None:
        # The surface is scanned, newest first, not the whole log: events of a long
        # restored log are decoded when read, and the first request derives the
        # surface anyway. The one difference from scanning the log: owned messages
        # that are all off the surface count as none ever existed, so with every
        # context empty no cleared marker follows them (the model sees none of them).
        session = self._session
        events = session.events
        self._retained = _NEVER
        surface = session._surface_nodes
        for seq in reversed(surface):
            event = events[seq]
            if event.type != "user/message":
                continue
            owned, text = _owned_text(event.data)
            if owned:
                self._retained = _Retained(seq, text)
                break
        self._next_seq = session.next_seq
        self._generation = session.replace_generation
        self._count = len(surface)

    def _sync(self) -> None:
        """Follow what the session appended since the last look."""
        if self._next_seq < 0:
            self._restore()
            return
        session = self._session
        end = session.next_seq
        if end == self._next_seq:
            return
        retained = self._retained
        surface = session._surface_nodes
        generation = session.replace_generation
        if generation == self._generation:
            # No replace op since the last look: the surface events appended since
            # are the nodes past the count seen then, and none is an owned message
            # unless the session's prompt mark reached them.
            if session._prompt_seq < self._next_seq:
                self._next_seq = end
                self._count = len(surface)
                return
            events = session.events
            for seq in surface[self._count :]:
                event = events[seq]
                if event.type == "user/message":
                    owned, text = _owned_text(event.data)
                    if owned:
                        retained = _Retained(seq, text)
        else:
            retained = self._scan(retained, end)
        self._retained = retained
        self._next_seq = end
        self._generation = generation
        self._count = len(surface)

    def _scan(
        self, retained: _Retained | _Never | None, end: int
    ) -> _Retained | _Never | None:
        """``retained`` after the events from the last look to ``end``."""
        # One slice of the new events, not a read per event.
        for event in self._session.events[self._next_seq : end]:
            op = event.surface_op
            if (
                isinstance(op, SurfaceReplace)
                and isinstance(retained, _Retained)
                and retained.seq in (event.source_event_seqs or ())
            ):  # a replacement cites every node it replaces
                retained = None
            if event.type == "user/message":
                owned, text = _owned_text(event.data)
                if owned:
                    retained = _Retained(event.seq, text)
        return retained

    def project(self, sections: tuple[ContextSection, ...]) -> UserMessage | None:
        """The snapshot to propose for ``sections``, or ``None`` when nothing changed.

        With every context empty the cleared marker is proposed, once, if a snapshot
        existed before; a session that never had one gets nothing.
        """
        current = join_context_sections(sections)
        self._sync()
        retained = self._retained
        if retained is _NEVER and not current:
            return None
        snapshot = current or CLEARED_CONTEXT
        if isinstance(retained, _Retained) and retained.text == snapshot:
            return None
        # The cleared marker has no contributions left to attribute.
        source = (
            PluginSource(SYSTEM_PROMPT_PLUGIN, form="snapshot", sections=sections)
            if sections
            else PluginSource(SYSTEM_PROMPT_PLUGIN)
        )
        return UserMessage(
            id=new_message_id(), content=(TextBlock(snapshot),), source=source
        )

    def propose(self, default: Enter, services: AgentServices, agent: Any) -> Enter:
        """``default`` with the changed snapshot of ``agent``'s contexts appended last.

        Raises:
            TypeError: a context rendered something other than a ``str`` or ``None``.
            Exception: whatever a context's ``render`` raised (it fails the turn
                before any step).
        """
        sections = render_context_sections(services, agent)
        if not sections:  # ``project``'s first outcome, without the call
            self._sync()
            if self._retained is _NEVER:
                return default
        snapshot = self.project(sections)
        if snapshot is None:
            return default
        return Enter((*default.messages, snapshot))
