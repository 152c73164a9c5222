"""``scripts/check``: installs nothing, requires PostgreSQL under CI, runs on every core.

The script runs for real with stand-ins for the tools it calls (a ``python`` that
records its arguments and environment, ``lint-imports``, ``mkdocs``), so what it asks
of each tool is seen without running any of them.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((ROOT / "scripts").iterdir())

#: Package managers (and the privilege a system install needs).
PACKAGE_MANAGERS = re.compile(
    r"\b(apt-get|apt|aptitude|dpkg|dnf|yum|zypper|pacman|apk|brew|port|conda|"
    r"snap|sudo|pip\s+install|pip3\s+install|-m\s+pip)\b"
)

FAKE_PYTHON = """#!/usr/bin/env bash
echo "python $* | REQUIRE=${DSH_TRIO_REQUIRE_POSTGRES-unset}" >>"$CHECK_LOG"
if [ "$2" = pytest ]; then echo "3 passed in 0.01s"; exit "${FAKE_PYTEST_RC:-0}"; fi
exit 0
"""
FAKE_TOOL = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >>"$CHECK_LOG"
rc="FAKE_RC_$(basename "$0" | tr a-z- A-Z_)"
exit "${!rc:-0}"
"""


def test_no_script_calls_a_package_manager() -> None:
    assert SCRIPTS, "no scripts found"
    for script in SCRIPTS:
        text = script.read_text(encoding="utf-8")
        code = "\n".join(
            line.split("#", 1)[0] if not line.startswith("#!") else ""
            for line in text.splitlines()
        )
        found = PACKAGE_MANAGERS.findall(code)
        assert not found, f"{script.name} calls {found}"


def test_the_package_manager_pattern_sees_the_old_install_line() -> None:
    old = 'sudo=""; $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql'
    assert PACKAGE_MANAGERS.findall(old) == ["sudo", "sudo", "apt-get"]


def _check(
    tmp_path: Path, *args: str, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    for name, text in (
        ("python", FAKE_PYTHON),
        ("lint-imports", FAKE_TOOL),
        ("mkdocs", FAKE_TOOL),
    ):
        (fake / name).write_text(text, encoding="utf-8")
        (fake / name).chmod(0o755)
    log = tmp_path / "calls.log"
    log.unlink(missing_ok=True)
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DSH_TRIO_", "PYTEST_", "FAKE_")) and k != "CI"
    }
    done = subprocess.run(
        [str(ROOT / "scripts" / "check"), *args],
        env={**base, "PYTHON": str(fake / "python"), "CHECK_LOG": str(log), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    calls = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return done, calls


def _pytest_call(calls: list[str]) -> str:
    found = [call for call in calls if call.startswith("python -m pytest ")]
    assert len(found) == 1, calls
    return found[0]


@pytest.mark.parametrize(
    ("env", "required"),
    [
        ({}, "unset"),
        ({"CI": "false"}, "unset"),
        ({"CI": "true"}, "1"),
        ({"CI": "1"}, "1"),
        ({"CI": "true", "DSH_TRIO_REQUIRE_POSTGRES": "0"}, "0"),
        ({"DSH_TRIO_REQUIRE_POSTGRES": "1"}, "1"),
    ],
)
def test_under_ci_the_tests_require_postgres(
    tmp_path: Path, env: dict[str, str], required: str
) -> None:
    done, calls = _check(tmp_path, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _pytest_call(calls).endswith(f"| REQUIRE={required}")


def test_the_tests_run_on_every_worker_with_the_arguments_given(tmp_path: Path) -> None:
    done, calls = _check(tmp_path, "tests/loop", "-x", DSH_TRIO_TEST_WORKERS="3")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _pytest_call(calls).startswith(
        "python -m pytest -q -n 3 --dist worksteal tests/loop -x |"
    )
    done, calls = _check(tmp_path)
    assert f" -n {len(os.sched_getaffinity(0))} " in _pytest_call(calls)  # nproc


def test_flake8_async_checks_every_source_file_in_several_processes(
    tmp_path: Path,
) -> None:
    done, calls = _check(tmp_path, DSH_TRIO_TEST_WORKERS="2")
    assert done.returncode == 0, done.stdout + done.stderr
    prefix = "python -m flake8_async --enable=ASYNC,ASYNC910,ASYNC911 "
    runs = [
        call.removeprefix(prefix).split(" | ")[0].split()
        for call in calls
        if call.startswith(prefix)
    ]
    assert len(runs) >= 2
    checked = sorted(path for run in runs for path in run)
    expected = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "src").rglob("*.py"))
    assert checked == expected


def test_every_step_runs_before_the_tests(tmp_path: Path) -> None:
    done, calls = _check(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    steps = [
        "python -m ruff format --check",
        "python -m ruff check",
        "lint-imports",
        "python -m flake8_async",
        "python -m mypy --strict src",
        "python -m mypy tests",
        "python -m mypy benchmarks",
        "mkdocs build --strict",
    ]
    for step in steps:
        assert any(call.startswith(step) for call in calls), (step, calls)
    assert calls[-1].startswith("python -m pytest ")
    assert done.stdout.splitlines()[-1] == "3 passed in 0.01s"


def test_failures_give_the_exit_code(tmp_path: Path) -> None:
    done, _ = _check(tmp_path, FAKE_PYTEST_RC="1")
    assert done.returncode == 1
    done, _ = _check(tmp_path, FAKE_PYTEST_RC="5")
    assert done.returncode == 0
    assert "pytest collected no tests" in done.stdout
    done, calls = _check(tmp_path, FAKE_RC_MKDOCS="3")
    assert done.returncode == 3
    assert any(call.startswith("python -m mypy benchmarks") for call in calls)
    assert not any(call.startswith("python -m pytest") for call in calls)
    done, calls = _check(tmp_path, FAKE_RC_LINT_IMPORTS="1")
    assert done.returncode == 1
    assert not any(call.startswith("python -m mypy") for call in calls)


def test_the_longest_tests_are_collected_first(request: pytest.FixtureRequest) -> None:
    """The suite's order (``tests/conftest.py``) puts the benchmark smoke tests first, then
    the rest of the longest ones, for ``--dist worksteal``; the others keep their order."""
    from .conftest import LONGEST_FIRST

    paths = [item.nodeid.split("::", 1)[0] for item in request.session.items]
    ranks = [
        next(
            (r for r, p in enumerate(LONGEST_FIRST) if path.startswith(p)),
            len(LONGEST_FIRST),
        )
        for path in paths
    ]
    assert ranks == sorted(ranks)
    assert LONGEST_FIRST[0] == "tests/test_benchmarks_smoke.py"
    here = request.node.nodeid.split("::", 1)[0]
    assert here in paths
