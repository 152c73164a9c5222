"""P1: the JSONL session log: appends per durability, load+resume of a long session.

The measurement lives in ``benchmarks/jsonl_append.py`` (runnable on its own); this
module repeats its ``main`` and puts the figures into the suite's table.
"""

from __future__ import annotations

from ._external import rows_from_main
from ._harness import Context, Row, skipped

__all__ = ["run"]

NAME = "P1"


def run(ctx: Context) -> list[Row]:
    """Run ``jsonl_append.main`` once per repetition."""
    try:
        from .jsonl_append import main
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__}.jsonl_append":
            raise
        return [skipped(NAME, "benchmarks/jsonl_append.py is not present")]
    return rows_from_main(NAME, main, ctx)
