"""``python -m benchmarks [--quick] [--json PATH] [--only W1,W4] [--reps N]``.

Runs the workloads in order, prints one table (median of the repetitions, min-max
range, targets and verdicts) and writes the same figures as JSON. Exits non-zero
when a workload failed (a workload that cannot run here is skipped, not failed).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from ._harness import Context, Row, render_table, results_json, write_json

__all__ = ["WORKLOADS", "main", "run_suite"]

HERE = Path(__file__).resolve().parent

#: (name, module, one-line description), in run order. Every module has
#: ``run(ctx, earlier_rows) -> list[Row]`` or ``run(ctx) -> list[Row]``.
WORKLOADS: tuple[tuple[str, str, str], ...] = (
    ("W1", "w1_turns", "1,000 sequential single-step turns vs a bare-trio floor"),
    ("W1-growth", "w1_growth", "µs/turn early vs late in a 10,000-turn history"),
    (
        "W1-shape",
        "w1_shape",
        "a live turn as fixed + per-chunk cost, next to the floor's",
    ),
    (
        "W1-skeleton",
        "w1_skeleton",
        "a live turn next to the bare shape the contract fixes (task, scope, adapter)",
    ),
    (
        "W1-otel",
        "w1_otel",
        "W1 with dsh_trio.observe off, on with the no-op API, on with the SDK",
    ),
    ("W2", "w2_tools", "one tool call then a final answer per turn"),
    ("W3", "w3_concurrent", "100 agents x 10 follow-up turns, concurrently"),
    (
        "W3-10k",
        "w3_scale",
        "10,000 agents x 2 turns at once vs the floor; collector default, tuned, off",
    ),
    ("W4", "w4_memory", "bytes and tasks per idle agent, 1,000 idle agents"),
    (
        "W4-turns",
        "w4_turns",
        "heap per turn and per idle agent of long sessions, past settled or not",
    ),
    ("W5", "w5_cancel", "cancel -> when_idle() latency, stream hung after 5 chunks"),
    (
        "Ir",
        "instructions",
        "W1, W2, W3, W5 turns and a log's load in CPU instructions (valgrind), next to the floor's",
    ),
    ("P1", "p1_jsonl", "JSONL appends per durability; load+resume of 100,000 events"),
    ("P1-pg", "pg_store", "the same on PostgreSQL (durability turn/always/none)"),
    (
        "Fleet",
        "fleet",
        "mail -> claimed latency and mails/s with 1 and 3 worker processes on PostgreSQL",
    ),
    (
        "P2",
        "p2_resume",
        "resume of a 500,000-event log; list 1,000 logs of 1 MB; 100k load+resume per JSON parser",
    ),
    ("S1", "s1_derive", "Session.append / derive_messages() as the log grows"),
    ("Peers", "peers", "W1 and W4 on pydantic-ai and openai-agents, when installed"),
)


def _selected(only: str | None) -> list[tuple[str, str, str]]:
    if not only:
        return list(WORKLOADS)
    wanted = {name.strip().lower() for name in only.split(",") if name.strip()}
    known = {name.lower() for name, _, _ in WORKLOADS}
    unknown = wanted - known
    if unknown:
        names = ", ".join(name for name, _, _ in WORKLOADS)
        raise SystemExit(f"unknown workload(s) {sorted(unknown)}; choose from {names}")
    return [w for w in WORKLOADS if w[0].lower() in wanted]


def _run_one(
    name: str, module_name: str, ctx: Context, earlier: list[Row]
) -> list[Row]:
    try:
        module = importlib.import_module(f"{__package__}.{module_name}")
        run: Callable[..., list[Row]] = module.run
        if getattr(module, "WANTS_EARLIER_ROWS", False):
            return run(ctx, earlier)
        return run(ctx)
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        return [
            Row(workload=name, metric="-", status=f"error: {type(exc).__name__}: {exc}")
        ]


def run_suite(
    ctx: Context, selected: Sequence[tuple[str, str, str]]
) -> tuple[list[Row], dict[str, str]]:
    """Run ``selected`` workloads; all rows, and each workload's status."""
    rows: list[Row] = []
    status: dict[str, str] = {}
    for name, module_name, description in selected:
        if ctx.verbose:
            print(f"[{name}] {description}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        produced = _run_one(name, module_name, ctx, rows)
        rows.extend(produced)
        bad = [r.status for r in produced if r.status.startswith("error")]
        skips = [
            r.status
            for r in produced
            if r.status.startswith("skipped") and r.workload == name
        ]
        if bad:
            status[name] = bad[0]
        elif skips and not any(r.measured for r in produced):
            status[name] = skips[0]
        else:
            status[name] = "ok"
        if ctx.verbose:
            print(
                f"[{name}] {status[name]} in {time.perf_counter() - started:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    return rows, status


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke-sized run (seconds, not minutes)"
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="PATH",
        help="where to write the JSON (default benchmarks/results.json, or results-quick.json with --quick)",
    )
    parser.add_argument(
        "--only", metavar="W1,W4", help="comma-separated workloads to run"
    )
    parser.add_argument(
        "--reps",
        type=int,
        default=5,
        metavar="N",
        help="repetitions per figure (default 5)",
    )
    parser.add_argument(
        "--peer-reps",
        type=int,
        default=1,
        metavar="N",
        help="repetitions of the peers' 1,000-turn W1 run (default 1)",
    )
    parser.add_argument(
        "--quiet", action="store_true", help="no progress lines on stderr"
    )
    parser.add_argument(
        "--fleet-sessions",
        type=int,
        default=None,
        metavar="N",
        help="sessions of Fleet's one-worker max-active 1000 run (default 20,000; 2,000 with --quick)",
    )
    args = parser.parse_args(argv)
    if args.reps < 1 or args.peer_reps < 1:
        parser.error("--reps and --peer-reps must be at least 1")
    if args.fleet_sessions is not None and args.fleet_sessions < 4:
        parser.error(f"--fleet-sessions must be at least 4, got {args.fleet_sessions}")
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="replace")
    selected = _selected(args.only)
    ctx = Context(
        quick=args.quick,
        repetitions=args.reps,
        peer_repetitions=args.peer_reps,
        verbose=not args.quiet,
        fleet_sessions=args.fleet_sessions,
    )
    started = time.perf_counter()
    rows, status = run_suite(ctx, selected)
    elapsed = time.perf_counter() - started
    kind = "quick (smoke-sized)" if ctx.quick else "full"
    title = f"dsh_trio benchmarks: {kind} run, median of {ctx.repetitions} repetitions, {elapsed:.1f} s"
    print(render_table(rows, title=title))
    path = args.json or HERE / ("results-quick.json" if ctx.quick else "results.json")
    write_json(
        path, results_json(rows, context=ctx, elapsed_s=elapsed, workloads=status)
    )
    print(f"\nJSON written to {path}")
    failed = [name for name, s in status.items() if s.startswith("error")]
    if failed:
        print(f"failed workloads: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
