"""The resume hint names a store given by ``--store``, never with its password."""

from __future__ import annotations

import argparse
import shlex

import pytest

from dsh_trio.cli._store import store_hint


def _hint(store: str | None) -> str:
    return store_hint(argparse.Namespace(store=store))


@pytest.mark.parametrize(
    ("store", "shown"),
    [
        ("postgresql://me@db/app", "postgresql://me@db/app"),
        ("postgresql://me:s3cret@db/app", "postgresql://me:***@db/app"),
        ("postgres://me:p%40ss@[::1]:5432/d", "postgres://me:***@[::1]:5432/d"),
        (
            "postgresql://db/app?sslmode=require&password=s3cret",
            "postgresql://db/app?sslmode=require&password=***",
        ),
        (
            "postgresql://me:a:b@db/app?PassWord=s3cret",
            "postgresql://me:***@db/app?PassWord=***",
        ),
    ],
)
def test_the_hint_repeats_the_store_without_its_password(
    store: str, shown: str
) -> None:
    hint = _hint(store)
    assert shlex.split(hint) == ["--store", shown]
    assert "s3cret" not in hint and "p%40ss" not in hint


@pytest.mark.parametrize("store", [None, ""])
def test_no_store_flag_adds_nothing(store: str | None) -> None:
    assert _hint(store) == ""
    assert store_hint(argparse.Namespace()) == ""
