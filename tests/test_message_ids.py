"""``new_message_id``: uuid4 text, built without ``uuid.UUID``."""

from __future__ import annotations

import uuid

import dsh_trio as dsh


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
