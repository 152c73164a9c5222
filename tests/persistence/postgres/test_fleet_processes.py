"""A fleet of worker processes, a sender process, and a worker killed half way.

Three ``dsh-trio worker`` processes (the offline demo model) serve 200 sessions;
a fourth process mails them 2,000 follow-ups and waits for every one. Once half
the mail is sent, one worker is killed with SIGKILL (mid-turn as likely as not)
and its lease expiry is moved into the past on the server, as its running out
does. Then: every mail is a claimed user message exactly once in its session's
log; every turn ended, completed or closed by repair; each session's turns
follow one another (one writer at a time); the mailbox is empty; every wait
returned.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import IO

import pytest
import trio

from dsh_trio.persistence.postgres import PostgresPersistence
from dsh_trio.values import Completed, Interrupted

from ._cluster import Cluster

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes")

SESSIONS = 200
MAILS_PER_SESSION = 10

SENDER = textwrap.dedent(
    """
    import json, sys
    import trio
    import dsh_trio as dsh
    from dsh_trio.persistence.postgres import PostgresPersistence

    async def main(dsn, sessions, per_session):
        store = PostgresPersistence(dsn, pool_size=8)
        sent = []
        async with dsh.open_runtime(persistence=store) as rt:
            async def post(sid, n):
                mid = await rt.sessions.followup(sid, f"{sid} mail {n}")
                sent.append((sid, mid))

            for n in range(per_session):
                if n == per_session // 2:
                    print("half", flush=True)
                    await trio.to_thread.run_sync(sys.stdin.readline)
                async with trio.open_nursery() as nursery:
                    for i in range(sessions):
                        nursery.start_soon(post, f"s{i:03d}", n)
            print("sent", flush=True)
            reasons = {}
            limit = trio.CapacityLimiter(50)

            async def wait(sid, mid):
                async with limit:
                    result = await rt.sessions.wait(sid, mid, check=False)
                kind = type(result.reason).__name__
                reasons[kind] = reasons.get(kind, 0) + 1

            async with trio.open_nursery() as nursery:
                for sid, mid in sent:
                    nursery.start_soon(wait, sid, mid)
        await store.aclose()
        print(json.dumps({"sent": sent, "reasons": reasons}), flush=True)

    trio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
    """
)


def _readline(stream: IO[str] | None, timeout: float = 120) -> str:
    assert stream is not None
    ready, _, _ = select.select([stream], [], [], timeout)
    assert ready, f"a child process said nothing within {timeout} s"
    return stream.readline().strip()


def test_three_workers_two_hundred_sessions_two_thousand_mails_one_killed(
    pg_cluster: Cluster, tmp_path: Path
) -> None:
    dsn = pg_cluster.new_database()
    uri = pg_cluster.uri(dsn)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    workers = [
        subprocess.Popen(
            [
                *(sys.executable, "-m", "dsh_trio.cli", "worker", "--store", uri),
                *("--passivate-after", "2"),
            ],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        for _ in range(3)
    ]
    script = tmp_path / "sender.py"
    script.write_text(SENDER)
    sender = None
    try:
        # Mail is durable before any worker runs: the sender starts at once.
        sender = subprocess.Popen(
            [sys.executable, str(script), dsn, str(SESSIONS), str(MAILS_PER_SESSION)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for worker in workers:
            assert "serving" in _readline(worker.stderr)
        assert _readline(sender.stdout) == "half"
        victim = workers[0]
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=60)
        _expire(dsn, victim.pid)
        assert sender.stdin is not None
        sender.stdin.write("go\n")
        sender.stdin.flush()
        assert _readline(sender.stdout) == "sent"
        report = json.loads(_readline(sender.stdout, timeout=600))
        assert sender.wait(timeout=60) == 0
    finally:
        for proc in [*workers, *([sender] if sender else [])]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in [*workers, *([sender] if sender else [])]:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:  # pragma: no cover - a hang guard
                proc.kill()
                proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
    sent = report["sent"]
    assert len(sent) == SESSIONS * MAILS_PER_SESSION
    assert sum(report["reasons"].values()) == len(sent)  # every wait returned
    assert set(report["reasons"]) <= {"Completed", "Interrupted"}
    trio.run(_check, dsn, sent)


def _expire(dsn: str, pid: int) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE dsh_trio.owners SET expires_at = now() - interval '1 s'"
            " WHERE pid = %s",
            (pid,),
        )


async def _check(dsn: str, sent: list[list[str]]) -> None:
    store = PostgresPersistence(dsn)
    try:
        by_session: dict[str, list[str]] = {}
        for sid, mid in sent:
            by_session.setdefault(sid, []).append(mid)
        for sid, mids in by_session.items():
            _, events = await store.read(sid)
            claimed = [
                e.data.id
                for e in events
                if e.type == "user/message" and e.surface_op == "append"
            ]
            assert sorted(claimed) == sorted(mids), sid  # each exactly once
            turn = 0
            open_turn = False
            for e in events:
                if e.type == "turn/start":
                    assert not open_turn, f"{sid}: turn {e.data.turn} overlaps"
                    assert e.data.turn == turn + 1, sid
                    turn, open_turn = e.data.turn, True
                elif e.type == "turn/end":
                    assert open_turn and e.data.turn == turn, sid
                    reason: object = e.data.reason
                    assert reason in (Completed(), Interrupted()), sid
                    open_turn = False
            assert not open_turn, f"{sid}: turn {turn} never ended"
        rows = await store._pool.run(
            lambda conn: conn.execute(
                "SELECT count(*) FROM dsh_trio.mailbox"
            ).fetchone()
        )
        assert rows[0] == 0
    finally:
        await store.aclose()
