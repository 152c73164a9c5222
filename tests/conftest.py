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


#: Tests that must share one worker, by module: their module-scoped fixture is costly
#: (the benchmark smoke run takes about a minute of CPU) and is made once per worker.
SHARED_WORKER = {"tests/test_benchmarks_smoke.py": "benchmark-smoke"}

#: Where the longest tests are, started first so that no worker is left with a long
#: test at the end while the others idle (the order of the others is kept). Only
#: scheduling: no verdict depends on the order.
LONGEST_FIRST = (
    "tests/test_benchmarks_smoke.py",
    "tests/properties/",
    "tests/cli/test_subprocess.py",
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
    for item in items:
        group = SHARED_WORKER.get(item.nodeid.split("::", 1)[0])
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
