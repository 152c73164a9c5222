"""Bulk loading without the cyclic garbage collector walking what was just built.

Decoding a long log allocates millions of objects that all stay alive; every
collection the allocations trigger walks the growing heap again, which costs a
quarter of a large load's time and frees nothing. :func:`gc_paused` turns automatic
collection off for the duration and back on afterwards, unless something else had
turned it off before. Overlapping pauses (loads in several worker threads) are
counted: collection resumes when the last one ends.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["gc_paused"]

_lock = threading.Lock()
_depth = 0
_resume = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause automatic garbage collection while the block runs (thread-safe)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
