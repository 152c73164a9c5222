from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh_trio.session import _jsonl
from dsh_trio.session._jsonl import JsonlPersistence


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


@pytest.fixture
def persistence(root: Path) -> JsonlPersistence:
    return JsonlPersistence(root)


@pytest.fixture(autouse=True)
def _no_leaked_claims() -> Iterator[None]:
    """Every test must release every write claim it took (closed writers)."""
    before = set(_jsonl._claims)
    yield
    leaked = set(_jsonl._claims) - before
    _jsonl._claims.difference_update(leaked)
    assert not leaked, f"writers left open: {leaked}"
