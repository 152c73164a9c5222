"""A throwaway PostgreSQL cluster for the tests: initdb + pg_ctl on a Unix socket.

The server binaries come from the machine (``initdb`` on ``PATH`` or under
``/usr/lib/postgresql/*/bin``). PostgreSQL refuses to run as root, so when the
tests run as root the cluster belongs to the ``postgres`` system user (or
``nobody``), with its directories chowned to it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence

import attrs

SKIP_ENV = "DSH_TRIO_SKIP_POSTGRES"


class ClusterUnavailable(RuntimeError):
    """The PostgreSQL server could not be started here."""


def _bindir() -> str:
    initdb = shutil.which("initdb")
    if initdb is not None:
        return os.path.dirname(os.path.realpath(initdb))
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise ClusterUnavailable(
            "no PostgreSQL server binaries: initdb is not on PATH nor under "
            "/usr/lib/postgresql/*/bin (install the distribution's postgresql package)"
        )
    return os.path.dirname(found[-1])


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
    bindir = _bindir()
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


def acquire_shared() -> Cluster:
    """The test run's one cluster, started on first use (pair with :func:`release_shared`).

    Fails the calling test with a clear message when the server cannot start,
    unless ``DSH_TRIO_SKIP_POSTGRES=1`` is set (then skips it with that reason).
    """
    import pytest

    def unavailable(why: str) -> None:
        if os.environ.get(SKIP_ENV) == "1":
            pytest.skip(f"PostgreSQL is unavailable ({SKIP_ENV}=1): {why}")
        pytest.fail(
            "the PostgreSQL store tests need a PostgreSQL server and none can start: "
            f"{why}. Install the distribution's postgresql package (scripts/check "
            f"does when initdb is missing), or set {SKIP_ENV}=1 to skip these tests.",
            pytrace=False,
        )

    if not _shared:
        try:
            import psycopg  # noqa: F401
        except ImportError as exc:
            unavailable(
                f"psycopg is not installed ({exc}); pip install 'dsh-trio[postgres]'"
            )
        try:
            _shared.append(start_cluster())
        except ClusterUnavailable as exc:
            unavailable(str(exc))
    _users[0] += 1
    return _shared[0]


def release_shared() -> None:
    """One user of the shared cluster is done; the last one stops it."""
    _users[0] -= 1
    if _users[0] <= 0 and _shared:
        _shared.pop().stop()
