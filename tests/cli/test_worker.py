"""``dsh-trio worker``: its settings reach the store and the fleet; bad ones are refused."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_trio.cli import _worker, main

STORE = "postgresql://me@db/app"


class _Reached(Exception):
    """Raised by the stand-in store: the worker got as far as building it."""


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keyword arguments each ``PostgresPersistence`` the worker builds gets."""
    calls: list[dict[str, Any]] = []

    def store(dsn: str, **kwargs: Any) -> None:
        calls.append({"dsn": dsn, **kwargs})
        raise _Reached("stop here")

    monkeypatch.setattr(_worker, "PostgresPersistence", store)
    return calls


@pytest.mark.parametrize(
    ("args", "lease_s"),
    [([], 30.0), (["--lease", "7.5"], 7.5), (["--lease", "120"], 120.0)],
)
def test_the_lease_is_the_store_lease(
    args: list[str],
    lease_s: float,
    built: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["worker", "--store", STORE, *args]) == 1
    assert built == [{"dsn": STORE, "lease_s": lease_s}]
    assert "stop here" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--lease", "0", "S must be a positive, finite number of seconds, got '0'"),
        ("--lease", "-3", "S must be a positive, finite number of seconds, got '-3'"),
        ("--lease", "inf", "S must be a positive, finite number of seconds"),
        ("--lease", "nan", "S must be a positive, finite number of seconds"),
        (
            "--lease",
            "soon",
            "S must be a positive, finite number of seconds, got 'soon'",
        ),
        ("--max-active", "0", "N must be a positive integer, got '0'"),
        ("--passivate-after", "-1", "S must be a number of seconds >= 0"),
    ],
)
def test_a_bad_setting_is_a_usage_error_naming_the_flag(
    flag: str,
    value: str,
    said: str,
    built: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["worker", "--store", STORE, f"{flag}={value}"]) == 2
    err = capsys.readouterr().err
    assert f"dsh-trio worker: error: argument {flag}: {said}" in err
    assert built == []


def test_the_help_names_the_lease(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--lease S" in text
    assert "renewed every S/3" in text
