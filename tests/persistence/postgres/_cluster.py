"""A throwaway PostgreSQL cluster for the tests: initdb + pg_ctl on a Unix socket.

The server binaries come from the machine, never installed by the tests: the
directory named by ``DSH_TRIO_PG_BIN`` if set (and then only there), else
``initdb`` on ``PATH``, else the newest ``/usr/lib/postgresql/*/bin``. Without
them the PostgreSQL tests are skipped with one line in the summary, unless
``DSH_TRIO_REQUIRE_POSTGRES=1`` (``scripts/check`` sets it under CI): then they
fail. PostgreSQL refuses to run as root, so when the tests run as root the
cluster belongs to the ``postgres`` system user (or ``nobody``), with its
directories chowned to it.

Each test process (each pytest-xdist worker) starts its own cluster in its own
temporary directory; a cluster listens on no TCP address, only on a socket in
that directory, so clusters never collide.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

#: Names the directory holding ``initdb`` and ``pg_ctl`` (then nothing else is searched).
BIN_ENV = "DSH_TRIO_PG_BIN"
#: ``1``: missing server binaries fail the PostgreSQL tests instead of skipping them.
REQUIRE_ENV = "DSH_TRIO_REQUIRE_POSTGRES"
#: ``1``: a server that cannot start skips the PostgreSQL tests instead of failing them.
SKIP_ENV = "DSH_TRIO_SKIP_POSTGRES"
#: Where the distribution's packages put the server binaries, one directory per version.
INSTALLED = "/usr/lib/postgresql/*/bin"


class ClusterUnavailable(RuntimeError):
    """The PostgreSQL server could not be started here."""


class NotInstalled(ClusterUnavailable):
    """The server binaries (or the psycopg driver) are not installed here."""


def _version(bindir: str) -> tuple[int, ...]:
    name = os.path.basename(os.path.dirname(bindir))
    return tuple(int(part) for part in re.findall(r"\d+", name))


def find_bindir(
    environ: Mapping[str, str] | None = None, *, installed: str = INSTALLED
) -> str:
    """The directory of the PostgreSQL server binaries (``initdb``, ``pg_ctl``).

    ``$DSH_TRIO_PG_BIN`` if set (only there); else the directory of the ``initdb``
    found on ``$PATH`` (symlinks resolved); else the highest version under
    ``installed``.

    Raises:
        NotInstalled: none there, saying where it looked.
    """
    env = os.environ if environ is None else environ
    named = env.get(BIN_ENV, "")
    if named:
        if os.access(os.path.join(named, "initdb"), os.X_OK):
            return named
        raise NotInstalled(f"{BIN_ENV}={named} holds no executable initdb")
    initdb = shutil.which("initdb", path=env.get("PATH", os.defpath))
    if initdb is not None:
        return os.path.dirname(os.path.realpath(initdb))
    found = [
        os.path.dirname(path)
        for path in glob.glob(os.path.join(installed, "initdb"))
        if os.access(path, os.X_OK)
    ]
    if not found:
        raise NotInstalled(
            f"no initdb on PATH nor under {installed}, and {BIN_ENV} is not set"
        )
    return max(found, key=_version)


def _run_as() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise ClusterUnavailable("running as root and there is no postgres or nobody user")


@attrs.define
class Cluster:
    """A running cluster; :meth:`dsn` names a database on it."""

    base: str
    bindir: str
    user: pwd.struct_passwd | None
    _databases: int = 0

    @property
    def socket_dir(self) -> str:
        return os.path.join(self.base, "sock")

    @property
    def role(self) -> str:
        return (
            self.user.pw_name
            if self.user is not None
            else pwd.getpwuid(os.geteuid()).pw_name
        )

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host={self.socket_dir} port=54329 user={self.role} dbname={dbname}"

    def _cmd(
        self, args: Sequence[str], *, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, object] = {}
        if self.user is not None:
            kwargs = {"user": self.user.pw_uid, "group": self.user.pw_gid}
        return subprocess.run(  # type: ignore[call-overload, no-any-return]
            [os.path.join(self.bindir, args[0]), *args[1:]],
            capture_output=True,
            text=True,
            check=check,
            cwd=self.base,
            timeout=120,
            **kwargs,
        )

    def uri(self, dsn: str) -> str:
        """``dsn`` (made by :meth:`dsn`) as a ``postgresql://`` URI."""
        parts = dict(item.split("=", 1) for item in dsn.split())
        return (
            f"postgresql://{parts['user']}@/{parts['dbname']}"
            f"?host={parts['host']}&port={parts['port']}"
        )

    def new_database(self) -> str:
        """Create a fresh empty database; returns its DSN."""
        import psycopg

        self._databases += 1
        name = f"t{os.getpid()}_{self._databases}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def stop(self) -> None:
        self._cmd(
            [
                "pg_ctl",
                "-D",
                os.path.join(self.base, "data"),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
            check=False,
        )
        shutil.rmtree(self.base, ignore_errors=True)


def start_cluster(*, fast: bool = True) -> Cluster:
    """initdb and start a cluster in a new temporary directory.

    ``fast`` turns fsync off (tests do not crash the server, only its clients).

    Raises:
        ClusterUnavailable: with what went wrong.
    """
    bindir = find_bindir()
    user = _run_as()
    base = tempfile.mkdtemp(prefix="dsh-pg-")
    os.chmod(base, 0o755)
    os.makedirs(os.path.join(base, "sock"))
    if user is not None:
        for path in (base, os.path.join(base, "sock")):
            os.chown(path, user.pw_uid, user.pw_gid)
    cluster = Cluster(base, bindir, user)
    data = os.path.join(base, "data")
    try:
        init = cluster._cmd(
            [
                "initdb",
                "-D",
                data,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "-U",
                cluster.role,
            ],
            check=False,
        )
        if init.returncode != 0:
            raise ClusterUnavailable(
                f"initdb failed: {init.stderr.strip() or init.stdout.strip()}"
            )
        opts = f"-c listen_addresses='' -c unix_socket_directories={cluster.socket_dir} -p 54329 -c max_connections=200"
        if fast:
            opts += " -c fsync=off -c full_page_writes=off"
        started = cluster._cmd(
            [
                "pg_ctl",
                "-D",
                data,
                "-o",
                opts,
                "-l",
                os.path.join(base, "log"),
                "-w",
                "-t",
                "60",
                "start",
            ],
            check=False,
        )
        if started.returncode != 0:
            log = ""
            with contextlib.suppress(OSError), open(os.path.join(base, "log")) as f:
                log = f.read()[-2000:]
            raise ClusterUnavailable(
                f"pg_ctl start failed: {started.stderr.strip()} {log}"
            )
    except BaseException:
        cluster.stop()
        raise
    return cluster


@contextlib.contextmanager
def running_cluster(*, fast: bool = True) -> Iterator[Cluster]:
    cluster = start_cluster(fast=fast)
    try:
        yield cluster
    finally:
        cluster.stop()


_shared: list[Cluster] = []
_users: list[int] = [0]
#: Why this process's cluster could not start (it is tried once per process).
_failed: list[ClusterUnavailable] = []

#: How every skip of the PostgreSQL tests starts (:func:`fold_skip` folds them by it).
SKIPPED = "PostgreSQL tests SKIPPED:"

_HOW = (
    f"set {BIN_ENV} to the directory of initdb and pg_ctl, or install the "
    "distribution's postgresql package"
)


def unavailable_outcome(
    error: ClusterUnavailable, environ: Mapping[str, str] | None = None
) -> tuple[bool, str]:
    """Whether the PostgreSQL tests skip (``True``) or fail when ``error`` stops the server.

    Missing binaries or driver skip them, unless ``DSH_TRIO_REQUIRE_POSTGRES=1``;
    a server that is installed but cannot start fails them, unless
    ``DSH_TRIO_SKIP_POSTGRES=1`` (and not required). Returns the verdict and the
    message to show.
    """
    env = os.environ if environ is None else environ
    required = env.get(REQUIRE_ENV) == "1"
    if required:
        return False, (
            f"{REQUIRE_ENV}=1 and PostgreSQL is unavailable: {error} ({_HOW})"
        )
    if isinstance(error, NotInstalled):
        return True, (
            f"{SKIPPED} no server here: {error} ({_HOW}; "
            f"{REQUIRE_ENV}=1 makes this a failure)"
        )
    if env.get(SKIP_ENV) == "1":
        return True, f"{SKIPPED} {SKIP_ENV}=1 and the server cannot start: {error}"
    return False, (
        f"the PostgreSQL tests need a server and it cannot start: {error}. "
        f"Set {SKIP_ENV}=1 to skip these tests."
    )


def acquire_shared() -> Cluster:
    """This process's one cluster, started on first use (pair with :func:`release_shared`).

    When it cannot start, skips or fails the calling test as
    :func:`unavailable_outcome` says (always from the same line, so the skips fold
    into one line of the summary).
    """
    import pytest

    if not _shared and not _failed:
        try:
            try:
                import psycopg  # noqa: F401
            except ImportError as exc:
                raise NotInstalled(
                    f"psycopg is not installed ({exc}); pip install -e '.[test]'"
                ) from exc
            _shared.append(start_cluster())
        except ClusterUnavailable as exc:
            _failed.append(exc)
    if _failed:
        skip, message = unavailable_outcome(_failed[0])
        if skip:
            pytest.skip(message)
        pytest.fail(message, pytrace=False)
    _users[0] += 1
    return _shared[0]


def release_shared() -> None:
    """One user of the shared cluster is done; the last one stops it."""
    _users[0] -= 1
    if _users[0] <= 0 and _shared:
        _shared.pop().stop()


def fold_skip(report: Any) -> None:
    """Point a PostgreSQL skip's report at :func:`acquire_shared`, not at its test.

    pytest locates a skip raised in a fixture at the test, so ``-ra`` would print
    one line per test; located at one place with one reason, the skips fold into
    one line of the summary (``SKIPPED [N] .../_cluster.py:L: PostgreSQL tests
    SKIPPED: ...``). Called from ``tests/conftest.py``'s report hook.
    """
    longrepr = getattr(report, "longrepr", None)
    if (
        getattr(report, "skipped", False)
        and isinstance(longrepr, tuple)
        and len(longrepr) == 3
        and str(longrepr[2]).removeprefix("Skipped: ").startswith(SKIPPED)
    ):
        report.longrepr = (
            __file__,
            acquire_shared.__code__.co_firstlineno,
            longrepr[2],
        )
