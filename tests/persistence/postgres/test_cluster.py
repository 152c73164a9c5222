"""Where the tests find the PostgreSQL server, and what they do without one.

The discovery runs on fake directories (an ``initdb`` script on a fake ``PATH``, a
fake ``/usr/lib/postgresql``); the skip and the failure are seen from a pytest run
in a subprocess whose ``DSH_TRIO_PG_BIN`` names an empty directory.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ._cluster import (
    BIN_ENV,
    REQUIRE_ENV,
    SKIP_ENV,
    ClusterUnavailable,
    NotInstalled,
    find_bindir,
    unavailable_outcome,
)

ROOT = Path(__file__).resolve().parents[3]


def _initdb(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    initdb = directory / "initdb"
    initdb.write_text("#!/bin/sh\nexit 0\n")
    initdb.chmod(0o755)
    return initdb


def test_the_variable_names_the_only_place_looked_at(tmp_path: Path) -> None:
    named = tmp_path / "pg" / "bin"
    _initdb(named)
    on_path = tmp_path / "path"
    _initdb(on_path)
    env = {BIN_ENV: str(named), "PATH": str(on_path)}
    assert find_bindir(env, installed=str(tmp_path / "none")) == str(named)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(
        NotInstalled, match=f"{BIN_ENV}={empty} holds no executable initdb"
    ):
        find_bindir({BIN_ENV: str(empty), "PATH": str(on_path)})


def test_initdb_on_path_is_followed_to_its_directory(tmp_path: Path) -> None:
    real = _initdb(tmp_path / "lib" / "15" / "bin")
    path = tmp_path / "path"
    path.mkdir()
    (path / "initdb").symlink_to(real)
    env = {"PATH": f"{tmp_path / 'nothing'}{os.pathsep}{path}"}
    assert find_bindir(env, installed=str(tmp_path / "none" / "*")) == str(real.parent)


def test_the_newest_installed_version_is_taken_when_path_has_none(
    tmp_path: Path,
) -> None:
    for version in ("9.6", "15", "13"):
        _initdb(tmp_path / "lib" / version / "bin")
    (tmp_path / "lib" / "16" / "bin").mkdir(parents=True)  # client only: no initdb
    env = {"PATH": str(tmp_path / "empty-path")}
    installed = str(tmp_path / "lib" / "*" / "bin")
    assert find_bindir(env, installed=installed) == str(tmp_path / "lib" / "15" / "bin")


def test_nothing_found_says_where_it_looked(tmp_path: Path) -> None:
    installed = str(tmp_path / "lib" / "*" / "bin")
    with pytest.raises(NotInstalled) as caught:
        find_bindir({"PATH": str(tmp_path)}, installed=installed)
    assert str(caught.value) == (
        f"no initdb on PATH nor under {installed}, and {BIN_ENV} is not set"
    )


def test_missing_binaries_skip_unless_required() -> None:
    missing = NotInstalled("no initdb anywhere")
    skip, message = unavailable_outcome(missing, {})
    assert skip
    assert message.startswith("PostgreSQL tests SKIPPED: no server here: no initdb")
    assert BIN_ENV in message and REQUIRE_ENV in message
    skip, message = unavailable_outcome(missing, {REQUIRE_ENV: "1", SKIP_ENV: "1"})
    assert not skip
    assert message.startswith(f"{REQUIRE_ENV}=1 and PostgreSQL is unavailable")


def test_an_installed_server_that_cannot_start_fails_unless_skipped() -> None:
    broken = ClusterUnavailable("initdb failed: disk full")
    skip, message = unavailable_outcome(broken, {})
    assert not skip
    assert "cannot start: initdb failed: disk full" in message
    assert unavailable_outcome(broken, {SKIP_ENV: "1"})[0]
    assert not unavailable_outcome(broken, {SKIP_ENV: "1", REQUIRE_ENV: "1"})[0]


#: The PostgreSQL tests run in the subprocess: through the ``pg_cluster`` fixture and
#: through the property test's own module fixture.
_PG_TESTS = [
    "tests/persistence/postgres/test_heartbeat.py",
    "tests/persistence/postgres/test_transfer.py",
    "tests/properties/test_persistence_machine.py::test_persistence_machine_on_postgres",
]


def _pytest_without_binaries(
    tmp_path: Path, **extra: str
) -> subprocess.CompletedProcess[str]:
    empty = tmp_path / "no-postgres"
    empty.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "DSH_TRIO_")) and k != "CI"
    }
    env.update({BIN_ENV: str(empty), "PYTHONPATH": str(ROOT / "src"), **extra})
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", *_PG_TESTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_without_binaries_the_postgres_tests_skip_with_one_line(
    tmp_path: Path,
) -> None:
    done = _pytest_without_binaries(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    mentions = [line for line in done.stdout.splitlines() if "PostgreSQL" in line]
    assert len(mentions) == 1, done.stdout
    counted = re.fullmatch(r"SKIPPED \[(\d+)\] \S+: (.*)", mentions[0])
    assert counted is not None, mentions[0]
    assert counted[2].startswith(
        f"PostgreSQL tests SKIPPED: no server here: {BIN_ENV}={tmp_path / 'no-postgres'}"
    )
    skipped = int(counted[1])
    assert skipped >= 7
    assert re.search(rf"\b{skipped} skipped\b", done.stdout.splitlines()[-1])
    assert "passed" not in done.stdout.splitlines()[-1]


def test_without_binaries_the_postgres_tests_fail_when_required(
    tmp_path: Path,
) -> None:
    done = _pytest_without_binaries(tmp_path, **{REQUIRE_ENV: "1"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{REQUIRE_ENV}=1 and PostgreSQL is unavailable" in done.stdout
    assert "skipped" not in done.stdout.splitlines()[-1]
