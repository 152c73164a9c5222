"""Several OS processes on one store: one writer per session, crash and takeover.

Two processes race to open one session a hundred times; a writer process is
killed with SIGKILL mid-turn and another process takes its session over once the
lease has expired (the expiry is moved into the past on the server, as a lease
running out does), repairs it and runs a turn, while the dead writer's fencing
token can no longer append.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.errors import SessionLeaseError
from dsh_trio.persistence._pg_writer import PostgresWriter
from dsh_trio.persistence.postgres import PostgresPersistence
from dsh_trio.testing import ScriptedModel, reply
from dsh_trio.values import Completed, Interrupted, TurnEnd

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes")

Stores = Callable[..., PostgresPersistence]
OPTIONS = dsh.AgentOptions(provider="scripted", model="m")

RACER = textwrap.dedent(
    """
    import os, sys
    import trio
    from dsh_trio.errors import SessionLeaseError
    from dsh_trio.persistence.postgres import PostgresPersistence
    from dsh_trio.session import Session

    async def main(dsn):
        store = PostgresPersistence(dsn)
        for line in sys.stdin:
            n = int(line.split()[1])
            try:
                writer, events = await store.open("race")
            except SessionLeaseError:
                print("lost", flush=True)
                continue
            print("won", flush=True)
            sys.stdin.readline()  # the parent heard both: write and let go
            session = Session.restore(writer.header, events)
            for part in range(3):  # three batches, each its own transaction
                ev = session.append("test/mark", {"round": n, "pid": os.getpid(), "part": part}, ignorable=True)
                await writer.append([ev], sync=part == 2)
            await writer.close()
            print("done", flush=True)
        await store.aclose()

    trio.run(main, sys.argv[1])
    """
)


def _readline(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    assert ready, "a child process did not answer within 60 s"
    return proc.stdout.readline().strip()


def test_two_processes_race_for_one_session_a_hundred_times(
    pg_dsn: str, tmp_path: Path
) -> None:
    async def seed() -> None:
        store = PostgresPersistence(pg_dsn)
        writer = await store.create(dsh.session.Session.create("race").header)
        session = dsh.session.Session.create("race")
        await writer.append(
            [session.append("test/mark", {"round": -1}, ignorable=True)], sync=True
        )
        await writer.close()
        await store.aclose()

    trio.run(seed)
    script = tmp_path / "racer.py"
    script.write_text(RACER)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), pg_dsn],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for n in range(100):
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write(f"open {n}\n")
                proc.stdin.flush()
            answers = [_readline(proc) for proc in procs]
            assert sorted(answers) == ["lost", "won"], f"round {n}: {answers}"
            winner = procs[answers.index("won")]
            assert winner.stdin is not None
            winner.stdin.write("go\n")
            winner.stdin.flush()
            assert _readline(winner) == "done"
    finally:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()
        for proc in procs:
            assert proc.wait(timeout=60) == 0
            assert proc.stdout is not None
            proc.stdout.close()

    async def check() -> None:
        store = PostgresPersistence(pg_dsn)
        _, events = await store.read("race")
        await store.aclose()
        assert [e.seq for e in events] == list(range(301))
        marks: list[Any] = [e.data for e in events[1:]]
        for n in range(100):  # each round's three batches, together, one writer
            block = marks[3 * n : 3 * n + 3]
            assert [m["round"] for m in block] == [n] * 3
            assert [m["part"] for m in block] == [0, 1, 2]
            assert len({m["pid"] for m in block}) == 1

    trio.run(check)


VICTIM = textwrap.dedent(
    """
    import sys
    import trio
    import dsh_trio as dsh
    from dsh_trio.persistence.postgres import PostgresPersistence
    from dsh_trio.testing import ScriptedModel, hang

    async def main(dsn):
        store = PostgresPersistence(dsn, durability="always")
        model = ScriptedModel(hang("half an ans"))
        options = dsh.AgentOptions(provider="scripted", model="m")
        async with dsh.open_runtime(models={"scripted": model}, persistence=store) as rt:
            handle = await rt.agents.create("victim", options=options)
            handle.agent.followup(dsh.user_message("hello"))
            await handle.agent.flush()
            print(handle.agent.session.next_seq, flush=True)
            await trio.sleep_forever()

    trio.run(main, sys.argv[1])
    """
)


async def test_a_killed_writer_is_taken_over_repaired_and_fenced_off(
    stores: Stores, pg_dsn: str, tmp_path: Path
) -> None:
    script = tmp_path / "victim.py"
    script.write_text(VICTIM)
    proc = await trio.lowlevel.open_process(
        [sys.executable, str(script), pg_dsn], stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    out = b""
    while not out.endswith(b"\n"):
        chunk = await proc.stdout.receive_some()
        assert chunk, "the writer process ended before it flushed"
        out += chunk
    flushed = int(out)
    os.kill(proc.pid, signal.SIGKILL)
    await proc.wait()
    await proc.stdout.aclose()

    store = stores()
    header, before = await store.read("victim")  # reads need no lease
    assert len(before) == flushed
    with pytest.raises(SessionLeaseError):  # the dead writer's lease still runs
        await store.open("victim")
    rows = await store._pool.run(
        lambda conn: conn.execute(
            "SELECT token FROM dsh_trio.leases WHERE session_id = 'victim'"
        ).fetchall()
    )
    dead_token = int(rows[0][0])
    await store._pool.run(  # the lease runs out
        lambda conn: conn.execute(
            "UPDATE dsh_trio.owners SET expires_at = now() - interval '1 s'"
        )
    )

    model = ScriptedModel(reply("after the crash"))
    async with dsh.open_runtime(models={"scripted": model}, persistence=store) as rt:
        handle = await rt.agents.resume("victim", options=OPTIONS)
        handle.agent.followup(dsh.user_message("again"))
        await handle.agent.when_idle()
        await handle.agent.flush()
        zombie = PostgresWriter(store, header, flushed, token=dead_token, stored=True)
        with pytest.raises(SessionLeaseError, match="taken over"):
            await zombie.append(list(handle.agent.session.events[flushed:]), sync=True)
        await zombie.close()

    _, after = await store.read("victim")
    assert after[:flushed] == before  # every flushed event is there, unchanged
    assert [e.seq for e in after] == list(range(len(after)))
    ends = [e.data_as(TurnEnd) for e in after if e.type == "turn/end"]
    assert [(e.turn, type(e.reason)) for e in ends] == [
        (1, Interrupted),
        (2, Completed),
    ]
    assert after[-1].type == "turn/end"
