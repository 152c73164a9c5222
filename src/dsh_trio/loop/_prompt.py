"""System-prompt sections and their projection onto the session surface."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ..values import (
    SYSTEM_PROMPT_PLUGIN,
    ContentBlock,
    PluginSource,
    SurfaceReplace,
    SystemMessage,
    SystemMessageData,
    TextBlock,
)
from ._ids import new_message_id

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["SystemPrompt", "SystemPromptProjection"]

Section = str | Callable[[object], str]
#: A runtime context: ``(agent) -> text``; ``None`` or ``""`` leaves it out of the snapshot.
ContextRender = Callable[[Any], "str | None"]


@attrs.define(eq=False)
class _Entry:
    name: str
    render: Section
    scope: object | None


@attrs.define(eq=False)
class _Context:
    name: str
    render: ContextRender
    scope: object | None


class SystemPrompt:
    """The system prompt, assembled from named sections.

    The persona (``open_runtime(system_prompt=...)``) is the first section. Sections
    are plain text or a callable ``(agent) -> str`` evaluated once per step. A section
    registered with ``scope=agent`` (or through ``agent.scope.add_section``) applies to
    that agent only. Non-empty sections are joined by a blank line.

    Example::

        runtime.prompt.add_section("style", "Answer in one sentence.")
    """

    def __init__(self, persona: str | None = None) -> None:
        self._entries: list[_Entry] = []
        self._contexts: list[_Context] = []
        if persona:
            self._entries.append(_Entry("persona", persona, None))

    def add_section(
        self, name: str, text: Section, *, scope: object | None = None
    ) -> Callable[[], None]:
        """Add a section; returns an idempotent disposer that removes it."""
        entry = _Entry(name, text, scope)
        self._entries.append(entry)

        def dispose() -> None:
            if entry in self._entries:
                self._entries.remove(entry)

        return dispose

    def context(
        self, name: str, render: ContextRender, *, scope: object | None = None
    ) -> Callable[[], None]:
        """Add a runtime context; returns an idempotent disposer that removes it.

        Unlike a section, a context is not part of the system prompt: at the first
        pre-step proposal of each turn the contexts are rendered (``render(agent)``,
        ``None`` or ``""`` for nothing) and, when the joined text differs from the
        snapshot the session last retained, one ``user/message`` snapshot is appended
        after the turn's claimed input. Changing a context therefore appends to the
        history instead of rewriting the cached system prompt. Never blocks.

        Example::

            dispose = runtime.prompt.context("mode", lambda agent: f"Approval: {mode}")

        Args:
            name: the context's name, recorded in the snapshot's ``sections``. A
                later context with a name already registered replaces its text.
            render: called with the agent, synchronously, once per turn.
            scope: an agent this context applies to; ``None`` for every agent.

        Raises:
            ValueError: ``name`` is blank.
        """
        raw: object = name
        if not isinstance(raw, str) or not raw.strip():
            raise ValueError(f"a runtime context needs a non-blank name, got {name!r}")
        entry = _Context(name, render, scope)
        self._contexts.append(entry)

        def dispose() -> None:
            if entry in self._contexts:
                self._contexts.remove(entry)

        return dispose

    def sections(self) -> list[str]:
        """The names of the registered sections, in order."""
        return [e.name for e in self._entries]

    def contexts(self) -> list[str]:
        """The names of the registered runtime contexts, in order."""
        return [c.name for c in self._contexts]

    def contexts_for(self, agent: object) -> list[tuple[str, ContextRender]]:
        """The runtime contexts that apply to ``agent`` (global and its own), in order."""
        if not self._contexts:
            return []
        return [
            (c.name, c.render)
            for c in self._contexts
            if c.scope is None or c.scope is agent
        ]

    def render(
        self,
        agent: object,
        extra: Sequence[tuple[str, str | Callable[[Any], str]]] = (),
    ) -> str:
        """Render the prompt for ``agent`` (global sections and its own, in order).

        ``extra`` are sections the agent's composition adds, rendered after these.
        """
        if not extra and not self._entries:  # no section at all (every step of many)
            return ""
        parts: list[str] = []
        for e in self._entries:
            if e.scope is not None and e.scope is not agent:
                continue
            if text := _section_text(e.name, e.render, agent):
                parts.append(text)
        for name, render in extra:
            if text := _section_text(name, render, agent):
                parts.append(text)
        return "\n\n".join(parts)


def _section_text(name: str, render: str | Callable[[Any], str], agent: object) -> str:
    """One section's text; a failing or non-``str`` render is reported by name.

    Raises:
        TypeError: the render returned something other than a ``str``.
        Exception: whatever the render raised, with a note naming the section.
    """
    if isinstance(render, str):
        return render
    try:
        text: object = render(agent)
    except Exception as exc:
        exc.add_note(f"while rendering the system-prompt section {name!r}")
        raise
    if not isinstance(text, str):
        raise TypeError(
            f"system-prompt section {name!r} must render a str, got {type(text).__name__}"
        )
    return text


def _node_text(message: SystemMessage) -> str | None:
    content = message.content
    if not content:
        return ""
    if len(content) == 1 and isinstance(content[0], TextBlock):
        return content[0].text
    return None


def _system_message(text: str) -> SystemMessage:
    content: tuple[ContentBlock, ...] = (TextBlock(text),) if text else ()
    return SystemMessage(
        id=new_message_id(), content=content, source=PluginSource(SYSTEM_PROMPT_PLUGIN)
    )


class SystemPromptProjection:
    """Keeps the rendered prompt on the surface as ``system/message`` node 0.

    The route is never "in-history" here, so every projection normalises: later
    non-empty system nodes are replaced by empty ones (single-node replaces citing
    the shadowed seq), then the head node is replaced if its text differs. With no
    system node on the surface, one is appended (even an empty one). The log is
    followed through the surface: after no replace op only the nodes appended since
    the last look are read, and only when the session's prompt mark says a system
    node may be among them; while no system node changes, the same text is not
    checked again.
    """

    def __init__(self, session: Session) -> None:
        self._session = session
        self._generation = -1
        self._count = 0  # the surface's node count at the last look
        self._nodes: list[int] = []
        # The text the system nodes were last found to carry, normalised; ``None``
        # once they change (a replace op or a new system node).
        self._verified: str | None = None

    def _system_nodes(self) -> list[int]:
        session = self._session
        surface = session._surface_nodes
        count = len(surface)
        generation = session.replace_generation
        if generation != self._generation:
            events = session.events
            self._nodes = [s for s in surface if events[s].type == "system/message"]
            self._generation = generation
            self._verified = None
        elif count != self._count and session._prompt_seq >= surface[self._count]:
            # With no replace op since the last look, the surface events appended
            # since are the nodes past the count seen then; none is a system node
            # unless the session's prompt mark (at or above every such node's seq)
            # reaches the first of them.
            events = session.events
            for seq in surface[self._count :]:
                if events[seq].type == "system/message":
                    self._nodes.append(seq)
                    self._verified = None
        self._count = count
        return self._nodes

    def project(self, rendered: str, *, turn: int, step: int) -> None:
        """Append or replace system nodes so the surface carries ``rendered`` at its head."""
        session = self._session
        nodes = self._system_nodes()
        if rendered == self._verified:  # the same nodes, already carrying it
            return
        if not nodes:
            session.append_trusted(
                "system/message",
                SystemMessageData(
                    turn=turn, step=step, message=_system_message(rendered)
                ),
                surface_op="append",
            )
            return
        events = session.events
        for seq in nodes[1:]:
            data = events[seq].data
            assert isinstance(data, SystemMessageData)
            if _node_text(data.message) != "":
                session.append_trusted(
                    "system/message",
                    SystemMessageData(
                        turn=turn, step=step, message=_system_message("")
                    ),
                    surface_op=SurfaceReplace(seq, seq),
                    source_event_seqs=(seq,),
                )
        head = nodes[0]
        data = events[head].data
        assert isinstance(data, SystemMessageData)
        if _node_text(data.message) != rendered:
            session.append_trusted(
                "system/message",
                SystemMessageData(
                    turn=turn, step=step, message=_system_message(rendered)
                ),
                surface_op=SurfaceReplace(head, head),
                source_event_seqs=(head,),
            )
        # Whatever was appended above is a replace op: the next look starts over.
        self._verified = rendered
