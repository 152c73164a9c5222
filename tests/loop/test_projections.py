"""The system prompt and the runtime context as each step proposes them.

The projections follow the session through its surface. Over random histories
(appends, replacements, events off the surface) the kept system-prompt projection
appends exactly what one rebuilt at each look appends, and the kept context projection
retains and proposes exactly what a scan of every new event gives; an unchanged prompt
appends nothing while no system node comes; a step that claimed nothing proposes an
empty batch; the prompt is what ``SystemPrompt.render`` gives.
"""

from __future__ import annotations

import types
from typing import Any

from hypothesis import given, settings, strategies as st

import dsh_trio as dsh
from dsh_trio import new_message_id
from dsh_trio.loop._context import (
    RuntimeContextProjection,
    join_context_sections,
    render_context_sections,
    render_prompt,
)
from dsh_trio.loop._prompt import SystemPromptProjection
from dsh_trio.loop._steps import StepRequests
from dsh_trio.session import Session
from dsh_trio.values import (
    SYSTEM_PROMPT_PLUGIN,
    ContextSection,
    PluginSource,
    SurfaceReplace,
    SystemMessage,
    SystemMessageData,
    TextBlock,
    UserMessage,
)

TEXTS = ("", "alpha", "beta")

# A message: ("system", text), ("owned", text or None for two blocks), ("user", text).
messages = st.one_of(
    st.tuples(st.just("system"), st.sampled_from(TEXTS)),
    st.tuples(st.just("owned"), st.sampled_from((*TEXTS, None))),
    st.tuples(st.just("user"), st.sampled_from(TEXTS[1:])),
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), messages),
        st.tuples(st.just("replace"), st.tuples(messages, st.integers(0, 99))),
        st.tuples(st.just("note"), st.none()),
        st.tuples(st.just("look"), st.sampled_from(TEXTS)),
    ),
    max_size=40,
)


def _message(kind: str, text: str | None) -> tuple[str, Any]:
    if kind == "system":
        content = (TextBlock(text),) if text else ()
        message = SystemMessage(id=new_message_id(), content=content)
        return "system/message", SystemMessageData(turn=1, step=1, message=message)
    if kind == "owned":
        blocks = (
            (TextBlock(text),) if text is not None else (TextBlock("a"), TextBlock("b"))
        )
        source = PluginSource(SYSTEM_PROMPT_PLUGIN, form="snapshot")
        return "user/message", UserMessage(
            id=new_message_id(), content=blocks, source=source
        )
    assert text is not None
    return "user/message", dsh.user_message(text)


def _apply(session: Session, op: str, arg: Any) -> None:
    """Append what ``op`` says (a look appends nothing here)."""
    if op == "note":
        session.append("x/note", {"n": session.next_seq})
    elif op == "append":
        session.append(*_message(*arg), surface_op="append")
    elif op == "replace":
        (kind, text), pick = arg
        nodes = session.surface
        if not nodes:
            return
        i = pick % len(nodes)
        j = i + (pick // len(nodes)) % min(3, len(nodes) - i)
        session.append(
            *_message(kind, text),
            surface_op=SurfaceReplace(nodes[i], nodes[j]),
            source_event_seqs=nodes[i : j + 1],
        )


class _GeneralContexts(RuntimeContextProjection):
    """The general path: every event since the last look is scanned."""

    __slots__ = ()

    def _sync(self) -> None:
        if self._next_seq < 0:
            self._restore()
            return
        end = self._session.next_seq
        self._retained = self._scan(self._retained, end)
        self._next_seq = end


def _shape(message: UserMessage | None) -> object:
    if message is None:
        return None
    return message.content, message.source


@settings(max_examples=300, deadline=None, derandomize=True)
@given(script=operations)
def test_the_context_projection_follows_the_surface_like_a_full_scan(
    script: list[tuple[str, Any]],
) -> None:
    session = Session.create()
    fast = RuntimeContextProjection(session)
    general = _GeneralContexts(session)
    for op, arg in script:
        _apply(session, op, arg)
        if op == "look":
            assert fast.retained_text == general.retained_text
            assert fast._retained == general._retained
            for sections in ((), (ContextSection("c", arg),) if arg else ()):
                assert _shape(fast.project(sections)) == _shape(
                    general.project(sections)
                )


def _trail(session: Session, start: int) -> list[object]:
    """The events from ``start`` on, without the fields that differ by construction."""
    trail: list[object] = []
    for event in session.events[start:]:
        data: object = event.data
        if isinstance(data, SystemMessageData):
            data = (data.turn, data.step, data.message.content, data.message.source)
        elif isinstance(data, UserMessage):
            data = (data.content, data.source)
        trail.append(
            (event.seq, event.type, data, event.surface_op, event.source_event_seqs)
        )
    return trail


@settings(max_examples=300, deadline=None, derandomize=True)
@given(script=operations)
def test_the_system_prompt_projection_appends_what_a_rebuilt_one_appends(
    script: list[tuple[str, Any]],
) -> None:
    fast_session, general_session = Session.create(), Session.create()
    fast = SystemPromptProjection(fast_session)
    for op, arg in script:
        for session in (fast_session, general_session):
            _apply(session, op, arg)
        if op == "look":
            start = fast_session.next_seq
            fast.project(arg, turn=2, step=3)
            SystemPromptProjection(general_session).project(arg, turn=2, step=3)
            assert _trail(fast_session, start) == _trail(general_session, start)


def test_an_unchanged_prompt_appends_nothing_until_a_system_node_comes() -> None:
    session = Session.create()
    projection = SystemPromptProjection(session)
    projection.project("p", turn=1, step=1)  # appends the head node
    projection.project("p", turn=1, step=1)
    assert session.next_seq == 1
    session.append("user/message", dsh.user_message("hi"), surface_op="append")
    projection.project("p", turn=1, step=2)  # no system node came
    assert session.next_seq == 2
    session.append(*_message("system", "other"), surface_op="append")
    projection.project("p", turn=1, step=3)  # a new system node: normalised again
    last = session.events[-1]
    assert last.surface_op == SurfaceReplace(2, 2)
    assert isinstance(last.data, SystemMessageData)
    assert last.data.message.content == ()


def test_no_context_renders_nothing_without_building_a_snapshot() -> None:
    assert join_context_sections(()) == ""

    class Services:
        def __init__(self, composition: object) -> None:
            self.prompt = dsh.SystemPrompt()
            self.composition = composition

    class Composition:
        def __init__(self, extra: list[tuple[str, Any]]) -> None:
            self.extra = extra

        def contexts_for(self, agent: object) -> list[tuple[str, Any]]:
            return self.extra

    agent = object()
    assert render_context_sections(Services(None), agent) == ()  # type: ignore[arg-type]
    assert render_context_sections(Services(Composition([])), agent) == ()  # type: ignore[arg-type]
    services = Services(Composition([("b", lambda a: "two")]))
    services.prompt.context("a", lambda a: "one")
    services.prompt.context("b", lambda a: "first")
    assert render_context_sections(services, agent) == (  # type: ignore[arg-type]
        ContextSection("a", "one"),
        ContextSection("b", "two"),
    )


def test_plain_appends_change_neither_projection() -> None:
    session = Session.create()
    prompt = SystemPromptProjection(session)
    contexts = RuntimeContextProjection(session)
    prompt.project("p", turn=1, step=1)
    assert contexts.retained_text is None
    for _ in range(3):
        session.append("user/message", dsh.user_message("hi"), surface_op="append")
    end = session.next_seq
    prompt.project("p", turn=2, step=1)
    assert session.next_seq == end  # nothing appended
    assert contexts.project(()) is None
    assert contexts.retained_text is None


def test_a_sourced_user_message_after_a_look_is_retained() -> None:
    session = Session.create()
    contexts = RuntimeContextProjection(session)
    assert contexts.retained_text is None
    owned = UserMessage(
        id=new_message_id(),
        content=(dsh.TextBlock("snap"),),
        source=PluginSource(SYSTEM_PROMPT_PLUGIN, form="snapshot"),
    )
    session.append("user/message", dsh.user_message("hi"), surface_op="append")
    assert contexts.retained_text is None
    session.append("user/message", owned, surface_op="append")
    assert contexts.retained_text == "snap"


# --------------------------------------------------------------------------- the step's proposal


def test_a_step_that_claimed_nothing_proposes_an_empty_enter() -> None:
    agent: Any = types.SimpleNamespace(
        session=Session.create(), options=dsh.AgentOptions(), id="s"
    )
    requests = StepRequests(agent, types.SimpleNamespace())  # type: ignore[arg-type]
    assert requests.proposal([], False) == dsh.Enter(())
    message = dsh.user_message("hi")
    proposed = requests.proposal([message], False)
    assert proposed == dsh.Enter((message,))
    assert proposed.messages[0] is message


class _Composition:
    def __init__(self, sections: list[tuple[str, Any]]) -> None:
        self.sections = sections

    def sections_for(self, agent: object) -> list[tuple[str, Any]]:
        return self.sections

    def contexts_for(self, agent: object) -> list[tuple[str, Any]]:
        return []


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    own=st.lists(st.sampled_from(("", "one", "two")), max_size=2),
    extra=st.lists(st.sampled_from(("", "three")), max_size=2),
    composed=st.booleans(),
)
def test_the_prompt_is_what_render_gives(
    own: list[str], extra: list[str], composed: bool
) -> None:
    prompt = dsh.SystemPrompt()
    for k, text in enumerate(own):
        prompt.add_section(f"s{k}", text)
    sections = [(f"x{k}", text) for k, text in enumerate(extra)]
    composition = _Composition(sections) if composed else None
    services: Any = types.SimpleNamespace(prompt=prompt, composition=composition)
    agent = object()
    expected = prompt.render(agent, sections if composed else ())
    assert render_prompt(services, agent) == expected
