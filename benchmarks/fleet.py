"""Fleet: mail to sessions served by ``dsh-trio worker`` processes on PostgreSQL.

On a throwaway local cluster (fsync on, as P1-pg starts one), with worker
processes running the offline demo model, measures:

* mail → claimed latency (median and p99): from the call of ``followup`` (its
  commit included) to the ``time`` of the ``user/message`` event that claimed it, one mail at a time, to a session already active and to a session
  that must be activated (created) first;
* mails per second with 1 and with 3 workers: every mail posted at once, to
  sessions x mails each, until every ``wait`` returned;
* (full run only) one worker with ``--max-active 1000`` serving 20,000 sessions
  (one mail each): mails per second and the worker's peak RSS.

When no server can start here, the workload prints one row saying why.
Run: ``python -m benchmarks --only Fleet``.
"""

from __future__ import annotations

import functools
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Any

import trio

from ._harness import Context, Row, skipped
from .pg_store import _cluster_module

__all__ = ["run"]

NAME = "Fleet"


def _start_workers(uri: str, n: int, *extra: str) -> list[subprocess.Popen[str]]:
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "dsh_trio.cli", "worker", "--store", uri, *extra],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(n)
    ]
    for worker in workers:
        assert worker.stderr is not None
        line = worker.stderr.readline()
        if "serving" not in line:
            raise RuntimeError(f"a worker did not start: {line.strip()}")
    return workers


def _stop(workers: list[subprocess.Popen[str]]) -> None:
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            worker.wait(timeout=120)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        if worker.stderr is not None:
            worker.stderr.close()


def _peak_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


async def _claim_time(store: Any, sid: str, mid: str) -> float:
    """The ``time`` (s) of the ``user/message`` event that claimed ``mid``."""
    _, events = await store.read(sid)
    for event in events:
        if event.type == "user/message" and getattr(event.data, "id", None) == mid:
            return float(event.time) / 1000
    raise AssertionError(f"{mid} was not claimed in {sid}")


async def _latencies(dsn: str, n: int, *, fresh: bool) -> list[float]:
    """Mail → claimed, one mail at a time: to one active session, or ``n`` new ones."""
    import dsh_trio as dsh
    from dsh_trio.persistence.postgres import PostgresPersistence

    store = PostgresPersistence(dsn)
    out: list[float] = []
    tag = time.monotonic_ns()
    async with dsh.open_runtime(persistence=store) as rt:
        for i in range(n):
            sid = f"lat-{tag}-{i}" if fresh else f"lat-{tag}"
            posted = time.time()
            mid = await rt.sessions.followup(sid, f"mail {i}")
            await rt.sessions.wait(sid, mid)
            out.append(await _claim_time(store, sid, mid) - posted)
    await store.aclose()
    return out


async def _throughput(dsn: str, sessions: int, per_session: int) -> float:
    """Mails per second: all posted at once, until every wait returned."""
    import dsh_trio as dsh
    from dsh_trio.persistence.postgres import PostgresPersistence

    store = PostgresPersistence(dsn, pool_size=8)
    tag = time.monotonic_ns()
    sent: list[tuple[str, str]] = []
    limit = trio.CapacityLimiter(50)
    async with dsh.open_runtime(persistence=store) as rt:
        start = time.perf_counter()

        async def post(sid: str, n: int) -> None:
            sent.append((sid, await rt.sessions.followup(sid, f"{sid} {n}")))

        for n in range(per_session):
            async with trio.open_nursery() as nursery:
                for i in range(sessions):
                    nursery.start_soon(post, f"tp-{tag}-{i}", n)

        async def wait(sid: str, mid: str) -> None:
            async with limit:
                await rt.sessions.wait(sid, mid, check=False)

        async with trio.open_nursery() as nursery:
            for sid, mid in sent:
                nursery.start_soon(wait, sid, mid)
        elapsed = time.perf_counter() - start
    await store.aclose()
    return len(sent) / elapsed


def run(ctx: Context) -> list[Row]:
    """Start a cluster and worker processes, measure, stop them."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return [
            skipped(NAME, "psycopg is not installed (pip install 'dsh-trio[postgres]')")
        ]
    cluster_mod = _cluster_module()
    try:
        cluster = cluster_mod.start_cluster(fast=False)
    except cluster_mod.ClusterUnavailable as exc:
        return [skipped(NAME, f"no PostgreSQL server can start here: {exc}")]
    env_path = os.pathsep.join(p for p in sys.path if p)
    os.environ.setdefault("PYTHONPATH", env_path)
    n_lat = ctx.size(200, 20)
    sessions, per_session = ctx.size(200, 50), ctx.size(10, 4)
    samples: dict[str, list[float]] = {}
    rows: list[Row] = []
    try:
        for workers_n in (1, 3):
            dsn = cluster.new_database()
            uri = cluster.uri(dsn)
            workers = _start_workers(uri, workers_n)
            try:
                if workers_n == 1:
                    for fresh in (False, True):
                        lat = trio.run(
                            functools.partial(_latencies, dsn, n_lat, fresh=fresh)
                        )
                        key = "activation" if fresh else "active"
                        q = statistics.quantiles(lat, n=100)
                        samples[f"lat {key} median"] = [statistics.median(lat) * 1000]
                        samples[f"lat {key} p99"] = [q[98] * 1000]
                for _ in range(ctx.repetitions if not ctx.quick else 1):
                    rate = trio.run(_throughput, dsn, sessions, per_session)
                    samples.setdefault(f"rate {workers_n}", []).append(rate)
            finally:
                _stop(workers)
            ctx.log(f"{NAME} with {workers_n} worker(s) done")
        if not ctx.quick:
            dsn = cluster.new_database()
            workers = _start_workers(
                cluster.uri(dsn), 1, "--max-active", "1000", "--passivate-after", "1"
            )
            try:
                rate = trio.run(_throughput, dsn, 20_000, 1)
                samples["big rate"] = [rate]
                samples["big rss"] = [_peak_rss_kb(workers[0].pid) / 1024]
            finally:
                _stop(workers)
    finally:
        cluster.stop()
    for key in ("active", "activation"):
        for stat in ("median", "p99"):
            rows.append(
                Row(
                    workload=NAME,
                    metric=f"mail -> claimed, {key} session, {stat}",
                    unit="ms",
                    samples=tuple(samples[f"lat {key} {stat}"]),
                    note=f"{n_lat} mails one at a time, 1 worker"
                    if stat == "median"
                    else "",
                )
            )
    for workers_n in (1, 3):
        rows.append(
            Row(
                workload=NAME,
                metric=f"mails/s, {workers_n} worker process(es)",
                unit="mails/s",
                samples=tuple(samples[f"rate {workers_n}"]),
                note=f"{sessions} sessions x {per_session} mails, offline model",
            )
        )
    if "big rate" in samples:
        rows.append(
            Row(
                workload=NAME,
                metric="mails/s, 1 worker, max-active 1000, 20,000 sessions",
                unit="mails/s",
                samples=tuple(samples["big rate"]),
                note="one mail per session: each activated, served, passivated",
            )
        )
        rows.append(
            Row(
                workload=NAME,
                metric="peak RSS of that worker",
                unit="MiB",
                samples=tuple(samples["big rss"]),
            )
        )
    return rows
