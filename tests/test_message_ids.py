"""``new_message_id``: uuid4 text, built without ``uuid.UUID``."""

from __future__ import annotations

import os
import uuid

import pytest

import dsh_trio as dsh
from dsh_trio.loop import _ids


def test_message_ids_are_distinct_uuid4_text() -> None:
    ids = [dsh.new_message_id() for _ in range(5_000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == text


def test_every_random_bit_can_vary() -> None:
    """Only the six version and variant bits are fixed."""
    ones = 0
    zeros = 0
    for _ in range(2_000):
        value = uuid.UUID(dsh.new_message_id()).int
        ones |= value
        zeros |= ~value
    fixed = ~(ones & zeros) & ((1 << 128) - 1)
    assert fixed == (0xF000 << 64) | (0xC000 << 48)


def test_each_id_is_the_uuid4_of_its_sixteen_random_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch read of ``os.urandom`` gives, id by id, what ``uuid.UUID`` makes of
    each 16 bytes in turn (the version and variant bits set, nothing else moved)."""
    data = bytes(range(256)) * (16 * _ids._BATCH // 256) + b"\xff" * (
        16 * _ids._BATCH % 256
    )
    monkeypatch.setattr(_ids, "_urandom", lambda n: data[:n])
    made = _ids._made()
    expected = [
        str(uuid.UUID(bytes=data[k : k + 16], version=4))
        for k in range(0, 16 * _ids._BATCH, 16)
    ]
    assert made == expected
    ones = b"\xff" * (16 * _ids._BATCH)
    monkeypatch.setattr(_ids, "_urandom", lambda n: ones[:n])
    assert set(_ids._made()) == {"ffffffff-ffff-4fff-bfff-ffffffffffff"}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    """Ids come from a pool read ahead; a forked child starts without the parent's
    (else its first id would be the parent's next one)."""
    dsh.new_message_id()
    if not _ids._unused:  # that id emptied the pool: the next one refills it
        dsh.new_message_id()
    assert _ids._unused  # the pool holds ids the parent will hand out
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.write(write, dsh.new_message_id().encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child_id = pipe.read()
    os.waitpid(pid, 0)
    parents = [dsh.new_message_id() for _ in range(_ids._BATCH)]
    assert child_id not in parents
