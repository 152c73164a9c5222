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
