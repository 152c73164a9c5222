"""P1: the JSONL session log: appends per durability, load+resume of a long session.

The measurement lives in ``benchmarks/jsonl_append.py`` (runnable on its own): events
appended per second through the session recorder with ``durability="turn"`` and
``"always"`` (with the longest stretch the trio loop went without running), and the
time to load and resume (crash repair included) a 100,000-event session (10,000 in a
quick run). This module repeats its ``main`` and puts the figures into the table.
"""

from __future__ import annotations

from ._external import rows_from_main
from ._harness import Context, Row, skipped

__all__ = ["run"]

NAME = "P1"

LABELS = {
    "append_events_per_s_turn": ("append events/s, durability=turn", "events/s"),
    "append_events_per_s_always": ("append events/s, durability=always", "events/s"),
    "append_max_loop_stall_ms_turn": ("longest loop stall, durability=turn", "ms"),
    "append_max_loop_stall_ms_always": ("longest loop stall, durability=always", "ms"),
    "load_resume_s": ("load+resume of the long session", "s"),
    "load_resume_mb": ("long session file size", "MB"),
}


def run(ctx: Context) -> list[Row]:
    """Run ``jsonl_append.main`` once per repetition."""
    try:
        from .jsonl_append import main
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__}.jsonl_append":
            raise
        return [skipped(NAME, "benchmarks/jsonl_append.py is not present")]
    return rows_from_main(NAME, main, ctx, labels=LABELS)
