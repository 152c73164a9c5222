"""Ir-compare: the instructions of a turn in this checkout and in another one, side by side.

The ``Ir`` rows count whole turns, the cyclic garbage collector included, which is
what a turn costs. Between two versions of the code that figure also moves with
*where* the collector happens to run: a change that allocates a few objects more or
less shifts a collection into or out of the counted turns, and a turn's count moves
by one or two percent although its code did not change (measured on W2: +21,000
instructions per turn with the collector, +1,000 without, for a change that did not
touch a tool turn). To tell whether a change made a turn cheaper, this tool counts
each workload in both checkouts with the collector disabled (``--gc on`` keeps it),
each child with the same hash seed, and prints the difference.

    python -m benchmarks.ir_compare OTHER_SRC [--only W1,W5] [--gc on]

``OTHER_SRC`` is the ``src`` directory of the other checkout (``git worktree add
/tmp/base HEAD~1`` then ``/tmp/base/src``); this checkout is the installed one. Needs
``valgrind``; each workload takes two counted runs per checkout, two at a time.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .instructions import _UNITS, CASES, count_turns

__all__ = ["compare", "main"]


def compare(
    other_src: str,
    workloads: Sequence[str],
    *,
    gc: bool = False,
    valgrind: str | None = None,
    log: Callable[[str], None] | None = None,
) -> list[tuple[str, float, float]]:
    """``(workload, this checkout, the other)``: dsh_trio's instructions per turn (per
    event for Load) in each, counted as :mod:`benchmarks.instructions` counts them.

    ``log`` is called with a progress line as each counted run ends.

    Raises:
        ValueError: an unknown workload, or ``other_src`` is not a directory holding
            ``dsh_trio``.
        RuntimeError: ``valgrind`` is not installed.
    """
    turns = dict(CASES)
    unknown = [w for w in workloads if w not in turns]
    if unknown:
        raise ValueError(
            f"unknown workload(s) {', '.join(unknown)} (known: {', '.join(turns)})"
        )
    if not (Path(other_src) / "dsh_trio" / "__init__.py").is_file():
        raise ValueError(
            f"{other_src} holds no dsh_trio package (give a checkout's src)"
        )
    found = valgrind or shutil.which("valgrind")
    if found is None:
        raise RuntimeError("counting instructions needs valgrind on PATH")
    jobs = [
        (workload, src, n)
        for workload in workloads
        for src in (None, other_src)
        for n in (0, turns[workload])
    ]
    done = 0
    lock = threading.Lock()  # two counting threads report progress

    def count(job: tuple[str, str | None, int]) -> int:
        nonlocal done
        workload, src, n = job
        found_count = count_turns(workload, "dsh_trio", n, found, gc=gc, src=src)
        with lock:
            done += 1
            if log is not None:
                where = "this checkout" if src is None else src
                log(f"{done}/{len(jobs)}: {workload}, {n} turns, {where}")
        return found_count

    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = list(pool.map(count, jobs))
    per_turn = {
        (workload, src): (counts[k] - counts[k - 1]) / (n * _UNITS.get(workload, 1))
        for k, (workload, src, n) in enumerate(jobs)
        if n
    }
    return [(w, per_turn[w, None], per_turn[w, other_src]) for w in workloads]


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: print the table; 2 on bad arguments."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.ir_compare",
        description="instructions per turn here and in another checkout",
    )
    parser.add_argument("other_src", help="the other checkout's src directory")
    parser.add_argument(
        "--only",
        default="W1,W2,W5",
        help="comma-separated workloads (default W1,W2,W5; also W1-quiet, W3, Load)",
    )
    parser.add_argument(
        "--gc",
        choices=["off", "on"],
        default="off",
        help="the cyclic garbage collector in the children (default off)",
    )
    args = parser.parse_args(argv)
    workloads = [w.strip() for w in args.only.split(",") if w.strip()]
    try:
        rows = compare(
            args.other_src,
            workloads,
            gc=args.gc == "on",
            log=lambda line: print(f"  .. {line}", file=sys.stderr, flush=True),
        )
    except (ValueError, RuntimeError) as exc:
        print(f"ir_compare: {exc}", file=sys.stderr)
        return 2
    print(f"instructions per turn (Load: per event), garbage collector {args.gc}")
    print(f"{'workload':9}  {'this checkout':>14}  {'other':>14}  {'change':>8}")
    for workload, here, there in rows:
        change = (here - there) / there * 100 if there else float("nan")
        print(f"{workload:9}  {here:14,.0f}  {there:14,.0f}  {change:+7.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
