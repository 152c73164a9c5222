"""The request-header decision: its shortcut for an unchanged header agrees with the
full comparison in every case; the step's request seed is what ``request_seed`` gives
for the logged header, whatever adapter defaults it names."""

from __future__ import annotations

import itertools
import types
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

import dsh_trio as dsh
from dsh_trio.loop._header_log import header_event
from dsh_trio.loop._requests import request_seed
from dsh_trio.loop._steps import StepRequests
from dsh_trio.session import Session
from dsh_trio.values import (
    AdapterDefaults,
    CallConfig,
    EpochHeader,
    JsonValue,
    RequestHeaderData,
)

CONFIG = CallConfig(provider="p", model="m")
EQUAL_CONFIG = CallConfig(provider="p", model="m")  # equal, not the same object
OTHER_CONFIG = CallConfig(provider="p", model="other")
TOOLS: tuple[JsonValue, ...] = ({"name": "get_value"},)


def _expected(
    persisted: EpochHeader | None,
    header_logged: bool,
    config: CallConfig,
    tools: tuple[JsonValue, ...],
    series: bool,
) -> RequestHeaderData | None:
    """The decision by building the header and comparing it, every time."""
    header = EpochHeader(config=config, tools=tools or None)
    if not header_logged:
        reason = "resume" if persisted is not None else "initial"
        return RequestHeaderData(header=header, reason=reason)  # type: ignore[arg-type]
    if persisted is None or header != persisted:
        return RequestHeaderData(
            header=header, reason="change", starts_series=True if series else None
        )
    if series:
        return RequestHeaderData(header=header, reason="series")
    return None


PERSISTED = [
    None,
    EpochHeader(config=CONFIG),
    EpochHeader(config=CONFIG, tools=TOOLS),
    EpochHeader(config=EQUAL_CONFIG, tools=TOOLS),
    EpochHeader(config=CONFIG, tools=TOOLS, adapter_defaults=AdapterDefaults(True)),
    EpochHeader(config=OTHER_CONFIG, tools=TOOLS),
]


@pytest.mark.parametrize(
    ("persisted", "header_logged", "config", "tools", "series"),
    list(
        itertools.product(
            PERSISTED, [False, True], [CONFIG, OTHER_CONFIG], [(), TOOLS], [False, True]
        )
    ),
)
def test_the_unchanged_header_shortcut_decides_as_the_full_comparison(
    persisted: EpochHeader | None,
    header_logged: bool,
    config: CallConfig,
    tools: tuple[JsonValue, ...],
    series: bool,
) -> None:
    got = header_event(persisted, header_logged, config, tools, series)
    assert got == _expected(persisted, header_logged, config, tools, series)


def test_a_logged_header_with_adapter_defaults_is_logged_again_when_it_differs() -> (
    None
):
    persisted = EpochHeader(
        config=CONFIG, tools=TOOLS, adapter_defaults=AdapterDefaults(True)
    )
    got = header_event(persisted, True, CONFIG, TOOLS, False)
    assert got is not None and got.reason == "change"


# --------------------------------------------------------------------------- the request seed

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
