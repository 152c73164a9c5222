"""S1: ``Session.append`` and ``derive_messages()`` as the log grows.

The measurement lives in ``benchmarks/derive_messages.py`` (runnable on its own);
this module repeats its ``main`` and puts the figures into the suite's table.
"""

from __future__ import annotations

from ._external import rows_from_main
from ._harness import Context, Row

__all__ = ["run"]

NAME = "S1"


def run(ctx: Context) -> list[Row]:
    """Run ``derive_messages.main`` once per repetition."""
    from .derive_messages import main

    return rows_from_main(NAME, main, ctx, note="first vs last 100 calls")
