"""The PostgreSQL server the shared-store tests run against (a real one, never a mock).

One throwaway cluster per test process (per pytest-xdist worker); each test gets a
fresh database. Without server binaries (see ``_cluster.find_bindir``) the tests
are skipped with one line in the summary, and fail instead under
``DSH_TRIO_REQUIRE_POSTGRES=1`` (set by ``scripts/check`` under CI); a server that
is installed but cannot start fails them, unless ``DSH_TRIO_SKIP_POSTGRES=1``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from dsh_trio.persistence.postgres import PostgresPersistence

from ._cluster import Cluster, acquire_shared, release_shared


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    cluster = acquire_shared()
    try:
        yield cluster
    finally:
        release_shared()


@pytest.fixture
def pg_dsn(pg_cluster: Cluster) -> str:
    """A fresh, empty database on the test cluster."""
    return pg_cluster.new_database()


@pytest.fixture
async def stores(pg_dsn: str) -> AsyncIterator[Callable[..., PostgresPersistence]]:
    """Make stores on the test database; their pooled connections close at the end."""
    made: list[PostgresPersistence] = []

    def make(**kwargs: Any) -> PostgresPersistence:
        store = PostgresPersistence(pg_dsn, **kwargs)
        made.append(store)
        return store

    yield make
    for store in made:
        await store.aclose()
