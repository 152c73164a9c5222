"""The request-header decision: its shortcut for an unchanged header agrees with the
full comparison in every case."""

from __future__ import annotations

import itertools

import pytest

from dsh_trio.loop._header_log import header_event
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
