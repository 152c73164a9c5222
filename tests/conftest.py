"""The whole suite's settings: hypothesis's defaults, and one summary line for the PostgreSQL skips.

The suite runs in parallel (``scripts/check`` passes ``-n``, pytest-xdist): every
test process has its own temporary directories and its own PostgreSQL cluster, and
hypothesis keeps no example database, so no two workers share a file.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest
from hypothesis import HealthCheck, settings

from .persistence.postgres._cluster import fold_skip

# Defaults under every test's own @settings: no example database (nothing shared
# between workers, no replay of an earlier run's failures), and nothing timed (a
# loaded machine must give the same verdicts).
settings.register_profile(
    "dsh-trio-suite",
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("dsh-trio-suite")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    fold_skip(report)
    return report


#: Where the longest tests are, started first: ``scripts/check`` runs the suite under
#: ``--dist worksteal``, which gives each worker a consecutive half of this order and
#: lets an idle worker take the far end of another's queue, so with the longest
#: first no worker is left with a long test while the others idle. The benchmark
#: smoke tests come first of all: their module fixture (about a minute of CPU) is
#: made once per worker that runs one of them, and a worker never gives away the
#: front of its queue. Only scheduling: no verdict depends on the order (the order
#: of the others is the collection's).
LONGEST_FIRST = (
    "tests/test_benchmarks_smoke.py",
    "tests/properties/",
    "tests/cli/test_subprocess.py",
    "tests/mcp/",
    "tests/persistence/test_durability_fds.py",
    "tests/persistence/postgres/",
    "tests/session/",
    "tests/tools/test_arguments.py",
)


def _rank(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    for rank, prefix in enumerate(LONGEST_FIRST):
        if path.startswith(prefix):
            return rank
    return len(LONGEST_FIRST)


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    items.sort(key=_rank)  # stable: the order within a rank is the collection's
