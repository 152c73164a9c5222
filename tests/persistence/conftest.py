from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh_trio.persistence import _jsonl_lock
from dsh_trio.persistence._jsonl import JsonlPersistence


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


@pytest.fixture
def persistence(root: Path) -> JsonlPersistence:
    return JsonlPersistence(root)


def _open_fds() -> set[str]:
    if sys.platform != "linux":
        return set()
    return {
        f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}"
        for fd in os.listdir("/proc/self/fd")
        if os.path.exists(f"/proc/self/fd/{fd}")
    }


@pytest.fixture(autouse=True)
def _no_leaked_claims_or_files() -> Iterator[None]:
    """Every test must close every writer it opened: claims released, files closed."""
    claims, fds = set(_jsonl_lock._claims), _open_fds()
    yield
    leaked = set(_jsonl_lock._claims) - claims
    _jsonl_lock._claims.difference_update(leaked)
    assert not leaked, f"writers left open: {leaked}"
    leaked_files = {fd for fd in _open_fds() - fds if "session" in fd}
    assert not leaked_files, f"files left open: {leaked_files}"
