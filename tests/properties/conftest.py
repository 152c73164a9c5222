"""Hypothesis profiles for the state machines (``HYPOTHESIS_PROFILE``: ci, dev, deep),
and the PostgreSQL cluster the machines run on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dsh_trio.testing import register_profiles

from ..persistence.postgres._cluster import Cluster, acquire_shared, release_shared

register_profiles()


@pytest.fixture(scope="session")
def machine_cluster() -> Iterator[Cluster]:
    """One throwaway cluster for every machine of the test process (started once)."""
    cluster = acquire_shared()
    try:
        yield cluster
    finally:
        release_shared()


@pytest.fixture(scope="module")
def machine_dsn(machine_cluster: Cluster) -> str:
    """A fresh database on it for each module's machines."""
    return machine_cluster.new_database()
