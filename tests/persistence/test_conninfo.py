"""Connection strings are shown only with their password masked, in every form libpq accepts.

``mask_conninfo`` is checked against libpq itself (through psycopg's
``conninfo_to_dict``): for generated passwords written in each form libpq reads (URI
user information, ``?password=``, keyword/value pairs unquoted with backslash escapes
or single-quoted, blanks around ``=``, ``sslpassword``), libpq reads the password back
from the original string, and from the masked string it reads ``***`` and every other
field unchanged. Malformed strings (which libpq refuses, and which the command line
prints) are masked conservatively; the store's errors about them quote nothing secret.
"""

from __future__ import annotations

import argparse
import traceback
import urllib.parse
from pathlib import Path

import psycopg
import pytest
from hypothesis import given, settings, strategies as st
from psycopg.conninfo import conninfo_to_dict

from dsh_trio.cli import main
from dsh_trio.cli._config import UsageError
from dsh_trio.cli._store import STORE_ENV, store_hint, store_of
from dsh_trio.persistence._conninfo import mask_in
from dsh_trio.persistence._pg_pool import describe_dsn
from dsh_trio.persistence.postgres import PostgresPersistence, mask_conninfo

SECRET = "s3cret-Pa55"


@pytest.mark.parametrize(
    ("conninfo", "shown"),
    [
        ("postgresql://me:s3cret-Pa55@db/app", "postgresql://me:***@db/app"),
        ("postgres://me:s3cret-Pa55@db:5/app", "postgres://me:***@db:5/app"),
        ("postgresql://me@db/app", "postgresql://me@db/app"),
        ("postgresql:///app", "postgresql:///app"),
        (
            "postgresql://db/app?sslmode=require&password=s3cret-Pa55",
            "postgresql://db/app?sslmode=require&password=***",
        ),
        (
            "postgresql://db/app?p%61ssword=s3cret-Pa55",
            "postgresql://db/app?p%61ssword=***",
        ),
        (
            "postgresql://db/app?sslpassword=s3cret-Pa55",
            "postgresql://db/app?sslpassword=***",
        ),
        (
            "postgresql://me:s3cret-Pa55@[::1]:5432,h2/d",
            "postgresql://me:***@[::1]:5432,h2/d",
        ),
        # Unencoded characters in the password: more is masked, never less.
        ("postgresql://me:s3cret@Pa55@db/app", "postgresql://me:***@db/app"),
        ("postgresql://me:s3cret/Pa55@db/app", "postgresql://me:***@db/app"),
        ("postgresql://me:s3cret?Pa55@db/app", "postgresql://me:***@db/app"),
        # A mistyped scheme is no excuse.
        ("postgresq://me:s3cret-Pa55@db/app", "postgresq://me:***@db/app"),
        ("host=db password=s3cret-Pa55 dbname=app", "host=db password=*** dbname=app"),
        ("host=db password = s3cret-Pa55", "host=db password = ***"),
        ("password='s3cret Pa55' host=db", "password=*** host=db"),
        (r"password='s3cret\' Pa55' host=db", "password=*** host=db"),
        (r"password=s3cret\ Pa55 host=db", "password=*** host=db"),
        ("host=db\tsslpassword=s3cret-Pa55", "host=db\tsslpassword=***"),
        (
            "dbname='host=x password=s3cret-Pa55' user=me",
            "dbname='host=x password=***' user=me",
        ),
        # Malformed (libpq refuses these): still nothing shown.
        ("host=db password='s3cret Pa55", "host=db password=***"),
        ("host=db password s3cret-Pa55", "host=db password ***"),
        ("host=db passwords3cret-Pa55", "host=db password***"),
        ("host=db PASSWORD=s3cret-Pa55", "host=db PASSWORD=***"),
        ("", ""),
    ],
)
def test_every_form_is_masked(conninfo: str, shown: str) -> None:
    assert mask_conninfo(conninfo) == shown
    assert "s3cret" not in shown and "Pa55" not in shown


# ------------------------------------------------------------------ against libpq

#: Passwords libpq can carry: anything but NUL (a C string ends there).
passwords = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"], exclude_characters="\x00"),
    min_size=1,
    max_size=16,
)
words = st.text("abcdefghij", min_size=1, max_size=6)
KEYWORD_BLANKS = " \t\n\r\f\v"


def quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def escaped(value: str) -> str:
    """An unquoted keyword value: backslash before blanks, backslashes and quotes."""
    return "".join(f"\\{c}" if c in f"{KEYWORD_BLANKS}\\'" else c for c in value)


FORMS = {
    "uri userinfo": lambda p, w: (
        f"postgresql://{w}:{urllib.parse.quote(p, safe='')}@h/{w}"
    ),
    "postgres scheme": lambda p, w: (
        f"postgres://{w}:{urllib.parse.quote(p, safe='')}@h"
    ),
    "uri query": lambda p, w: (
        f"postgresql://h/{w}?password={urllib.parse.quote(p, safe='')}"
    ),
    "uri both": lambda p, w: (
        f"postgresql://u:{urllib.parse.quote(p, safe='')}@h/d?sslpassword="
        f"{urllib.parse.quote(p, safe='')}&application_name={w}"
    ),
    "keyword quoted": lambda p, w: f"host={w} password={quoted(p)} dbname={w}",
    "keyword unquoted": lambda p, w: f"password={escaped(p)} user={w}",
    "keyword blanks": lambda p, w: f" user = {w}\tpassword =\n{quoted(p)} ",
    "sslpassword": lambda p, w: (
        f"sslpassword={escaped(p)} password={quoted(p)} host={w}"
    ),
}


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(sorted(FORMS)), passwords, words)
def test_libpq_reads_the_password_from_the_string_and_only_stars_from_the_mask(
    form: str, password: str, word: str
) -> None:
    conninfo = FORMS[form](password, word)
    original = conninfo_to_dict(conninfo)
    assert password in (original.get("password"), original.get("sslpassword"))
    masked = mask_conninfo(conninfo)
    shown = conninfo_to_dict(masked)
    secret_keys = ("password", "sslpassword")
    assert {k: v for k, v in shown.items() if k not in secret_keys} == {
        k: v for k, v in original.items() if k not in secret_keys
    }
    assert {shown[k] for k in secret_keys if k in shown} == {"***"}
    # No spelling of the password is left, unless the string shows it anyway (in its
    # scheme, a keyword, the other words).
    around = FORMS[form]("\x01", word)
    spellings = {password, urllib.parse.quote(password, safe=""), escaped(password)}
    for spelling in spellings:
        if len(spelling) >= 3 and spelling not in around:
            assert spelling not in masked.replace("***", "\x01")


# ------------------------------------------------------------------ where it is shown


@pytest.mark.parametrize(
    "store", ["host=db password=s3cret-Pa55", "mysql://me:s3cret-Pa55@db/app"]
)
def test_a_store_that_is_no_uri_is_refused_with_its_password_masked(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(UsageError) as caught:
        store_of(argparse.Namespace(store=store), environ={})
    assert str(caught.value) == (
        f"--store must be a postgresql:// URI, got {mask_conninfo(store)!r}"
    )
    assert "s3cret" not in str(caught.value)
    with pytest.raises(UsageError) as caught:
        store_of(argparse.Namespace(store=None), environ={STORE_ENV: store})
    assert "s3cret" not in str(caught.value)


def test_the_command_line_prints_the_store_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = "host=db password='s3cret Pa55'"
    code = main(["export", "s1", "--to", str(tmp_path), "--store", store])
    err = capsys.readouterr().err
    assert code == 2
    assert "got 'host=db password=***'" in err
    assert "s3cret" not in err and "Pa55" not in err
    monkeypatch.setenv(STORE_ENV, store)
    log = tmp_path / "session.v3.jsonl"
    log.write_text("")
    assert main(["import", str(log)]) == 2
    err = capsys.readouterr().err
    assert "password=***" in err and "s3cret" not in err


def test_the_resume_hint_masks_every_form() -> None:
    hint = store_hint(
        argparse.Namespace(store="postgresql://me:s3cret@db/app?p%61ssword=x1")
    )
    assert hint == " --store 'postgresql://me:***@db/app?p%61ssword=***'"


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://me:s3cret%zzPa55@db/app",  # libpq quotes the bad token
        "postgresql://me:s3cret-Pa55@[::1/app",  # libpq quotes the whole URI
        "host=db password='s3cret-Pa55",
    ],
)
async def test_the_store_refuses_an_unreadable_string_without_quoting_it(
    dsn: str,
) -> None:
    store = PostgresPersistence(dsn)
    with pytest.raises(psycopg.ProgrammingError) as caught:
        await store.list()
    text = "".join(traceback.format_exception(caught.value))
    assert "is not valid" in text
    assert "s3cret" not in text and "Pa55" not in text
    assert caught.value.__context__ is None
    # Nor do the reprs of the store and of what holds its pool.
    assert "s3cret" not in repr(store)
    assert "s3cret" not in repr(store._heartbeat)


def test_describe_dsn_and_mask_in() -> None:
    shown = describe_dsn("host=h dbname='host=x password=s3cret' user=me")
    assert "dbname=host=x password=***" in shown
    assert "s3cret" not in shown
    conninfo = "postgresql://me:s3cret%21@db/app"
    assert mask_in(f'bad "{conninfo}": s3cret%21 s3cret!', conninfo) == (
        'bad "postgresql://me:***@db/app": *** ***'
    )
    assert mask_in("a pw of pwd", "password=pw") == "a *** of pwd"
