"""Sessions move between JSONL and PostgreSQL line for line, by library call and CLI."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.cli import main
from dsh_trio.persistence.postgres import (
    PostgresPersistence,
    export_session,
    import_session,
)
from dsh_trio.testing import ScriptedModel, hang, reply, tool_calls
from dsh_trio.values import Interrupted, TurnEnd

from ._cluster import Cluster

Stores = Callable[..., PostgresPersistence]
OPTIONS = dsh.AgentOptions(provider="scripted", model="m")


async def _rows(store: PostgresPersistence, sid: str) -> list[str]:
    rows = await store._pool.run(
        lambda conn: conn.execute(
            "SELECT line FROM dsh_trio.events WHERE session_id = %s ORDER BY seq",
            (sid,),
        ).fetchall()
    )
    return [str(r[0]) for r in rows]


async def _run_turns(persistence: dsh.SessionPersistence, sid: str) -> None:
    model = ScriptedModel(
        tool_calls(("c1", "lookup", '{"q": "ü ☃ \\n"}')), reply("done é"), reply("two")
    )
    async with dsh.open_runtime(
        models={"scripted": model}, persistence=persistence
    ) as rt:
        handle = await rt.agents.create(sid, options=OPTIONS)
        handle.agent.followup(dsh.user_message("first, with unicode: ☃"))
        await handle.agent.when_idle()
        handle.agent.followup(dsh.user_message("second"))
        await handle.agent.when_idle()


async def test_export_then_import_is_event_for_event_identical(
    stores: Stores, pg_cluster: Cluster, tmp_path: Path
) -> None:
    source = stores()
    await _run_turns(source, "s1")
    path = await export_session(source, "s1", tmp_path / "jsonl")
    lines = (await trio.Path(path).read_bytes()).decode("utf-8").split("\n")
    assert lines[-1] == ""
    assert lines[1:-1] == await _rows(source, "s1")  # byte for byte
    jsonl_writer, jsonl_events = await dsh.JsonlPersistence(tmp_path / "jsonl").open(
        "s1"
    )
    _, pg_events = await source.read("s1")
    assert list(jsonl_events) == list(pg_events)
    await jsonl_writer.close()

    target = PostgresPersistence(pg_cluster.new_database())
    try:
        header = await import_session(target, path)
        assert header.id == "s1"
        assert await _rows(target, "s1") == await _rows(source, "s1")
        back_header, back = await target.read("s1")
        assert back_header == (await source.read("s1"))[0]
        assert list(back) == list(pg_events)
    finally:
        await target.aclose()


async def test_a_jsonl_session_imported_into_postgres_loads_and_resumes(
    stores: Stores, tmp_path: Path
) -> None:
    jsonl = dsh.JsonlPersistence(tmp_path / "jsonl")
    model = ScriptedModel(reply("one"), hang())
    async with dsh.open_runtime(models={"scripted": model}, persistence=jsonl) as rt:
        handle = await rt.agents.create("j1", options=OPTIONS)
        handle.agent.followup(dsh.user_message("hi"))
        await handle.agent.when_idle()
        handle.agent.followup(dsh.user_message("hangs"))  # left open: a crash
        await handle.agent.flush()
        path = jsonl.path_for(handle.agent.session.header)
        snapshot = await trio.Path(path).read_bytes()
        await handle.dispose()
    await trio.Path(path).write_bytes(snapshot)  # as the crash left it: turn 2 open

    store = stores()
    await import_session(store, path)
    assert await _rows(store, "j1") == snapshot.decode().split("\n")[1:-1]
    model = ScriptedModel(reply("three"))
    async with dsh.open_runtime(models={"scripted": model}, persistence=store) as rt:
        handle = await rt.agents.resume("j1", options=OPTIONS)
        handle.agent.followup(dsh.user_message("again"))
        await handle.agent.when_idle()
    _, events = await store.read("j1")
    ends = [e.data_as(TurnEnd) for e in events if e.type == "turn/end"]
    assert [e.turn for e in ends] == [1, 2, 3]
    assert isinstance(ends[1].reason, Interrupted)


def test_the_command_line_exports_imports_lists_and_shows(
    pg_cluster: Cluster, pg_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = pg_cluster.uri(pg_dsn)
    jsonl_root = tmp_path / "jsonl"

    async def seed() -> str:
        jsonl = dsh.JsonlPersistence(jsonl_root)
        await _run_turns(jsonl, "c1")
        header = (await jsonl.list())[0]
        return jsonl.path_for(header)

    path = trio.run(seed)
    assert main(["import", path, "--store", uri]) == 0
    assert "imported session c1" in capsys.readouterr().out
    assert main(["import", path, "--store", uri]) == 1  # already stored
    assert "already exists" in capsys.readouterr().err
    assert main(["sessions", "--store", uri]) == 0
    listing = capsys.readouterr().out
    assert "c1" in listing and "second" in listing
    assert main(["show", "c1", "--store", uri]) == 0
    assert "first, with unicode: ☃" in capsys.readouterr().out
    assert main(["export", "c1", "--to", str(tmp_path / "out"), "--store", uri]) == 0
    exported = capsys.readouterr().out.split(" to ", 1)[1].strip()
    assert Path(exported).read_bytes() == Path(path).read_bytes()
    assert main(["export", "c1", "--to", str(tmp_path / "x")]) == 2  # no store named
    assert "--store" in capsys.readouterr().err
    assert main(["show", "nope", "--store", uri]) == 1


def test_chat_runs_on_the_store_named_by_the_environment(
    pg_cluster: Cluster,
    pg_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DSH_TRIO_STORE", pg_cluster.uri(pg_dsn))
    here = ["--session-dir", str(tmp_path / "sessions"), "--fast"]
    assert main(["chat", *here, "hello there"]) == 0
    assert main(["chat", *here, "--continue", "and again"]) == 0
    farewell = capsys.readouterr().err
    assert not list((tmp_path / "sessions").rglob("*.jsonl"))  # nothing in JSONL
    # The farewell names the store the session went to, not a file it never had.
    assert "saved in postgres: " in farewell and ".jsonl" not in farewell

    async def stored() -> list[str]:
        store = PostgresPersistence(pg_dsn)
        try:
            headers = await store.list()
            assert len(headers) == 1
            _, events = await store.read(headers[0].id)
            return [e.type for e in events]
        finally:
            await store.aclose()

    types = trio.run(stored)
    assert types.count("turn/end") == 2


def test_the_resume_hint_names_the_store_given_by_flag(
    pg_cluster: Cluster,
    pg_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("DSH_TRIO_STORE", raising=False)
    uri = pg_cluster.uri(pg_dsn)
    here = ["--session-dir", str(tmp_path / "sessions"), "--fast", "--store", uri]
    assert main(["chat", *here, "hello there"]) == 0
    farewell = capsys.readouterr().err
    match = re.search(r"^resume with: dsh-trio chat (.*)$", farewell, re.M)
    assert match is not None, farewell
    resume = shlex.split(match.group(1))
    assert resume[resume.index("--store") + 1] == uri  # no password in this URI
    assert main(["chat", *resume, "and again"]) == 0  # the hint works as printed
    assert "(1 turn so far)" in capsys.readouterr().err
