"""Fleet: mail to sessions served by ``dsh-trio worker`` processes on PostgreSQL.

On a throwaway local cluster (fsync on, as P1-pg starts one), with worker
processes running the offline demo model (so the store, not a model, is the
cost), measures:

* mail → claimed latency (median and p99): from the call of ``followup`` (its
  commit included) to the ``time`` of the ``user/message`` event that claimed
  it, one mail at a time, to a session already active and to a session that must
  be activated (created) first;
* mails per second with 1 and with 3 workers: every mail posted at once, to
  sessions x mails each, until every ``wait`` returned; and the most PostgreSQL
  connections one worker held meanwhile (``pg_stat_activity``, by the
  ``application_name`` each worker connects with);
* memory of a live session: a worker that never passivates (``--passivate-after
  3600``) serves sessions one mail each; its RSS grown, per session, is what one
  live (activated) session costs; a second round of four mails each gives the
  growth per turn;
* one worker with ``--max-active 1000 --passivate-after 1`` serving 20,000
  sessions (one mail each: every one activated, served, passivated): mails per
  second, the worker's peak RSS, the most agents it held at once, the RSS it kept
  per session passivated (the sessions come in four equal waves, each left to
  passivate: the settled RSS after the last minus after the first, over the last
  three waves' sessions), the server's transactions per session served
  (``pg_stat_database.xact_commit``, the benchmark's own looks left out) and the
  bytes the store keeps per passivated session.

``--fleet-sessions N`` (of ``python -m benchmarks``) sets that last run's size
(default 20,000; 2,000 with ``--quick``), for a machine where it would take too
long. Every figure's note carries the 1-minute load average of the machine when
it was taken (the mean over its repetitions). When no server can start here, the
workload prints one row saying why.

Run: ``python -m benchmarks --only Fleet [--fleet-sessions N]``.
"""

from __future__ import annotations

import functools
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Self

import attrs
import trio

from ._harness import Context, Row, skipped
from .pg_store import _cluster_module

__all__ = ["run"]

NAME = "Fleet"

#: The ``application_name`` of worker ``i``'s connections.
_APP = "dsh-worker-{}"


def _load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def _start_workers(uri: str, n: int, *extra: str) -> list[subprocess.Popen[str]]:
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "dsh_trio.cli", "worker", "--store", uri, *extra],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PGAPPNAME": _APP.format(i)},
        )
        for i in range(n)
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


@contextmanager
def _workers(uri: str, n: int, *extra: str) -> Iterator[list[subprocess.Popen[str]]]:
    workers = _start_workers(uri, n, *extra)
    try:
        yield workers
    finally:
        _stop(workers)


def _status_kb(pid: int, field: str) -> int:
    """``VmRSS`` / ``VmHWM`` of ``pid`` in KiB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


@attrs.frozen
class _Sample:
    at: float
    load: float
    connections: dict[str, int]  # by application_name
    rss_kb: dict[int, int]  # by worker pid
    leases: int  # sessions live in some worker
    sessions: int  # sessions stored


@attrs.define(eq=False)
class _Monitor:
    """Samples the server and the workers every ``period`` s on a thread of its own."""

    dsn: str
    pids: list[int]
    period: float = 0.5
    samples: list[_Sample] = attrs.field(factory=list)
    _stop: threading.Event = attrs.field(factory=threading.Event)
    _thread: threading.Thread | None = None

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(
            self.dsn + " application_name=dsh-monitor", autocommit=True
        ) as conn:
            while True:
                self.samples.append(self.sample(conn))
                if self._stop.wait(self.period):
                    return

    def sample(self, conn: Any) -> _Sample:
        rows = conn.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() GROUP BY 1"
        ).fetchall()
        tables = {
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'dsh_trio'"
            ).fetchall()
        }
        counts = [0, 0]
        for k, table in enumerate(("leases", "sessions")):
            if table in tables:
                counts[k] = conn.execute(
                    f"SELECT count(*) FROM dsh_trio.{table}"
                ).fetchone()[0]
        return _Sample(
            at=time.monotonic(),
            load=_load(),
            connections={str(name): int(n) for name, n in rows},
            rss_kb={pid: _status_kb(pid, "VmRSS") for pid in self.pids},
            leases=int(counts[0]),
            sessions=int(counts[1]),
        )

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=30)

    def most_connections(self) -> int:
        """The most connections one worker held in any sample."""
        return max(
            (
                n
                for s in self.samples
                for name, n in s.connections.items()
                if name.startswith("dsh-worker-")
            ),
            default=0,
        )

    def mean_load(self) -> float:
        return statistics.fmean(s.load for s in self.samples) if self.samples else 0.0


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


async def _throughput(
    dsn: str, sessions: int, per_session: int, *, prefix: str = "tp"
) -> float:
    """Mails per second: all posted at once, until every wait returned.

    Sessions are named ``{prefix}-{i}``; a prefix used before mails them again.
    """
    import dsh_trio as dsh
    from dsh_trio.persistence.postgres import PostgresPersistence

    store = PostgresPersistence(dsn + " application_name=dsh-sender", pool_size=8)
    sent: list[tuple[str, str]] = []
    limit = trio.CapacityLimiter(50)
    async with dsh.open_runtime(persistence=store) as rt:
        start = time.perf_counter()

        async def post(sid: str, n: int) -> None:
            sent.append((sid, await rt.sessions.followup(sid, f"{sid} {n}")))

        for n in range(per_session):
            async with trio.open_nursery() as nursery:
                for i in range(sessions):
                    nursery.start_soon(post, f"{prefix}-{i}", n)

        async def wait(sid: str, mid: str) -> None:
            async with limit:
                await rt.sessions.wait(sid, mid, check=False)

        async with trio.open_nursery() as nursery:
            for sid, mid in sent:
                nursery.start_soon(wait, sid, mid)
        elapsed = time.perf_counter() - start
    await store.aclose()
    return len(sent) / elapsed


def _settle(pid: int, *, rounds: int = 10, period: float = 0.5) -> int:
    """The RSS (KiB) of ``pid`` once it stopped moving (or after ``rounds`` looks)."""
    last = _status_kb(pid, "VmRSS")
    for _ in range(rounds):
        time.sleep(period)
        now = _status_kb(pid, "VmRSS")
        if abs(now - last) < 64:
            return now
        last = now
    return last


def _store_bytes(dsn: str) -> tuple[int, int]:
    """Bytes of the ``dsh_trio`` tables (indexes and TOAST included) and sessions stored."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        size = conn.execute(
            "SELECT sum(pg_total_relation_size(format('%I.%I', schemaname, tablename)))"
            " FROM pg_tables WHERE schemaname = 'dsh_trio'"
        ).fetchone()
        count = conn.execute("SELECT count(*) FROM dsh_trio.sessions").fetchone()
    assert size is not None and count is not None
    return int(size[0]), int(count[0])


@attrs.define
class _Figures:
    """Samples by key, and the load average beside each."""

    samples: dict[str, list[float]] = attrs.field(factory=dict)
    loads: dict[str, list[float]] = attrs.field(factory=dict)

    def add(self, key: str, value: float, load: float | None = None) -> None:
        self.samples.setdefault(key, []).append(value)
        self.loads.setdefault(key, []).append(_load() if load is None else load)

    def row(self, key: str, metric: str, unit: str, note: str = "") -> Row | None:
        if key not in self.samples:
            return None
        load = f"load {statistics.fmean(self.loads[key]):.1f}"
        return Row(
            workload=NAME,
            metric=metric,
            unit=unit,
            samples=tuple(self.samples[key]),
            note=f"{note}; {load}" if note else load,
            detail={"load_average_1min": self.loads[key]},
        )


def _measure_latency(ctx: Context, cluster: Any, figures: _Figures, n: int) -> None:
    dsn = cluster.new_database()
    with _workers(cluster.uri(dsn), 1):
        for fresh in (False, True):
            lat = trio.run(functools.partial(_latencies, dsn, n, fresh=fresh))
            key = "activated first" if fresh else "active"
            q = statistics.quantiles(lat, n=100)
            figures.add(f"lat {key} median", statistics.median(lat) * 1000)
            figures.add(f"lat {key} p99", q[98] * 1000)
    ctx.log(f"{NAME}: latency done")


def _measure_rate(
    ctx: Context, cluster: Any, figures: _Figures, sessions: int, per_session: int
) -> None:
    for workers_n in (1, 3):
        dsn = cluster.new_database()
        with _workers(cluster.uri(dsn), workers_n) as workers:
            for rep in range(ctx.repetitions if not ctx.quick else 1):
                with _Monitor(dsn, [w.pid for w in workers]) as monitor:
                    rate = trio.run(
                        functools.partial(
                            _throughput, dsn, sessions, per_session, prefix=f"r{rep}"
                        )
                    )
                figures.add(f"rate {workers_n}", rate, monitor.mean_load())
                figures.add(
                    f"conns {workers_n}",
                    monitor.most_connections(),
                    monitor.mean_load(),
                )
        ctx.log(f"{NAME}: {workers_n} worker(s) done")


def _measure_memory(ctx: Context, cluster: Any, figures: _Figures, n: int) -> None:
    """RSS per live session (one turn), and its growth per further turn."""
    dsn = cluster.new_database()
    with _workers(
        cluster.uri(dsn), 1, "--max-active", str(n + 100), "--passivate-after", "3600"
    ) as workers:
        pid = workers[0].pid
        trio.run(functools.partial(_throughput, dsn, 20, 1, prefix="warm"))
        base = _settle(pid)
        trio.run(functools.partial(_throughput, dsn, n, 1, prefix="mem"))
        one = _settle(pid)
        figures.add("mem live", (one - base) * 1024 / n)
        trio.run(functools.partial(_throughput, dsn, n, 4, prefix="mem"))
        five = _settle(pid)
        figures.add("mem turn", (five - one) * 1024 / (n * 4))
    ctx.log(f"{NAME}: memory done")


def _wait_passivated(dsn: str, timeout: float = 600) -> int:
    """Return once no session holds a lease (every agent passivated); how many looks it took."""
    import psycopg

    deadline = time.monotonic() + timeout
    looks = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            looks += 1
            row = conn.execute("SELECT count(*) FROM dsh_trio.leases").fetchone()
            if row is not None and row[0] == 0:
                return looks
            time.sleep(0.5)
    raise RuntimeError(f"sessions still held after {timeout:g} s")


def _commits(dsn: str) -> int:
    """The transactions the database committed so far (``pg_stat_database``)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database"
            " WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _measure_big(ctx: Context, cluster: Any, figures: _Figures, sessions: int) -> None:
    """One worker, ``--max-active 1000``, ``sessions`` sessions one mail each.

    In four equal waves, each left to passivate completely: the worker's settled
    RSS after the last wave minus after the first, over the last three waves'
    sessions, is what it kept per session passivated; the rate counts the waves'
    mails over their posting and serving time (not the waits for passivation).
    """
    dsn = cluster.new_database()
    wave = sessions // 4
    with _workers(
        cluster.uri(dsn), 1, "--max-active", "1000", "--passivate-after", "1"
    ) as workers:
        pid = workers[0].pid
        own = 0  # transactions this benchmark's own looks committed
        before = _commits(dsn)
        with _Monitor(dsn, [pid], period=1.0) as monitor:
            spent = 0.0
            settled = []
            for k in range(4):
                started = time.perf_counter()
                trio.run(functools.partial(_throughput, dsn, wave, 1, prefix=f"big{k}"))
                spent += time.perf_counter() - started
                own += _wait_passivated(dsn)
                settled.append(_settle(pid))
                ctx.log(f"{NAME}: wave {k + 1}/4 of {wave} sessions served")
        time.sleep(11)  # an idle backend reports its counts within 10 s
        # The monitor's 4 statements per sample and the reads of the counter.
        own += 4 * len(monitor.samples) + 3
        committed = _commits(dsn) - before - own
        load = monitor.mean_load()
        figures.add("big commits", committed / (4 * wave), load)
        figures.add("big rate", 4 * wave / spent, load)
        figures.add("big seconds", spent, load)
        figures.add("big rss", _status_kb(pid, "VmHWM") / 1024, load)
        figures.add("big live", max(s.leases for s in monitor.samples), load)
        figures.add("big conns", monitor.most_connections(), load)
        figures.add("big kept", (settled[3] - settled[0]) * 1024 / (3 * wave), load)
    size, count = _store_bytes(dsn)
    figures.add("big stored", size / max(count, 1))
    ctx.log(f"{NAME}: {sessions} sessions done")


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
    n_mem = ctx.size(1000, 100)
    big = ctx.fleet_sessions or ctx.size(20_000, 2_000)
    figures = _Figures()
    steps: list[Callable[[], None]] = [
        lambda: _measure_latency(ctx, cluster, figures, n_lat),
        lambda: _measure_rate(ctx, cluster, figures, sessions, per_session),
        lambda: _measure_memory(ctx, cluster, figures, n_mem),
        lambda: _measure_big(ctx, cluster, figures, big),
    ]
    try:
        for step in steps:
            step()
    finally:
        cluster.stop()
    return _rows(figures, n_lat=n_lat, tp=(sessions, per_session), mem=n_mem, big=big)


def _rows(
    figures: _Figures, *, n_lat: int, tp: tuple[int, int], mem: int, big: int
) -> list[Row]:
    wanted: list[tuple[str, str, str, str]] = []
    for key, label in (
        ("active", "active session"),
        ("activated first", "new session"),
    ):
        for stat in ("median", "p99"):
            wanted.append(
                (
                    f"lat {key} {stat}",
                    f"mail -> claimed, {label}, {stat}",
                    "ms",
                    f"{n_lat} mails one at a time, 1 worker"
                    if stat == "median"
                    else "",
                )
            )
    for n in (1, 3):
        wanted += [
            (
                f"rate {n}",
                f"mails/s, {n} worker process(es)",
                "mails/s",
                f"{tp[0]} sessions x {tp[1]} mails, offline model",
            ),
            (f"conns {n}", f"PostgreSQL connections per worker, {n} worker(s)", "", ""),
        ]
    wanted += [
        (
            "mem live",
            "RSS per live session after 1 turn",
            "bytes",
            f"{mem} sessions activated in 1 worker, never passivated",
        ),
        ("mem turn", "RSS growth per further turn of a live session", "bytes", ""),
        (
            "big rate",
            f"mails/s, 1 worker, max-active 1000, {big:,} sessions",
            "mails/s",
            "one mail per session: each activated, served, passivated (after 1 s)",
        ),
        (
            "big seconds",
            "that run's serving time",
            "s",
            "the waits for passivation left out",
        ),
        ("big rss", "peak RSS of that worker", "MiB", ""),
        (
            "big commits",
            "server transactions per session served",
            "commits",
            "post, claim, create, turn, passivation; all processes",
        ),
        ("big live", "most agents live in that worker at once", "agents", ""),
        ("big conns", "most PostgreSQL connections of that worker", "", ""),
        (
            "big kept",
            "worker RSS kept per session passivated",
            "bytes",
            "in 4 equal waves: settled RSS after the 4th minus after the 1st, over 3 waves",
        ),
        (
            "big stored",
            "store bytes per passivated session (1 turn)",
            "bytes",
            "dsh_trio tables with indexes",
        ),
    ]
    rows = []
    for key, metric, unit, note in wanted:
        row = figures.row(key, metric, unit, note)
        if row is not None:
            rows.append(row)
    return rows
