"""The per-step request pieces take shortcuts that must give what the general path gives.

``StepRequests.seed`` returns the logged header's config without calling
``request_seed`` when no adapter default applies; a step that claimed nothing proposes
one shared empty ``Enter``; ``render_prompt`` skips rendering when no section exists.
"""

from __future__ import annotations

import types
from typing import Any

from hypothesis import given, settings, strategies as st

import dsh_trio as dsh
from dsh_trio.loop._context import render_prompt
from dsh_trio.loop._requests import request_seed
from dsh_trio.loop._steps import StepRequests
from dsh_trio.session import Session
from dsh_trio.values import (
    AdapterDefaults,
    CallConfig,
    EpochHeader,
    RequestHeaderData,
)

# A logged marker is True or omitted, and at least one is set.
_defaults = st.none() | st.sampled_from(
    (
        AdapterDefaults(reasoning_effort=True),
        AdapterDefaults(max_tokens=True),
        AdapterDefaults(reasoning_effort=True, max_tokens=True),
    )
)
_configs = st.builds(
    CallConfig,
    provider=st.sampled_from(("a", "b")),
    model=st.sampled_from(("m", "n")),
    reasoning_effort=st.none() | st.sampled_from(("low", "high")),
    max_tokens=st.none() | st.integers(1, 10),
)
_options = st.builds(
    dsh.AgentOptions,
    provider=st.sampled_from(("a", "b")),
    model=st.sampled_from(("m", "n")),
    reasoning_effort=st.none() | st.sampled_from(("low", "high")),
    max_tokens=st.none() | st.integers(1, 10),
)


def _requests(options: dsh.AgentOptions) -> tuple[StepRequests, Session]:
    session = Session.create()
    agent: Any = types.SimpleNamespace(session=session, options=options, id="s")
    services: Any = types.SimpleNamespace()
    return StepRequests(agent, services), session


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    options=_options,
    config=st.none() | _configs,
    defaults=_defaults,
    logged=st.booleans(),
)
def test_the_seed_is_what_request_seed_gives(
    options: dsh.AgentOptions,
    config: CallConfig | None,
    defaults: AdapterDefaults | None,
    logged: bool,
) -> None:
    requests, session = _requests(options)
    if config is not None:
        header = EpochHeader(config=config, adapter_defaults=defaults)
        session.append(
            "request/header", RequestHeaderData(header=header, reason="initial")
        )
    requests._header_logged = logged
    assert requests.seed() == request_seed(options, session.request_header(), logged)


def test_a_step_that_claimed_nothing_proposes_an_empty_enter() -> None:
    requests, _ = _requests(dsh.AgentOptions())
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
