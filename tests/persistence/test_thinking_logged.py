"""The thinking switch a request asked for is in its logged call config.

``AgentOptions.thinking`` (or what an ``agent/request`` listener sets) is the
``thinking`` of the request's :class:`CallConfig`, which ``request/header`` logs:
``"thinking": true | false`` when set, no key at all when ``None``, so logs without
it (older ones, the reference's) read as they always did.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

import dsh_trio as dsh
from dsh_trio.errors import SessionCorruptError
from dsh_trio.persistence import load_session
from dsh_trio.persistence._jsonl import JsonlPersistence
from dsh_trio.session import Session
from dsh_trio.testing import ScriptedModel, reply
from dsh_trio.values import (
    CallConfig,
    EpochHeader,
    RequestHeaderData,
    event_from_json,
    event_to_json,
)

FIXTURE = Path(__file__).parent / "fixtures" / "reference_orders"
LOG = Path("--w-p--") / "orders" / "session.v3.jsonl"


def header_configs(root: Path) -> list[dict[str, Any]]:
    """The ``config`` object of every ``request/header`` line under ``root``."""
    (log,) = root.rglob("session.v3.jsonl")
    lines = [json.loads(line) for line in log.read_text("utf-8").splitlines()[1:]]
    return [
        line["data"]["header"]["config"]
        for line in lines
        if line["type"] == "request/header"
    ]


async def one_turn(
    root: Path,
    thinking: bool | None,
    listener: Callable[..., Awaitable[CallConfig]] | None = None,
) -> tuple[ScriptedModel, str]:
    model = ScriptedModel(default=reply("ok"))
    async with dsh.open_runtime(
        models={"mock": model}, persistence=JsonlPersistence(root)
    ) as runtime:
        if listener is not None:
            runtime.events.on("agent/request", listener)
        options = dsh.AgentOptions(provider="mock", model="m", thinking=thinking)
        async with runtime.agents.open(options=options) as agent:
            agent.followup(dsh.user_message("hello"))
            await agent.when_idle()
            session_id = str(agent.session.id)
    return model, session_id


@pytest.mark.parametrize("thinking", [True, False, None])
async def test_the_logged_config_says_what_was_asked(
    tmp_path: Path, thinking: bool | None
) -> None:
    model, session_id = await one_turn(tmp_path, thinking)
    assert [r.thinking for r in model.requests] == [thinking]
    (config,) = header_configs(tmp_path)
    if thinking is None:
        assert config == {"provider": "mock", "model": "m"}  # the format as before
    else:
        assert config == {"provider": "mock", "model": "m", "thinking": thinking}
    session, writer = await load_session(JsonlPersistence(tmp_path), session_id)
    await writer.close()
    header = session.request_header()
    assert header is not None and header.config.thinking is thinking


async def test_a_listener_that_switches_thinking_is_sent_and_logged(
    tmp_path: Path,
) -> None:
    async def think(payload: Any, next: Callable[[], Awaitable[CallConfig]]) -> Any:
        return attrs.evolve(await next(), thinking=True)

    model, _ = await one_turn(tmp_path, False, think)
    assert [r.thinking for r in model.requests] == [True]
    assert header_configs(tmp_path) == [
        {"provider": "mock", "model": "m", "thinking": True}
    ]


async def test_a_log_without_the_field_reads_as_no_switch(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    session, writer = await load_session(JsonlPersistence(tmp_path), "orders")
    await writer.close()
    header = session.request_header()
    assert header is not None
    assert header.config == CallConfig(provider="mock", model="mock")
    assert header.config.thinking is None


@pytest.mark.parametrize("value", ['"yes"', "1", "0"])
async def test_a_thinking_that_is_not_a_bool_is_refused(
    tmp_path: Path, value: str
) -> None:
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    path = tmp_path / LOG
    text = path.read_text("utf-8")
    marked = text.replace(
        '"config":{"provider":"mock","model":"mock"}',
        f'"config":{{"provider":"mock","model":"mock","thinking":{value}}}',
        1,
    )
    assert marked != text
    path.write_text(marked, "utf-8")
    with pytest.raises(SessionCorruptError) as refused:
        await load_session(JsonlPersistence(tmp_path), "orders")
    assert refused.value.line == 8
    assert "thinking" in str(refused.value)
    assert path.read_text("utf-8") == marked


def test_request_header_data_round_trips_the_switch() -> None:
    header = EpochHeader(config=CallConfig(provider="p", model="m", thinking=False))
    data = RequestHeaderData(header=header, reason="initial")
    session = Session.create("s")
    event = session.append("request/header", data)
    line = event_to_json(event)
    assert line["data"] == {
        "header": {"config": {"provider": "p", "model": "m", "thinking": False}},
        "reason": "initial",
    }
    assert event_from_json(line).data == data
