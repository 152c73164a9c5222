"""``new_message_id`` reads the bytes of many ids at once, and never repeats them."""

from __future__ import annotations

import os

import pytest

from dsh_trio import new_message_id
from dsh_trio.loop import _ids


def test_one_read_of_urandom_makes_a_batch_of_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[int] = []

    def urandom(n: int) -> bytes:
        reads.append(n)
        return os.urandom(n)

    monkeypatch.setattr(_ids, "_urandom", urandom)
    monkeypatch.setattr(_ids, "_unused", [])
    ids = [new_message_id() for _ in range(_ids._BATCH + 1)]
    assert reads == [16 * _ids._BATCH] * 2
    assert len(set(ids)) == len(ids)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    # An empty pool, whatever ran before (the fork hook clears this very list): the
    # next id reads a fresh batch.
    _ids._unused.clear()
    new_message_id()  # the pool now holds ids the parent will hand out
    assert _ids._unused
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.write(write, f"{len(_ids._unused)} {new_message_id()}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        left, child_id = pipe.read().split()
    os.waitpid(pid, 0)
    assert left == "0"
    parents = [new_message_id() for _ in range(_ids._BATCH)]
    assert child_id not in parents
